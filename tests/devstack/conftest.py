"""Helpers for tests that drive `relaunch devstack` as a user would: as a command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture
def relaunch():
    """Run the installed `relaunch` command; returns the CompletedProcess (text mode)."""
    command = os.path.join(os.path.dirname(sys.executable), "relaunch")

    def run(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([command, *args], capture_output=True, text=True, timeout=timeout, env=env)

    return run


# Pub/Sub tests: each runs against devstack's Pub/Sub and Google's emulator (`pubsub_backend`,
# tests/support/pubsub_backends.py), reached through the real clients.
@pytest.fixture(scope="module")
def publisher(pubsub_backend):
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient()


@pytest.fixture(scope="module")
def raw_publisher(pubsub_backend):
    """The generated client: its publish() sends one PublishRequest as given, without the
    batching client's own checks (it refuses empty and oversized batches before sending)."""
    from google.auth.credentials import AnonymousCredentials
    from google.pubsub_v1 import PublisherClient

    return PublisherClient(credentials=AnonymousCredentials())


@pytest.fixture(scope="module")
def subscriber(pubsub_backend):
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    yield client
    client.close()
