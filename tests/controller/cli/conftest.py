"""Every CLI test gets its own, empty CLI config directory and leaves os.environ as it found it:
`relaunch` copies its config into the environment, and a developer's own
~/.config/relaunch or devstack must never leak into a test (nor a test's into the next)."""

from __future__ import annotations

import os
import uuid

import pytest
from google.cloud import pubsub_v1

from tests.support.engine import PROJECT


@pytest.fixture(autouse=True)
def isolated_cli_config(tmp_path, monkeypatch):
    saved = dict(os.environ)
    monkeypatch.setenv("RELAUNCH_CONFIG_DIR", str(tmp_path / "relaunch-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    # Set and empty: no devstack layer, not even the one of a devstack a developer runs in this
    # checkout (the CLI would find .devstack/ above the working directory).
    monkeypatch.setenv("RELAUNCH_DEVSTACK_DIR", "")
    yield tmp_path / "relaunch-config"
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def state_env(tmp_path, monkeypatch):
    """Point the CLI at the SQLite file `make_engine` writes (it lives in the same tmp_path)."""
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{tmp_path / 'state.db'}")


@pytest.fixture
def requests_topic(devstack, monkeypatch):
    """A fresh requests topic the CLI publishes to, and a subscription to read what it sent."""
    name = f"requests-{uuid.uuid4().hex[:8]}"
    topic = f"projects/{PROJECT}/topics/{name}"
    subscription = f"projects/{PROJECT}/subscriptions/{name}-read"
    pubsub_v1.PublisherClient().create_topic(name=topic)
    pubsub_v1.SubscriberClient().create_subscription(name=subscription, topic=topic)
    monkeypatch.setenv("RELAUNCH_REQUESTS_TOPIC", name)
    return subscription
