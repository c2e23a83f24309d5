"""Promises under faults that one engine shows against devstack: an unreadable checkpoint bucket
does not stop a job's ending, a cancel reaching a deposed instance is still recorded, and of two
CustomJobs for one attempt the recorded one survives."""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1

from controller.adapters.lease import LeaseNotHeld
from controller.adapters.vertex import VertexBackend
from controller.core import events as ev
from controller.request import parse_request
from controller.request.render import build_custom_job
from controller.service.reconciler import Deposed
from tests.support.engine import (
    accept,
    drive,
    job_document,
    read_alerts,
    record_as_another_controller,
    request,
    terminal,
    vertex_jobs_for,
)

LONG = ["--steps", "100000", "--step-seconds", "0.05"]


def test_a_checkpoint_bucket_that_answers_403_does_not_stop_the_ending(
    devstack, bucket, make_engine, alerts_topic
):
    """Finding 6: a 403 from the checkpoint bucket made every pass fail on that job: it stayed
    RUNNING for ever and controller_degraded stayed raised, masking other faults."""
    engine = make_engine()
    assert accept(engine, request("forbidden-1", bucket, args=["--steps", "3"])).status == "accepted"
    engine.serve()  # submits attempt 1
    (job,) = vertex_jobs_for(devstack, "forbidden-1")
    devstack.vertex.wait_for_state(job.name, {aiplatform_v1.JobState.JOB_STATE_SUCCEEDED}, timeout=60)
    devstack.gcs_faults(bucket=bucket, status=403)
    try:
        doc = drive(engine, "forbidden-1", terminal, timeout=30)
        for _ in range(3):  # more passes than it takes to raise controller_degraded
            engine.run_pass()
        assert not engine.alerts.is_firing("controller_degraded")
    finally:
        devstack.gcs_faults(bucket=bucket, status=None)
    assert doc["phase"] == "succeeded", doc
    assert doc["attempts"][-1]["progressUnknown"], "the ending should say its progress is unknown"
    alerts = [a for a in read_alerts(alerts_topic[1], want=1) if a["kind"] == "checkpoints_unreadable"]
    assert alerts and alerts[0]["details"]["bucket"] == bucket
    assert "storage.objects" in alerts[0]["details"]["permission"]


def test_a_cancel_reaching_a_deposed_instance_is_recorded_not_refused(devstack, bucket, make_engine):
    """Finding 7: the intake applied a cancel with a fenced write; on an instance whose lease was
    taken over that write was refused, the message nacked, and after 5 deliveries dead-lettered."""
    leader = make_engine()
    leader.fence = lambda: 5
    assert accept(leader, request("fenced-cancel", bucket, args=LONG)).status == "accepted"
    deposed = make_engine()  # the same store, as another controller instance sees it
    deposed.fence = lambda: 1  # its lease generation is older than the leader's

    result = accept(deposed, b'{"jobId": "fenced-cancel", "action": "cancel"}')

    assert result.status == "cancel"
    doc = drive(leader, "fenced-cancel", terminal, timeout=30)
    assert doc["phase"] == "cancelled", doc
    assert all(
        j.state.name.endswith(("CANCELLED", "CANCELLING")) for j in vertex_jobs_for(devstack, "fenced-cancel")
    )


class _RacedBackend(VertexBackend):
    """Our own adapter, raced: while this controller looks the attempt up, another controller
    creates a CustomJob for it and records that one in the store."""

    def __init__(self, settings, engine, **kwargs):
        super().__init__(settings, **kwargs)
        self.engine = engine
        self.raced: str | None = None

    def ensure_attempt(self, job_id, attempt, build, **kwargs):
        if self.raced is None:
            other = self.client.create_custom_job(parent=self.parent, custom_job=build(), timeout=30)
            self.raced = other.name
            record_as_another_controller(self.engine, job_id, ev.AttemptSubmitted(attempt, other.name))
        return super().ensure_attempt(job_id, attempt, build, **kwargs)


def test_duplicates_keep_the_recorded_custom_job_and_never_end_the_job(
    devstack, bucket, make_engine, alerts_topic
):
    """Finding 1: the adapter kept the oldest duplicate and cancelled the others while the core
    kept the one the store recorded: both were cancelled, and the job ended "cancelled outside
    Relaunch" although nobody had cancelled it."""
    engine = make_engine()
    body = request("dup-promise-1", bucket, args=["--steps", "3"])
    older = engine.vertex.client.create_custom_job(
        parent=engine.vertex.parent,
        custom_job=build_custom_job(parse_request(body), 1, resume_from=None, on_demand=False),
        timeout=30,
    )
    engine.vertex = _RacedBackend(engine.settings, engine, retry_max_wait=0.5)
    assert accept(engine, body).status == "accepted"

    doc = drive(engine, "dup-promise-1", terminal, timeout=60)

    assert doc["phase"] == "succeeded", doc
    assert doc["attempts"][0]["vertexJob"] == engine.vertex.raced
    states = {j.name: j.state.name for j in vertex_jobs_for(devstack, "dup-promise-1")}
    assert states[engine.vertex.raced].endswith("SUCCEEDED"), states
    assert states[older.name].endswith(("CANCELLED", "CANCELLING")), states
    assert not [
        a for a in read_alerts(alerts_topic[1], want=1, timeout=5) if a["kind"] == "job_cancelled_externally"
    ]


def test_an_alert_a_leader_decided_but_could_not_send_is_sent_by_the_next_leader(
    devstack, bucket, make_engine, alerts_topic
):
    """The job's failure was written, then the lease check before the page failed: the page was
    dropped and no later leader ever sent it, since the failure was already recorded. Alerts now
    travel in the job's outbox, written with the change that decided them."""
    leader = make_engine()

    def lease_lost_before_the_page(what: str) -> float:
        if what == "send an alert":
            raise LeaseNotHeld("the lease was taken over")
        return float("inf")

    leader.guard = lease_lost_before_the_page
    payload = request(
        "outbox-1",
        bucket,
        args=["--fail-with", "1", "--fail-at", "1"],
        policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
    )
    assert accept(leader, payload).status == "accepted"
    with pytest.raises(Deposed):
        drive(leader, "outbox-1", lambda doc: False, timeout=60)
    assert job_document(leader, "outbox-1")["phase"] == "failed"

    def job_failed_alerts(timeout: float) -> list[dict]:
        found = read_alerts(alerts_topic[1], want=1, timeout=timeout)
        return [a for a in found if a["kind"] == "job_failed" and a["jobId"] == "outbox-1"]

    assert job_failed_alerts(timeout=3) == []  # the deposed leader sent nothing

    successor = make_engine()  # a new instance: it leads with a newer lease generation
    successor.fence = lambda: 7
    successor.run_pass()
    (alert,) = job_failed_alerts(timeout=20)
    assert "failure budget exhausted" in alert["summary"]
    successor.run_pass()
    assert job_failed_alerts(timeout=3) == []  # sent once, then gone from the outbox
