"""The controller engine against devstack, through the real Google clients.

No mocks: the engine talks gRPC to the Vertex stand-in (which runs `fake_trainer.py` replicas as
real processes), JSON-API to the GCS stand-in, and gRPC to the Pub/Sub stand-in for alerts.
"""

from __future__ import annotations

import json
import time

from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, storage

from controller.adapters.pubsub import vertex_job_id_from_log_entry
from tests.support.engine import (
    PROJECT,
    accept,
    drive,
    job_document,
    read_alerts,
    request,
    terminal,
    vertex_jobs_for,
)


def test_a_request_becomes_exactly_one_spot_job_that_succeeds(devstack, bucket, make_engine):
    engine = make_engine()
    result = accept(engine, request("ok-1", bucket, args=["--steps", "3"], replicas=2), {})
    assert result.status == "accepted"
    doc = drive(engine, "ok-1", terminal)
    assert doc["phase"] == "succeeded" and doc["attempt"] == 1

    (job,) = vertex_jobs_for(devstack, "ok-1")
    assert dict(job.labels) == {"relaunch-job": "ok-1", "relaunch-attempt": "1", "managed-by": "relaunch"}
    spec = job.job_spec
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert [p.replica_count for p in spec.worker_pool_specs] == [1, 1]
    env = {e.name: e.value for e in spec.worker_pool_specs[0].container_spec.env}
    assert env["RELAUNCH_JOB_ID"] == "ok-1" and env["RELAUNCH_ATTEMPT"] == "1"
    assert env["RELAUNCH_CHECKPOINT_URI"] == f"gs://{bucket}/ok-1" and env["RELAUNCH_RESUME_FROM"] == ""


def test_preemption_resubmits_from_the_latest_committed_checkpoint(devstack, bucket, make_engine):
    engine = make_engine()
    accept(
        engine,
        request(
            "pre-1",
            bucket,
            args=["--steps", "80", "--every", "5"],
            policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.3, "maxSeconds": 0.5}},
        ),
        {},
    )
    doc = drive(engine, "pre-1", lambda d: d["phase"] == "running" and (d["latestCheckpointStep"] or 0) >= 10)
    first = doc["attempts"][0]["vertexJob"]
    assert devstack.vertex.preempt(first, grace_seconds=5)

    doc = drive(engine, "pre-1", lambda d: d["attempt"] == 2 and d["attempts"][1]["vertexJob"])
    ended, second = doc["attempts"]
    assert ended["ending"] == "preempted" and ended["rule"] == "exit-record-preempted"
    assert doc["preemptions"] == 1 and doc["failures"] == 0
    # The new attempt resumes from the newest checkpoint that had a commit marker when it ended.
    assert second["resumeFromStep"] == ended["checkpointStepAtEnd"] >= 10
    assert doc["latestCheckpointUri"].endswith(f"step-{second['resumeFromStep']:010d}")
    # A reclaim after progress restarts at once: the policy's 0.3 s backoff is not applied.
    waits = [e["what"] for e in doc.get("timeline", []) if e["what"].startswith("backing off")]
    assert waits == ["backing off 0.0s before the next attempt"], waits

    doc = drive(engine, "pre-1", terminal)
    assert doc["phase"] == "succeeded"
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    start = json.loads(client.bucket(bucket).blob("pre-1/starts/attempt-0002.json").download_as_bytes())
    assert start["step"] == second["resumeFromStep"]  # the trainer really got that location


def test_user_errors_spend_the_failure_budget_then_fail_with_an_alert(
    devstack, bucket, make_engine, alerts_topic
):
    engine = make_engine()
    accept(
        engine,
        request(
            "bad-1",
            bucket,
            args=["--fail-with", "1", "--fail-at", "1"],
            policy={
                "maxFailures": 1,
                "crashLoopAttempts": 5,
                "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.3},
            },
        ),
        {},
    )
    doc = drive(engine, "bad-1", terminal)
    _assert_failed_on_the_second_of_settled_failures(doc, "ending", "user_error")
    assert "failure budget exhausted" in doc["terminalReason"]
    alerts = [a for a in read_alerts(alerts_topic[1], want=1) if a["kind"] == "job_failed"]
    assert alerts and alerts[0]["jobId"] == "bad-1" and alerts[0]["severity"] == "ERROR"


def _assert_failed_on_the_second_of_settled_failures(doc, field, expected):
    """A job with `maxFailures: 1` whose stand-in trainer exits 1 and leaves no exit record: each
    ending is decided at once as a reclaim (Spot, started, no error yet) and corrected when
    Vertex's error names the replica's exit; the second correction fails the job and the attempt
    started meanwhile is cancelled. An attempt that ended before that may have its own error read
    in the same pass (a finished job's provisional endings are refined until the settle bound), so
    the count is 2 or 3, and always equals the settled endings: nothing counted twice."""
    assert doc["phase"] == "failed"
    assert "(2 failures, maxFailures=1" in doc["terminalReason"]
    settled = [a[field] for a in doc["attempts"] if a["ending"] and not a["provisional"]]
    assert set(settled) == {expected} and len(settled) == doc["failures"] in (2, 3), doc["attempts"]
    # Whatever was not corrected yet stays a provisional reclaim, never a confirmed preemption.
    assert all(a["provisional"] for a in doc["attempts"] if a["ending"] == "preempted")


def test_stockout_waits_for_capacity_without_spending_failures(devstack, bucket, make_engine, alerts_topic):
    engine = make_engine()
    devstack.vertex.set_stockout(fail=True)
    try:
        accept(
            engine,
            request(
                "stock-1",
                bucket,
                args=["--steps", "2"],
                policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.4}},
            ),
            {},
        )
        doc = drive(engine, "stock-1", lambda d: sum(1 for a in d["attempts"] if a["ending"]) >= 2)
        assert {a["rule"] for a in doc["attempts"] if a["ending"]} == {"capacity-before-start"}
        assert doc["failures"] == 0 and doc["phase"] in ("backing_off", "submitting", "queued")
        assert [a["kind"] for a in read_alerts(alerts_topic[1], want=1)] == ["capacity_wait"]
    finally:
        devstack.vertex.set_stockout()
    doc = drive(engine, "stock-1", terminal)
    assert doc["phase"] == "succeeded" and doc["failures"] == 0


def test_duplicate_requests_and_duplicated_reordered_events_make_one_job(devstack, bucket, make_engine):
    engine = make_engine()
    body = request("dup-1", bucket, args=["--steps", "3"])
    statuses = [accept(engine, body).status for _ in range(3)]
    assert statuses == ["accepted", "duplicate", "duplicate"]
    other = request("dup-1", bucket, args=["--steps", "4"])
    assert accept(engine, other, {}).status == "conflict"

    def deliver_events_twice_reversed():
        mine = {j.name.rsplit("/", 1)[1] for j in vertex_jobs_for(devstack, "dup-1")}
        entries = [e for e in list(devstack.entries) if e["resource"]["labels"]["job_id"] in mine]
        for entry in list(reversed(entries)) * 2:
            engine.on_hint(vertex_job_id_from_log_entry(json.dumps(entry).encode()))

    doc = drive(engine, "dup-1", terminal, reconcile=False, hints=deliver_events_twice_reversed)
    assert doc["phase"] == "succeeded" and doc["attempt"] == 1
    assert len(vertex_jobs_for(devstack, "dup-1")) == 1


def test_lost_events_still_recover_within_one_reconcile_period(devstack, bucket, make_engine):
    engine = make_engine(reconcile_seconds=1)
    accept(
        engine,
        request(
            "lost-1",
            bucket,
            args=["--steps", "400", "--every", "5"],
            policy={"backoff": {"initialSeconds": 0.01, "maxSeconds": 0.01, "jitter": 0}},
        ),
        {},
    )
    doc = drive(engine, "lost-1", lambda d: d["phase"] == "running")
    devstack.vertex.preempt(doc["attempts"][0]["vertexJob"], grace_seconds=5)
    devstack.vertex.wait_for_state(
        doc["attempts"][0]["vertexJob"], {aiplatform_v1.JobState.JOB_STATE_FAILED}, timeout=30
    )
    ended_seen_at = time.time()
    # No event is delivered at all: only the periodic reconcile (every 1 s here) notices.
    deadline = time.monotonic() + 10
    next_pass = 0.0
    while time.monotonic() < deadline:
        if time.monotonic() >= next_pass:
            engine.run_pass()
            next_pass = time.monotonic() + 1.0
        engine.serve()
        doc = job_document(engine, "lost-1")
        if doc["attempt"] == 2 and doc["attempts"][1]["submittedAt"]:
            break
        engine.queue.wait_for_work(0.05)
    assert doc["attempt"] == 2 and doc["attempts"][1]["submittedAt"], doc
    assert doc["attempts"][1]["submittedAt"] - ended_seen_at < 1.0 + 2.0  # one period + slack
    engine.cancel("lost-1")
    doc = drive(engine, "lost-1", terminal)
    assert doc["phase"] == "cancelled"


def test_metrics_export_job_states_and_goodput(devstack, bucket, make_engine):
    from controller.service.metrics import Metrics

    engine = make_engine()
    engine.metrics = Metrics()
    accept(engine, request("met-1", bucket, args=["--steps", "3"]), {})
    drive(engine, "met-1", terminal)
    engine.run_pass()
    text = engine.metrics.render().decode()
    assert 'relaunch_jobs{state="succeeded"} 1.0' in text
    assert "relaunch_attempts_total 1.0" in text
    goodput_line = next(
        line for line in text.splitlines() if line.startswith('relaunch_goodput_ratio{job_id="met-1"}')
    )
    assert 0.0 < float(goodput_line.split()[-1]) <= 1.0


def _wait_for_progress(engine, job_id, attempt, beyond):
    return drive(
        engine,
        job_id,
        lambda d: (
            d["attempt"] == attempt and d["phase"] == "running" and (d["latestCheckpointStep"] or 0) > beyond
        ),
    )


def test_five_reclaims_that_sigkill_at_once_are_preemptions_that_spend_no_failures(
    devstack, bucket, make_engine
):
    """No SIGTERM, so no emergency save and no exit record; Vertex's error names neither
    "preempt" nor "spot" (and is set a moment after the job is FAILED). Still preemptions."""
    engine = make_engine()
    accept(
        engine,
        request(
            "kill-5",
            bucket,
            args=["--steps", "100000", "--every", "2", "--step-seconds", "0.02"],
            policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.3}},
        ),
        {},
    )
    step = 0
    for attempt in range(1, 6):
        doc = _wait_for_progress(engine, "kill-5", attempt, step)
        step = doc["latestCheckpointStep"]
        assert devstack.vertex.preempt(doc["attempts"][-1]["vertexJob"], grace_seconds=0)
        doc = drive(engine, "kill-5", lambda d, n=attempt: d["attempts"][n - 1]["ending"] is not None)
        ended = doc["attempts"][attempt - 1]
        assert (ended["ending"], ended["rule"]) == ("preempted", "spot-reclaim"), ended
        assert "preempt" not in ended["errorMessage"].lower()
    assert doc["preemptions"] == 5 and doc["failures"] == 0
    engine.cancel("kill-5")
    assert drive(engine, "kill-5", terminal)["phase"] == "cancelled"


def test_a_two_node_job_whose_worker_exits_1_fails_after_max_failures(devstack, bucket, make_engine):
    """Vertex tears the gang down; the chief gets SIGTERM and records `preempted`; the worker's
    crash is what counts."""
    engine = make_engine()
    accept(
        engine,
        request(
            "gang-crash",
            bucket,
            args=["--steps", "1000", "--fail-with", "1", "--fail-at", "3", "--fail-rank", "1"],
            replicas=2,
            policy={
                "maxFailures": 1,
                "crashLoopAttempts": 10,
                "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.3},
            },
        ),
        {},
    )
    doc = drive(engine, "gang-crash", terminal, timeout=120)
    _assert_failed_on_the_second_of_settled_failures(doc, "rule", "replica-exit-error")
    assert "workerpool1-0 exited with a non-zero status of 1" in doc["attempts"][0]["errorMessage"]
    assert "failure budget exhausted" in doc["terminalReason"]


def test_a_quota_refusal_at_create_waits_as_capacity_and_alerts(devstack, bucket, make_engine, alerts_topic):
    engine = make_engine()
    devstack.quota_shortfall("reject")
    try:
        accept(engine, request("quota-1", bucket, args=["--steps", "2"], policy={"maxFailures": 0}), {})
        doc = drive(engine, "quota-1", lambda d: engine.alerts.is_firing("capacity_wait", "quota-1"))
        assert doc["phase"] == "submitting" and doc["failures"] == 0
        (alert,) = [a for a in read_alerts(alerts_topic[1], want=1) if a["kind"] == "capacity_wait"]
        assert "quota" in alert["summary"]
        assert vertex_jobs_for(devstack, "quota-1") == []
    finally:
        devstack.quota_shortfall(None)
    doc = drive(engine, "quota-1", terminal)
    assert doc["phase"] == "succeeded" and doc["attempt"] == 1 and doc["failures"] == 0


def test_a_create_whose_reply_is_lost_is_adopted_not_duplicated(devstack, bucket, make_engine):
    engine = make_engine()
    devstack.lose_create_replies(1)
    accept(engine, request("lost-reply", bucket, args=["--steps", "2"]), {})
    doc = drive(engine, "lost-reply", terminal)
    assert doc["phase"] == "succeeded" and doc["attempt"] == 1
    assert len(vertex_jobs_for(devstack, "lost-reply")) == 1


def test_in_place_restarts_and_a_final_reclaim_when_vertex_ignores_disable_retries(
    devstack, bucket, make_engine
):
    """Unknown whether disableRetries stops reclaim restarts: under the other answer Vertex
    restarts the attempt in place (invisible to Relaunch) and the last reclaim ends it."""
    engine = make_engine()
    previous = devstack.vertex.configure(disable_retries_stops_reclaim_restarts=False, reclaim_restarts=1)
    try:
        accept(
            engine,
            request(
                "in-place",
                bucket,
                args=["--steps", "100000", "--every", "2", "--step-seconds", "0.02"],
                policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.3}},
            ),
            {},
        )
        doc = _wait_for_progress(engine, "in-place", 1, 0)
        name = doc["attempts"][0]["vertexJob"]
        assert devstack.vertex.preempt(name, grace_seconds=1)
        step = doc["latestCheckpointStep"]
        doc = _wait_for_progress(engine, "in-place", 1, step + 4)  # restarted in place, same attempt
        assert devstack.vertex.preempt(name, grace_seconds=1)  # no restart left
        doc = drive(engine, "in-place", lambda d: d["attempts"][0]["ending"] is not None)
    finally:
        devstack.vertex.restore(previous)
    assert doc["attempts"][0]["ending"] == "preempted" and doc["failures"] == 0
    engine.cancel("in-place")
    assert drive(engine, "in-place", terminal)["phase"] == "cancelled"


def test_when_vertex_never_says_why_the_wait_is_bounded_and_a_crashing_job_still_stops(
    devstack, bucket, make_engine
):
    """The error may come late or (unknown) not at all: after the settle wait the ending is judged
    with what there is. A started Spot attempt with no error reads as a reclaim (no budget), so a
    job that keeps crashing that way is stopped by the crash-loop rule."""
    engine = make_engine(error_settle_seconds=1.0, error_recheck_seconds=0.3)
    previous = devstack.vertex.configure(failed_error_delay_seconds=3600)
    try:
        accept(
            engine,
            request(
                "no-why",
                bucket,
                args=["--fail-with", "1", "--fail-at", "1"],
                policy={
                    "maxFailures": 0,
                    "crashLoopAttempts": 2,
                    # Longer than the settle bound: each ending is judged before the next attempt
                    # starts, so the crash-loop rule stops the job after exactly two (with a
                    # shorter backoff a third attempt may start before the second is judged).
                    "backoff": {"initialSeconds": 2.0, "maxSeconds": 2.0},
                },
            ),
            {},
        )
        doc = drive(engine, "no-why", terminal)
    finally:
        devstack.vertex.restore(previous)
    assert doc["phase"] == "failed" and doc["failures"] == 0
    assert [(a["rule"], a["errorCode"]) for a in doc["attempts"] if a["ending"]] == [
        ("spot-reclaim", 0),
        ("spot-reclaim", 0),
    ]
    assert "without checkpoint progress" in doc["terminalReason"]
