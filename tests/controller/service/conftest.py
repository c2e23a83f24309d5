"""Fixtures for tests that run `relaunch controller` as real processes, and a second region."""

from __future__ import annotations

import uuid

import pytest

from tests.support.daemon import ControllerProcess, topic_settings
from tests.support.regions import region_b  # noqa: F401 (a second Vertex region, for placements)


@pytest.fixture
def controllers():
    """Start controller processes through this, so none outlives its test, even a failed one."""
    started = []

    def start(*args, **kwargs) -> ControllerProcess:
        process = ControllerProcess(*args, **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def settings(tmp_path):
    """Settings for one test's controllers: a SQLite store and topics of its own."""
    return {
        "RELAUNCH_STATE_STORE": f"sqlite:///{tmp_path}/state.db",
        "RELAUNCH_RECONCILE_SECONDS": "1",
        **topic_settings(uuid.uuid4().hex[:6]),
    }
