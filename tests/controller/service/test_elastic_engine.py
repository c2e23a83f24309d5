"""Shrink to fit, end to end: the engine against devstack through the real Google clients.

A 2-pool job of 4 replicas (chief 1 + 3 workers, at least 1 worker) meets a stockout that
leaves room for 2. Whether Vertex keeps such a job waiting (QUEUED or PENDING) or ends it with
its stockout error is *unknown*; each answer is a devstack knob and a case here. Either way the
job is resubmitted on 2 replicas and runs, ops hear it runs shrunk, and once capacity is back
the next attempt (after a reclaim) runs on all 4 again.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.aiplatform_v1 import JobState

from devstack.control import ControlClient
from devstack.vertex.testing import wait_until
from tests.support.engine import (
    FAKE_TRAINER,
    PROJECT,
    accept,
    drive,
    read_alerts,
    terminal,
    vertex_jobs_for,
)

MACHINE = "g2-standard-8"  # a machine type no other test asks for: the limit concerns this job only
SHRINK_AFTER = 3.0
FULL = [1, 3]
SHRUNK = [1, 1]


def elastic_request(job_id: str, bucket: str) -> bytes:
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
        "jobSpec": {
            "workerPoolSpecs": [pool, {**pool, "replicaCount": 3, "minReplicaCount": 1}],
            "scheduling": {"strategy": "SPOT"},
        },
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
        "restartPolicy": {"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
        "elastic": {"shrinkAfter": f"{SHRINK_AFTER:g}s", "growBack": "everyAttempt"},
    }
    return json.dumps(body).encode()


def replica_counts(devstack, vertex_name: str) -> list[int]:
    (job,) = [j for j in devstack.vertex.jobs() if j.name == vertex_name]
    return [pool.replica_count for pool in job.job_spec.worker_pool_specs]


def trainer_started(bucket: str, job_id: str, attempt: int) -> bool:
    """The fake trainer's chief writes this when it starts (tests/support/fake_trainer.py)."""
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    return client.bucket(bucket).blob(f"{job_id}/starts/attempt-{attempt:04d}.json").exists()


def wait_for_alert(subscription: str, job_id: str, kind: str, state: str, timeout: float = 60.0) -> dict:
    """The first alert of this kind and state for the job, pulled with the real subscriber."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for alert in read_alerts(subscription, want=1, timeout=min(10.0, timeout)):
            if (alert.get("jobId"), alert["kind"], alert["state"]) == (job_id, kind, state):
                return alert
    raise AssertionError(f"no {state} {kind} alert for {job_id} within {timeout}s")


@pytest.mark.parametrize(
    ("mode", "wait_state", "first_rule"),
    [
        ("queue", "QUEUED", "replaced-by-smaller"),  # Vertex keeps it waiting, shown QUEUED
        ("queue", "PENDING", "replaced-by-smaller"),  # ... or shown PENDING ("Waiting for ... provisioned")
        ("fail", "QUEUED", "capacity-before-start"),  # Vertex ends it with its stockout error
    ],
)
def test_a_stockout_shrinks_the_job_to_fit_and_it_grows_back_when_capacity_returns(
    devstack, bucket, make_engine, alerts_topic, mode, wait_state, first_rule
):
    job_id = f"elastic-{mode}-{wait_state.lower()}"
    control = ControlClient(devstack.env()["RELAUNCH_DEVSTACK_CONTROL"])
    engine = make_engine()
    control.configure(capacity_wait_state=wait_state)
    control.capacity(2, MACHINE, mode)
    try:
        assert accept(engine, elastic_request(job_id, bucket)).status == "accepted"
        doc = drive(engine, job_id, lambda d: d["attempt"] >= 2 and d["phase"] == "running", timeout=90)
        first, second = doc["attempts"][:2]
        assert first["ending"] == "capacity" and first["rule"] == first_rule and first["startedAt"] is None
        assert first["replicas"] == FULL and second["replicas"] == SHRUNK and second["shrunk"]
        assert doc["failures"] == 0 and doc["attempt"] == 2
        if mode == "queue":
            # Replaced only once it had waited shrinkAfter in Vertex's queue, and its CustomJob
            # was cancelled, not left to start later on machines the smaller gang needs.
            assert second["requestedAt"] - first["submittedAt"] >= SHRINK_AFTER
            devstack.vertex.wait_for_state(first["vertexJob"], {JobState.JOB_STATE_CANCELLED}, timeout=30)
        assert replica_counts(devstack, second["vertexJob"]) == SHRUNK  # what Vertex was asked for
        shrunk = wait_for_alert(alerts_topic[1], job_id, "running_shrunk", "firing")
        assert shrunk["details"]["replicas"] == SHRUNK and shrunk["details"]["requestedReplicas"] == FULL

        # Capacity comes back; the shrunk gang is reclaimed; the next attempt asks for all 4.
        control.capacity(None)
        wait_until(lambda: trainer_started(bucket, job_id, 2), timeout=60, what="attempt 2's trainer")
        assert devstack.vertex.preempt(second["vertexJob"], grace_seconds=5)
        doc = drive(engine, job_id, lambda d: d["attempt"] == 3 and d["phase"] == "running", timeout=90)
        third = doc["attempts"][2]
        assert doc["attempts"][1]["ending"] == "preempted" and doc["preemptions"] == 1
        assert third["replicas"] == FULL and not third["shrunk"]
        assert replica_counts(devstack, third["vertexJob"]) == FULL
        grown = wait_for_alert(alerts_topic[1], job_id, "running_shrunk", "resolved")
        assert "grown back" in grown["summary"]

        # The trainer runs until stopped (no timing to race): cancel, and count what was made.
        engine.cancel(job_id)
        doc = drive(engine, job_id, terminal, timeout=120)
        assert doc["phase"] == "cancelled" and doc["failures"] == 0 and doc["attempt"] == 3
        # One CustomJob per attempt, nothing duplicated.
        assert len(vertex_jobs_for(devstack, job_id)) == 3
    finally:
        control.capacity(None)
        control.configure(capacity_wait_state="QUEUED")
