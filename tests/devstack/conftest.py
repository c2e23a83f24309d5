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


# Pub/Sub stand-in tests: one fresh emulator per test module, reached through the real clients.
@pytest.fixture(scope="module")
def emulator():
    from devstack.pubsub.testing import running_emulator

    with running_emulator() as running:
        yield running


@pytest.fixture(scope="module")
def publisher(emulator):
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient()


@pytest.fixture(scope="module")
def subscriber(emulator):
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    yield client
    client.close()
