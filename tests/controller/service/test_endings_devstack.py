"""Endings that must never be mistaken, on devstack with the real controller."""

from tests.controller.service.test_engine_devstack import _wait_for_progress
from tests.support.engine import accept, drive, request, terminal

ENDLESS = ["--steps", "100000", "--every", "2", "--step-seconds", "0.02"]
QUICK_BACKOFF = {"initialSeconds": 0.2, "maxSeconds": 0.3}


def test_out_of_memory_is_a_failure_never_a_preemption(devstack, bucket, make_engine):
    """Vertex's documented out-of-memory ending (SIGKILL 137, its text set a moment later): this
    stand-in trainer leaves no record, so the ending is first decided a reclaim and then
    corrected by the error, which ends the job (maxFailures 0) without another attempt."""
    engine = make_engine()
    accept(engine, request("oom-1", bucket, args=ENDLESS, replicas=2, policy={"maxFailures": 0}), {})
    doc = _wait_for_progress(engine, "oom-1", 1, 0)
    assert devstack.out_of_memory(doc["attempts"][0]["vertexJob"], "workerpool1-0")
    doc = drive(engine, "oom-1", terminal)
    first = doc["attempts"][0]
    assert doc["phase"] == "failed" and doc["preemptions"] == 0 and doc["failures"] == 1
    assert (first["ending"], first["rule"]) == ("user_error", "out-of-memory")
    assert "workerpool1-0 ran out of memory" in first["errorMessage"]
    reason = doc["terminalReason"]
    assert "user_error (out-of-memory)" in reason and "workerpool1-0 ran out of memory" in reason


def test_three_reclaims_during_start_up_do_not_end_the_job_as_a_crash_loop(devstack, bucket, make_engine):
    """Reclaimed without warning (grace 0, no record) before any step: preemptions, and the job
    goes on although crashLoopAttempts is 3."""
    engine = make_engine()
    policy = {"maxFailures": 0, "crashLoopAttempts": 3, "backoff": QUICK_BACKOFF}
    accept(
        engine, request("startup-3", bucket, args=["--step-seconds", "60", *ENDLESS[:2]], policy=policy), {}
    )
    for attempt in (1, 2, 3):
        doc = drive(engine, "startup-3", lambda d, n=attempt: d["attempt"] == n and d["phase"] == "running")
        assert devstack.vertex.preempt(doc["attempts"][-1]["vertexJob"], grace_seconds=0, end_job=True)
    doc = drive(engine, "startup-3", lambda d: d["attempt"] == 4 and d["attempts"][2]["errorCode"] != 0)
    assert doc["phase"] not in ("failed", "succeeded", "cancelled")
    assert doc["preemptions"] == 3 and doc["failures"] == 0
    engine.cancel("startup-3")
    assert drive(engine, "startup-3", terminal)["phase"] == "cancelled"
