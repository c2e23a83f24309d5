"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os

import pytest

# `pubsub_backend`: Pub/Sub tests run against devstack and Google's own emulator.
pytest_plugins = ["pytester", "tests.pubsub_backends"]


@pytest.fixture(scope="session")
def devstack(tmp_path_factory):
    """A fresh DevStack (Pub/Sub, GCS, Vertex AI stand-ins and the control server) for the
    session, with its environment (docs/contracts.md) in os.environ until the session ends.

    Lazy: only sessions with a test that asks for it start it.
    """
    from devstack.stack import DevStack  # imported here: tests that never ask pay nothing

    stack = DevStack(str(tmp_path_factory.mktemp("devstack"))).start()
    env = stack.env()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield stack
    finally:
        stack.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
