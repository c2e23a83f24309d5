"""Endings at the edges, end to end with the real trainer (DDP on gloo, a paced tiny GPT) on
devstack with the real controller: a reclaim as training finishes, reclaims during start-up, a
user's error and an out-of-memory kill."""

from __future__ import annotations

import re

import pytest

from tests.support.engine import accept, drive, job_document, terminal
from tests.support.paced_model import EXIT_AT_CALL, FAIL_AT_CALL, SLOW_START_BEFORE_ATTEMPT
from tests.support.real_trainer import (
    checkpoint_root,
    chief_records,
    newest_committed_by,
    trained_steps,
    trainer_request,
)
from trainer.fault_hooks import HOLD_AFTER_FINISHING, HOLD_AT_STEP

STEPS = 6


def _running(number: int):
    return lambda d: d["attempt"] == number and d["phase"] == "running"


def _holding(devstack, doc, text: str) -> bool:
    """The chief's trainer says it reached the test hook (it waits there for the reclaim)."""
    vertex_job = doc["attempts"][-1]["vertexJob"]
    return doc["phase"] == "running" and any(
        r.get("message") == text for r in chief_records(devstack, vertex_job)
    )


@pytest.mark.slow
def test_a_reclaim_at_the_last_step_and_just_after_it_ends_the_job_succeeded(devstack, bucket, make_engine):
    """At the last step (the emergency save commits the final step) and after it (the trainer's
    record says completed): the job succeeded, no failure spent, no attempt started to train 0
    steps. Both jobs at once, on 2 nodes, one reclaimed with a grace and one without."""
    engine = make_engine()
    cases = {
        "last-step": ({HOLD_AT_STEP: str(STEPS)}, "test hook: holding for SIGTERM", 15.0),
        "after-last": ({HOLD_AFTER_FINISHING: "1"}, "test hook: finished, holding for SIGTERM", 0.0),
    }
    for job, (env, _, _) in cases.items():
        accept(engine, trainer_request(job, bucket, steps=STEPS, replicas=2, env=env))
    for job, (_, text, grace) in cases.items():
        doc = drive(engine, job, lambda d, t=text: _holding(devstack, d, t), timeout=300)
        assert devstack.vertex.preempt(doc["attempts"][0]["vertexJob"], grace_seconds=grace, end_job=True)
    for job in cases:
        doc = drive(engine, job, terminal, timeout=120)
        assert (doc["phase"], doc["failures"], doc["attempt"]) == ("succeeded", 0, 1), doc
        assert doc["latestCheckpointStep"] == STEPS
        assert newest_committed_by(checkpoint_root(bucket, job), 1) == STEPS


@pytest.mark.slow
def test_three_reclaims_during_start_up_are_preemptions_and_the_job_goes_on(devstack, bucket, make_engine):
    """Reclaimed while the trainer is still starting (its model factory still loading, before
    the first step), with and without a grace: three preemptions, not a crash loop although
    crashLoopAttempts is 3; the fourth attempt trains to the end."""
    engine = make_engine()
    policy = {"maxFailures": 0, "crashLoopAttempts": 3}
    slow = {SLOW_START_BEFORE_ATTEMPT: "4"}
    accept(engine, trainer_request("startup-3", bucket, steps=STEPS, replicas=2, policy=policy, env=slow))
    for number, grace in zip((1, 2, 3), (0.0, 15.0, 0.0)):
        doc = drive(engine, "startup-3", _running(number), timeout=120)
        assert devstack.vertex.preempt(doc["attempts"][-1]["vertexJob"], grace_seconds=grace, end_job=True)
    doc = drive(engine, "startup-3", terminal, timeout=300)
    assert (doc["phase"], doc["preemptions"], doc["failures"]) == ("succeeded", 3, 0), doc["terminalReason"]
    assert [a["ending"] for a in doc["attempts"][:3]] == ["preempted"] * 3
    # They were start-up reclaims: none of the three trained a step.
    assert [trained_steps(devstack, a["vertexJob"]) for a in doc["attempts"][:3]] == [[], [], []]
    assert trained_steps(devstack, doc["attempts"][3]["vertexJob"])[-1] == STEPS


@pytest.mark.slow
def test_user_errors_are_failures_never_preemptions(devstack, bucket, make_engine):
    """The user's model raising at a step and a worker process ending with status 1, on Spot:
    each a failure, never a preemption. Every reason names the replica, its exit code (the
    replica's: the launcher exits 70 for a worker's error, with the worker's own status beside it
    when they differ) and the step."""
    engine = make_engine()
    jobs = {"raises": {FAIL_AT_CALL: "4"}, "exits-1": {EXIT_AT_CALL: "4"}}
    for job, worker_env in jobs.items():
        accept(engine, trainer_request(job, bucket, steps=100000, replicas=2, worker_env=worker_env))
    for job in jobs:
        doc = drive(engine, job, terminal, timeout=300)
        ended = doc["attempts"][0]
        assert (doc["phase"], doc["preemptions"], doc["failures"]) == ("failed", 0, 1), doc["terminalReason"]
        assert ended["ending"] == "user_error", ended
    raises, exits = (job_document(engine, job)["terminalReason"] for job in jobs)
    assert re.search(r"workerpool1-0 exit 70 at step \d+: RuntimeError: ", raises), raises
    assert "relaunch logs raises --attempt 1 --replica workerpool1-0" in raises
    # The launcher's 70, and the worker's own status: 1, which it could not report itself.
    assert re.search(
        r"workerpool1-0 exit 70 \(worker exit 1\) at step \d+: worker exit codes \[1\]", exits
    ), exits


# Vertex sets a FAILED job's error some time after the end. 0: it is there at the ending's first
# read; 4 s: the controller reads the ending first (as a reclaimed peer, below) and the error
# corrects it. The reason must read the same either way.
@pytest.mark.slow
@pytest.mark.parametrize("error_delay", [0.0, 4.0], ids=["error-first", "error-late"])
def test_out_of_memory_is_a_failure_whose_reason_names_the_replica(
    devstack, bucket, make_engine, error_delay
):
    """Vertex's documented out-of-memory kill (SIGKILL, 137) of the worker replica, on Spot: a
    failure, never a preemption; the reason names the killed replica, its code, the step and the
    command that opens its log, whenever Vertex's error arrives."""
    previous = devstack.vertex.configure(failed_error_delay_seconds=error_delay)
    try:
        engine = make_engine()
        job = f"oom-{int(error_delay)}"
        accept(engine, trainer_request(job, bucket, steps=100000, replicas=2))
        doc = drive(engine, job, lambda d: (d["latestCheckpointStep"] or 0) >= 3, timeout=300)
        assert devstack.out_of_memory(doc["attempts"][0]["vertexJob"], "workerpool1-0")
        # The killed worker's node leaves no record and the chief was stopped by the teardown,
        # which is how a reclaimed peer looks: without the error, the controller decides a
        # preemption; the error corrects it.
        oom = drive(engine, job, lambda d: "137" in (d["terminalReason"] or ""), timeout=240)
    finally:
        devstack.vertex.restore(previous)
    reason = oom["terminalReason"]
    assert "workerpool1-0" in reason and re.search(r"\bstep \d+", reason), reason
    assert f"relaunch logs {job} --attempt 1 --replica workerpool1-0" in reason, reason
    assert (oom["phase"], oom["preemptions"], oom["failures"]) == ("failed", 0, 1)
    assert oom["attempts"][0]["ending"] == "user_error", oom["attempts"][0]
