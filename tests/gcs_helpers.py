"""A GCS stand-in with one bucket, reached through the real storage client (for test fixtures)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from devstack.gcs import start_gcs


@contextlib.contextmanager
def gcs_client_with_bucket(bucket: str) -> Iterator[storage.Client]:
    """Start a fresh GCS stand-in, point STORAGE_EMULATOR_HOST at it, create `bucket`."""
    with start_gcs() as emulator, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        client = storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())
        client.create_bucket(bucket)
        yield client
