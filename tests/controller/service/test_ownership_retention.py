"""A checkpoint root belongs to one job (finding 3), state stays bounded (finding 4), and a
rejected request cannot silence another alert for the same job (finding 6). Real engine and
intake on devstack; the store is SQLite."""

from __future__ import annotations

from controller.adapters.pubsub import TopicPublisher
from controller.service.alerts import AlertSink
from controller.service.retention import prune_state
from controller.store.keys import CHECKPOINT_ROOTS_PREFIX, REJECTED_PREFIX, job_key
from tests.support.engine import accept, read_alerts, request


def test_a_second_job_cannot_take_another_jobs_checkpoint_root(bucket, make_engine):
    engine = make_engine()
    assert accept(engine, request("owner", bucket)).status == "accepted"  # root gs://bucket/owner
    first = engine.store.get(job_key("owner")).document["request"]["checkpoint"]["uri"]

    same_root = request("thief", bucket).replace(b"/thief", b"/owner")
    result = accept(engine, same_root)
    assert result.status == "conflict"
    assert first in result.reason and "'owner'" in result.reason
    assert engine.store.get(job_key("thief")) is None

    # Duplicate delivery of the owner's own request: still fine.
    assert accept(engine, request("owner", bucket)).status == "duplicate"


def with_root(body: bytes, job_id: str, uri: str) -> bytes:
    import json

    document = json.loads(body)
    document["checkpoint"]["uri"] = uri
    return json.dumps(document).encode()


def test_roots_inside_or_around_another_jobs_root_are_refused(bucket, make_engine):
    engine = make_engine()
    assert (
        accept(engine, with_root(request("outer", bucket), "outer", f"gs://{bucket}/a/b")).status
        == "accepted"
    )

    inside = accept(engine, with_root(request("inner", bucket), "inner", f"gs://{bucket}/a/b/c"))
    assert inside.status == "conflict" and f"inside gs://{bucket}/a/b" in inside.reason

    around = accept(engine, with_root(request("around", bucket), "around", f"gs://{bucket}/a"))
    assert around.status == "conflict" and f"contains gs://{bucket}/a/b" in around.reason

    sibling = accept(engine, with_root(request("sibling", bucket), "sibling", f"gs://{bucket}/a/bc"))
    assert sibling.status == "accepted"


def test_the_bucket_allow_list_refuses_other_buckets(bucket, make_engine):
    engine = make_engine(checkpoint_buckets=f"{bucket}, other-bucket")
    assert accept(engine, request("allowed", bucket)).status == "accepted"
    refused = accept(engine, with_root(request("elsewhere", bucket), "elsewhere", "gs://not-listed/x"))
    assert refused.status == "invalid"
    assert "'not-listed' is not one of the checkpoint buckets" in refused.reason
    assert "RELAUNCH_CHECKPOINT_BUCKETS" in refused.reason


def test_rejected_records_are_kept_for_a_bounded_time_and_count(bucket, make_engine):
    engine = make_engine(rejected_max_records=5, rejected_retention_seconds=3600)
    for n in range(12):
        assert accept(engine, b'{"jobId": "bad-%d", "nonsense": true}' % n).status == "invalid"
    assert len(list(engine.store.list(REJECTED_PREFIX))) == 12

    now = engine.clock()
    report = prune_state(engine.store, engine.settings, now)
    assert report.rejected_deleted == 7
    kept = sorted(r.document["jobId"] for r in engine.store.list(REJECTED_PREFIX))
    assert kept == sorted(f"bad-{n}" for n in range(7, 12))  # the newest five

    prune_state(engine.store, engine.settings, now + 3601)
    assert list(engine.store.list(REJECTED_PREFIX)) == []


def test_finished_jobs_are_deleted_after_retention_with_their_claim(bucket, make_engine):
    from tests.support.engine import drive, terminal

    engine = make_engine(finished_job_retention_seconds=600)
    accept(engine, request("done", bucket, args=["--steps", "1"]))
    accept(engine, request("live", bucket, args=["--steps", "100000", "--step-seconds", "1"]))
    engine.cancel("done")
    drive(engine, "done", terminal)
    engine.run_pass()

    now = engine.clock()
    assert prune_state(engine.store, engine.settings, now).jobs_deleted == ()  # not old enough yet
    report = prune_state(engine.store, engine.settings, now + 601)
    assert report.jobs_deleted == ("done",)
    assert engine.store.get(job_key("done")) is None and engine.store.get(job_key("live")) is not None
    claims = [r.document["jobId"] for r in engine.store.list(CHECKPOINT_ROOTS_PREFIX)]
    assert claims == ["live"]

    # What the process keeps per job is bounded by the live jobs: a finished one is forgotten
    # at its last look, with no sweep to run.
    assert engine.reconciler.remembered_jobs() == {"live"}
    engine.cancel("live")


def test_alert_cooldowns_forget_expired_entries_and_deleted_jobs():
    now = [0.0]
    sink = AlertSink(None, None, cooldown_seconds=60, clock=lambda: now[0])
    for n in range(500):
        now[0] += 1
        sink.raise_alert("job_failed", "ERROR", "failed", job_id=f"job-{n}")
    assert sink.tracked_keys() < 500 + 2 * 64 + 130  # firing entries stay until their job is gone
    for n in range(500):
        sink.forget_job(f"job-{n}")
    assert sink.tracked_keys() == 0


def test_an_invalid_request_naming_a_job_cannot_hide_its_real_conflict_alert(
    bucket, make_engine, alerts_topic
):
    engine = make_engine()
    engine.alerts = AlertSink(TopicPublisher(), alerts_topic[0], cooldown_seconds=900)
    assert accept(engine, request("victim", bucket)).status == "accepted"

    # Anyone who can publish: an invalid request that names the job starts a cooldown ...
    assert accept(engine, b'{"jobId": "victim", "checkpoint": 5}').status == "invalid"
    # ... and the job's real conflict must still alert.
    assert accept(engine, request("victim", bucket, args=["--steps", "9"])).status == "conflict"

    alerts = [a for a in read_alerts(alerts_topic[1], want=2) if a["kind"] == "request_rejected"]
    assert sorted(a["details"]["status"] for a in alerts) == ["conflict", "invalid"]
    assert all(a["jobId"] == "victim" for a in alerts)
