"""Placements end to end: the engine against two Vertex regions through the real Google clients.

Region A is the session devstack's Vertex (us-central1); region B (europe-west4) is a second
stand-in on its own endpoint, as Vertex has one per region. A 2-node job lists Spot in A (the
cheaper) and Spot in B. A stocks out: the attempt refused there is followed, in the same
decision, by one in B, created through B's endpoint. When A's capacity is back and B's attempt
is reclaimed, the next attempt goes back to A and resumes from the latest checkpoint.
"""

from __future__ import annotations

import json
import sys

from google.cloud.aiplatform_v1 import JobState

from devstack.vertex.testing import wait_until
from tests.support.engine import FAKE_TRAINER, accept, drive, terminal
from tests.support.regions import A, B, two_node_spot_placement

MACHINE = "e2-standard-4"  # a machine type no other test limits


def placement(name: str, region: str, price: float) -> dict:
    return two_node_spot_placement(name, region, price, MACHINE)


def placed_request(job_id: str, bucket: str) -> bytes:
    pool = {
        "machineSpec": {"machineType": MACHINE},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": [sys.executable, FAKE_TRAINER, "--steps", "1000000", "--every", "5"],
        },
    }
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool, pool], "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
        "restartPolicy": {"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
        "placements": [placement("spot-a", A, 1.0), placement("spot-b", B, 1.05)],
    }
    return json.dumps(body).encode()


def placed(attempt: dict) -> str:
    return attempt["placement"]["chosen"]


def test_a_stockout_moves_the_next_attempt_to_another_region_and_a_later_one_comes_back(
    devstack, bucket, make_engine, region_b
):
    endpoints = f"{A}={devstack.vertex.host_port},{B}={region_b.host_port}"
    engine = make_engine(regions=B, vertex_endpoints=endpoints)
    job_id = "placed-failover"
    devstack.vertex.set_capacity(0, MACHINE, "fail")  # Spot in A: none to be had
    try:
        assert accept(engine, placed_request(job_id, bucket)).status == "accepted"
        doc = drive(engine, job_id, lambda d: d["phase"] == "running", timeout=90)
        first, second = doc["attempts"]
        assert placed(first) == "spot-a" and first["ending"] == "capacity" and first["startedAt"] is None
        assert placed(second) == "spot-b" and "/locations/europe-west4/" in second["vertexJob"]
        assert second["requestedAt"] - first["endedAt"] < 5.0  # decided with the refusal, no backoff
        assert "refused this attempt" in second["placement"]["reason"]
        assert doc["failures"] == 0

        # A's capacity returns; B's attempt trains, commits, and is reclaimed.
        devstack.vertex.set_capacity(None, MACHINE)
        doc = drive(engine, job_id, lambda d: (d["latestCheckpointStep"] or 0) >= 5, timeout=90)
        assert region_b.preempt(second["vertexJob"], grace_seconds=5, end_job=True)
        doc = drive(engine, job_id, lambda d: d["attempt"] == 3 and d["phase"] == "running", timeout=90)
        third = doc["attempts"][2]
        assert doc["attempts"][1]["ending"] == "preempted"
        assert placed(third) == "spot-a" and "/locations/us-central1/" in third["vertexJob"]
        assert third["resumeFromStep"] is not None and third["resumeFromStep"] >= 5

        engine.cancel(job_id)
        doc = drive(engine, job_id, terminal, timeout=120)
        assert doc["phase"] == "cancelled" and doc["attempt"] == 3
        # One CustomJob per attempt, each in its own region; nothing left running in either.
        names = [j.name for j in region_b.jobs()] + [
            j.name for j in devstack.vertex.jobs() if dict(j.labels).get("relaunch-job") == job_id
        ]
        assert sorted(names) == sorted(a["vertexJob"] for a in doc["attempts"])
        wait_until(
            lambda: all(j.state != JobState.JOB_STATE_RUNNING for j in region_b.jobs()),
            timeout=60,
            what="B's jobs to end",
        )
    finally:
        devstack.vertex.set_capacity(None, MACHINE)
