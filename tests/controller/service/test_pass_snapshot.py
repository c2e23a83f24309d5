"""The periodic pass reads each live job once: its listing's copy of the job (document, cancel
record, probe choice) is what the job's next look starts from. Counted at devstack's side with
the real clients; the copy never hides a change this controller made or was told about."""

from __future__ import annotations

import json
import threading

from controller.adapters.checkpoints import CheckpointProbe
from controller.service.intake import Intake
from controller.store.keys import JOBS_PREFIX
from tests.controller.service.test_engine_live_work import gcs_store_engine, simulated_request
from tests.support.engine import accept, drive, terminal

JOBS = 5


def _running(engine, bucket: str, prefix: str, count: int) -> list[str]:
    job_ids = [f"{prefix}-{i}" for i in range(count)]
    for job_id in job_ids:
        accept(engine, simulated_request(job_id, bucket), {})
    for job_id in job_ids:
        drive(engine, job_id, lambda d: d["phase"] == "running")
    return job_ids


def _settled(engine) -> None:
    """Passes until one writes nothing (the first looks after a start record what they learn)."""
    for _ in range(10):
        versions = {r.key: r.version for r in engine.store.list_live(JOBS_PREFIX)}
        engine.run_pass()
        if versions == {r.key: r.version for r in engine.store.list_live(JOBS_PREFIX)}:
            return
    raise AssertionError("the jobs kept changing")


def test_a_pass_over_live_jobs_lists_once_and_reads_no_job_document(devstack, bucket, alerts_topic):
    # Probes are counted in their own test.
    engine = gcs_store_engine(devstack, bucket, alerts_topic, progress_probes_per_pass=0)
    job_ids = _running(engine, bucket, "steady", JOBS)
    _settled(engine)
    devstack.gcs.calls.reset()
    devstack.vertex.calls.reset()

    engine.run_pass()

    calls = [(kind, path) for kind, path in devstack.gcs.calls.recent() if f"/b/{bucket}/" in path]
    # The listings, and whatever names one of these jobs. (The pass also looks at the job of
    # every live CustomJob it lists, so one another test left running on the shared devstack
    # costs a read of a record this bucket does not hold: not this claim.)
    calls = [(kind, path) for kind, path in calls if "?prefix=" in path or any(j in path for j in job_ids)]
    # Two listings (live jobs, cancel records) and nothing else: no job is read, no cancel looked up.
    assert sorted(kind for kind, _ in calls) == ["GET list", "GET list"], calls
    assert not [p for _, p in calls if any(job_id in p for job_id in job_ids)], calls
    vertex = [kind for kind, _ in devstack.vertex.calls.recent()]
    assert vertex == ["ListCustomJobs"], vertex  # one page holds them all; no Get per job


def test_a_cancel_recorded_by_another_instance_is_applied_by_the_next_pass(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    (job_id,) = _running(engine, bucket, "elsewhere", 1)
    _settled(engine)
    # A controller instance that is not the leader records the cancel; its enqueue reaches no one.
    other = Intake(engine.store, engine.settings, engine.alerts, enqueue=lambda job_id: None)
    other.accept(json.dumps({"jobId": job_id, "action": "cancel"}).encode(), {})

    engine.run_pass()

    assert engine.store.get(f"{JOBS_PREFIX}{job_id}").document["state"]["cancel_requested"] is True
    assert drive(engine, job_id, terminal)["phase"] == "cancelled"


def test_a_cancel_after_the_pass_listed_is_not_hidden_by_the_listing(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    (job_id,) = _running(engine, bucket, "late", 1)
    _settled(engine)
    engine.sources.run_pass()  # listed (no cancel then) and enqueued, not served yet

    accept(engine, json.dumps({"jobId": job_id, "action": "cancel"}).encode(), {})
    engine.serve()  # one look: it must see the cancel, though the pass's copy has none

    document = engine.store.get(f"{JOBS_PREFIX}{job_id}").document
    assert document["state"]["cancel_requested"] is True
    assert drive(engine, job_id, terminal)["phase"] == "cancelled"


class _CountingProbe(CheckpointProbe):
    """The real probe, counting its calls and how many were in flight together."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = self.calls = 0
        self.done = threading.Condition(self.lock)

    def latest(self, checkpoint_uri: str):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return super().latest(checkpoint_uri)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.calls += 1
                self.done.notify_all()


def test_the_passes_probes_all_run_on_the_one_worker_the_sweep_may_take(devstack, bucket, alerts_topic):
    # The pass's looks (and so its probes) take one worker at a time (workqueue.WorkQueue,
    # `max_sweeping`), so that a Vertex event always finds a free worker and shares the
    # interpreter with one sweep look at most.
    workers, probes = 8, 4
    engine = gcs_store_engine(devstack, bucket, alerts_topic, progress_probes_per_pass=probes)
    job_ids = _running(engine, bucket, "probed", probes)
    _settled(engine)
    probe = _CountingProbe()
    engine.reconciler.observer.checkpoints = probe
    engine.queue.start(workers, engine.sources.serve, name="test-reconcile")
    try:
        engine.sources.run_pass()
        with probe.lock:
            assert probe.done.wait_for(lambda: probe.calls == probes, timeout=120), probe.calls
    finally:
        engine.queue.stop()

    assert probe.most_in_flight == 1  # every probe made, one at a time
    for job_id in job_ids:
        engine.cancel(job_id)
