"""Helpers for tests that drive the controller's engine against devstack through real clients."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from google.cloud import pubsub_v1

from controller.core.model import TERMINAL_PHASE_NAMES
from controller.readmodel.jobs import status_document
from controller.service.engine import Engine
from controller.service.intake import Intake, IntakeResult
from controller.store.keys import job_key

PROJECT = "relaunch-dev"
REGION = "us-central1"
FAKE_TRAINER = str(Path(__file__).with_name("fake_trainer.py"))


def accept(engine: Engine, body: bytes, attributes: dict[str, str] | None = None) -> IntakeResult:
    """Hand one request to the intake, as the Pub/Sub callback does."""
    return Intake(engine).accept(body, attributes or {})


def job_document(engine: Engine, job_id: str) -> dict | None:
    """The user's view of a job (what `relaunch status JOB --json` prints)."""
    record = engine.store.get(job_key(job_id))
    return status_document(record.document) if record else None


def request(job_id: str, bucket: str, *, args=(), replicas: int = 1, policy=None) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": [sys.executable, FAKE_TRAINER, *args],
        },
    }
    pools = [pool]
    if replicas > 1:
        pools.append({**pool, "replicaCount": replicas - 1})
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": pools, "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
        "restartPolicy": policy or {"backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
    }
    return json.dumps(body).encode()


def read_alerts(subscription: str, want: int = 1, timeout: float = 20.0) -> list[dict]:
    """Pull alerts from the alerts topic with the real subscriber client."""
    subscriber = pubsub_v1.SubscriberClient()
    found: list[dict] = []
    import time as _time

    deadline = _time.monotonic() + timeout
    while len(found) < want and _time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
        for received in response.received_messages:
            found.append(json.loads(received.message.data))
        if response.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
    return found


def drive(engine, job_id, until, *, timeout=60.0, reconcile=True, hints=None):
    """Run the controller's loop (timers, reconcile) until `until(doc)` holds or time runs out."""
    deadline = time.monotonic() + timeout
    doc = job_document(engine, job_id)
    while time.monotonic() < deadline:
        engine.fire_due_timers()
        if reconcile:
            engine.reconcile()
        if hints is not None:
            hints()
        doc = job_document(engine, job_id)
        if until(doc):
            return doc
        engine.timers.wait(0.1)
    raise AssertionError(f"condition not reached in {timeout}s; job is {json.dumps(doc)[:2000]}")


def vertex_jobs_for(stack, job_id):
    return [j for j in stack.vertex.jobs() if j.labels.get("relaunch-job") == job_id]


def terminal(doc):
    return doc["phase"] in TERMINAL_PHASE_NAMES
