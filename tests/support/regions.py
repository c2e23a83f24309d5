"""A second Vertex region for tests of placements: the session devstack's Vertex is region A
(us-central1); `region_b` is a stand-in for europe-west4 on its own endpoint, as Vertex has one
per region, with the session devstack's short durations and job ids of its own."""

from __future__ import annotations

import time

import pytest

from devstack.vertex import start_vertex
from devstack.vertex.behaviour import VertexBehaviour
from tests.support.engine import PROJECT

A, B = "us-central1", "europe-west4"


@pytest.fixture
def region_b(tmp_path):
    emulator = start_vertex(
        project=PROJECT,
        region=B,
        workdir=str(tmp_path / "vertex-b"),
        provisioning_seconds=0.2,
        kill_grace_seconds=2.0,
        behaviour=VertexBehaviour(reclaim_grace_seconds=5.0, failed_error_delay_seconds=1.0),
        first_job_id=time.time_ns() // 1000 + 10**12,
    )
    yield emulator
    emulator.stop()


def two_node_spot_placement(name: str, region: str, price: float, machine: str) -> dict:
    """A placement of two one-replica pools on `machine` (CPU only) on Spot in `region`."""
    pool = {"machineType": machine, "acceleratorCount": 0, "replicaCount": 1}
    return {
        "name": name,
        "region": region,
        "workerPools": [pool, pool],
        "strategy": "SPOT",
        "pricePerNodeHour": price,
    }
