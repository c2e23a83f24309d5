"""Fixtures for the controller's tests."""

from __future__ import annotations

import random

import pytest

from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.pubsub import TopicPublisher
from controller.adapters.vertex import VertexBackend
from controller.service.alerts import AlertSink
from controller.service.reconciler import Dependencies
from controller.settings import Settings
from controller.store.sqlite import SqliteStateStore
from tests.support.engine import PROJECT, REGION, LocalController


@pytest.fixture
def make_engine(devstack, tmp_path, alerts_topic):
    """Build a controller's service layer (served on the test's thread) on a fresh SQLite store;
    calling it again reopens the same store (what a restarted controller sees)."""
    db = tmp_path / "state.db"

    def build(**overrides) -> LocalController:
        values = {
            "vertex_endpoint": devstack.vertex.host_port,
            "project": PROJECT,
            "region": REGION,
            "reconcile_seconds": 1,
            "submit_retry_seconds": 0.5,
            "error_settle_seconds": 10,
            "error_recheck_seconds": 0.5,
            "capacity_retry_seconds": 0.5,
            **overrides,
        }
        settings = Settings(**values)
        alerts = AlertSink(TopicPublisher(), alerts_topic[0], cooldown_seconds=0)
        deps = Dependencies(
            store=SqliteStateStore(db),
            vertex=VertexBackend(settings, retry_max_wait=0.5),
            checkpoints=CheckpointProbe(),
            alerts=alerts,
        )
        return LocalController(settings, deps, rng=random.Random(1))

    return build
