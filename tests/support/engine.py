"""Helpers for tests that drive the controller's service layer against devstack through real
clients: the reconciler, its work queue and sources, served on the test's own thread."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from google.cloud import pubsub_v1

from controller.core import events as ev
from controller.core.decide import decide
from controller.core.model import TERMINAL_PHASE_NAMES, JobState
from controller.readmodel.jobs import status_document
from controller.service.alerts import ReconcileHealth
from controller.service.gauges import Gauges
from controller.service.intake import Intake, IntakeResult
from controller.service.reconciler import Dependencies, Deposed, Reconciler
from controller.service.sources import Sources
from controller.service.workqueue import WorkQueue
from controller.store.keys import job_key

PROJECT = "relaunch-dev"
REGION = "us-central1"
FAKE_TRAINER = str(Path(__file__).with_name("fake_trainer.py"))


class LocalController:
    """The daemon's service layer without its threads: the intake, sources and work queue of
    one controller, with every queued job id served on the caller's thread (`serve`)."""

    def __init__(self, settings, deps: Dependencies, **reconciler_options):
        self.settings = settings
        self.deposed: str | None = None  # why the reconciler stepped down, once it did
        self.reconciler = Reconciler(settings, deps, on_deposed=self._on_deposed, **reconciler_options)
        self.queue = WorkQueue()
        health = ReconcileHealth(deps.alerts, settings.degraded_after_failed_passes)
        self.sources = Sources(self.reconciler, self.queue, health=health)
        self.store, self.alerts = deps.store, deps.alerts

    def _on_deposed(self, reason: str) -> None:
        self.deposed = reason
        self.queue.clear()

    @property
    def vertex(self):
        return self.reconciler.vertex

    @vertex.setter
    def vertex(self, backend) -> None:
        """Swap the Vertex adapter (a test's subclass of the real one)."""
        self.reconciler.vertex = self.reconciler.observer.vertex = backend

    @property
    def guard(self):
        return self.reconciler.guard

    @guard.setter
    def guard(self, guard) -> None:
        self.reconciler.guard = guard

    @property
    def clock(self):
        return self.reconciler.clock

    @property
    def metrics(self):
        return self.reconciler.metrics

    @metrics.setter
    def metrics(self, metrics) -> None:
        """Export metrics from now on, as the daemon wires them."""
        self.reconciler.metrics = metrics
        gauges = Gauges(metrics, self.store, self.settings, self.reconciler.clock)
        self.reconciler.on_transition.append(gauges.transition)
        self.sources.gauges = gauges

    @property
    def intervals(self):
        return self.reconciler.intervals

    @property
    def fence(self):
        return self.reconciler.fence

    @fence.setter
    def fence(self, value) -> None:
        self.reconciler.fence = value

    def intake(self) -> Intake:
        r = self.reconciler
        return Intake(
            self.store,
            self.settings,
            self.alerts,
            enqueue=self.sources.enqueue,
            enqueue_created=self.sources.enqueue_created,
            remember=r.remember_request,
            clock=r.clock,
            metrics=r.metrics,
        )

    def serve(self) -> int:
        """Reconcile every job id that is due now; raises Deposed once the reconciler stepped down."""
        served = self.queue.run_ready(self.sources.serve)
        if self.deposed is not None:
            raise Deposed(self.deposed)
        return served

    def run_pass(self) -> None:
        """One periodic pass (it only enqueues), then serve what it enqueued."""
        self.sources.run_pass()
        self.serve()

    def on_hint(self, vertex_job_id: str) -> None:
        self.sources.on_hint(vertex_job_id)
        self.serve()

    def cancel(self, job_id: str) -> IntakeResult:
        """A user's cancel, through the intake like any request."""
        result = self.intake().accept(json.dumps({"jobId": job_id, "action": "cancel"}).encode())
        self.serve()
        return result


def record_as_another_controller(engine: LocalController, job_id: str, event: ev.Event) -> None:
    """Another controller instance decided on `event` for the job and stored the outcome."""
    record = engine.store.get(job_key(job_id))
    state = JobState.from_dict(record.document["state"])
    decision = decide(state, event, time.time(), engine.reconciler.rng, engine.reconciler.core_config)
    document = {**record.document, "state": decision.state.to_dict()}
    engine.store.put(job_key(job_id), document, expected_version=record.version)


def accept(engine: LocalController, body: bytes, attributes: dict[str, str] | None = None) -> IntakeResult:
    """Hand one request to the intake, as the Pub/Sub callback does."""
    return engine.intake().accept(body, attributes or {})


def job_document(engine: LocalController, job_id: str) -> dict | None:
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
    """Run the controller (due job ids, periodic passes) until `until(doc)` holds or time runs out."""
    deadline = time.monotonic() + timeout
    doc = job_document(engine, job_id)
    while time.monotonic() < deadline:
        engine.serve()
        if reconcile:
            engine.run_pass()
        if hints is not None:
            hints()
        doc = job_document(engine, job_id)
        if until(doc):
            return doc
        engine.queue.wait_for_work(0.1)
    raise AssertionError(f"condition not reached in {timeout}s; job is {json.dumps(doc)[:2000]}")


def vertex_jobs_for(stack, job_id):
    return [j for j in stack.vertex.jobs() if j.labels.get("relaunch-job") == job_id]


def terminal(doc):
    return doc["phase"] in TERMINAL_PHASE_NAMES
