"""Vertex's late error refines the ending of a job that has already finished (core/confirm.py
`refine_finished`): the reason names the replica, code and step; never a new attempt. Pure."""

from __future__ import annotations

from controller.core import events as ev
from controller.core.actions import RaiseAlert, ReadVertexJob, SubmitAttempt
from controller.core.classify import Ending, ReplicaExit
from controller.core.decide import CoreConfig
from controller.core.model import Phase
from controller.readmodel.jobs import transition_entries
from tests.support.core_driver import Run, vname
from tests.support.vertex_endings import OUT_OF_MEMORY

OOM = OUT_OF_MEMORY.format(replica="workerpool1-0", code=137)


def running_without_budget() -> Run:
    """A job with no failure budget whose attempt 1 runs; Vertex's error is awaited up to 90 s."""
    run = Run.start(max_failures=0)
    run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
    run.submitted(1)
    run.running(1)
    return run


def failed_before_the_error() -> Run:
    """A 2-node job with no failure budget: a worker is killed out of memory at step 12. It left
    no record; the chief's launcher says runtime_error and its replica record says the teardown
    stopped it. The controller decides before Vertex's error: a user error, no detail."""
    run = running_without_budget()
    chief = ReplicaExit("workerpool0-0", "preempted", 143, step=12)
    run.ended(1, "FAILED", exit_reason="runtime_error", exit_step=12, replica_exits=(chief,))
    assert run.state.phase is Phase.FAILED and run.state.current.provisional
    assert "workerpool1-0" not in run.state.terminal_reason
    return run


def late_error(run: Run, message: str = OOM, code: int = 3) -> list:
    chief = ReplicaExit("workerpool0-0", "preempted", 143, step=12)
    return run.feed(
        ev.VertexObserved(
            1,
            vname(1),
            "FAILED",
            code,
            message,
            end_time=1000.0,
            exit_reason="runtime_error",
            exit_step=12,
            replica_exits=(chief,),
            spot=True,
        )
    )


def test_a_finished_job_keeps_reading_its_provisional_ending_until_the_bound():
    run = failed_before_the_error()
    actions = run.feed(ev.TimerFired(), at=run.now + 10)
    assert ReadVertexJob(vname(1), 1) in actions
    assert not any(isinstance(a, SubmitAttempt) for a in actions)
    run.feed(ev.TimerFired(), at=run.now + 200)  # past the bound: the decision stands
    assert not run.state.current.provisional and run.state.phase is Phase.FAILED
    assert run.feed(ev.TimerFired(), at=run.now + 10) == []


def test_vertex_s_late_out_of_memory_error_names_replica_code_and_step_in_the_reason():
    run = failed_before_the_error()
    before = run.state
    actions = late_error(run)
    state = run.state
    assert state.phase is Phase.FAILED and len(state.attempts) == 1  # never a second job
    assert not any(isinstance(a, SubmitAttempt) for a in actions)
    attempt = state.attempts[0]
    assert attempt.ending is Ending.USER_ERROR and attempt.rule == "out-of-memory"
    assert attempt.error_message == OOM and not attempt.provisional
    for said in ("workerpool1-0", "137", "step 12", "out-of-memory"):
        assert said in state.terminal_reason
    assert state.terminal_reason.startswith("failure budget exhausted (1 failures, maxFailures=0); last: ")
    (alert,) = [a for a in actions if isinstance(a, RaiseAlert)]
    assert alert.kind == "job_failure_explained" and "workerpool1-0" in alert.summary
    entries = transition_entries(before, state, None, actions, run.now)
    assert any("refined by Vertex's error" in e["what"] and "137" in e["what"] for e in entries)
    # Read again (a duplicate event): nothing more changes, no second alert.
    assert late_error(run) == [] and run.state == state


def test_a_late_error_that_says_reclaim_is_recorded_but_the_finished_job_is_not_reopened():
    run = failed_before_the_error()
    actions = late_error(run, "The job was preempted (Spot VM reclaimed).", code=14)
    assert run.state.phase is Phase.FAILED and len(run.state.attempts) == 1
    assert not any(isinstance(a, SubmitAttempt) for a in actions)
    assert run.state.failures + run.state.preemptions == 1


def test_a_pending_confirmation_is_read_at_most_every_recheck_period_whatever_wakes_the_job():
    """A reclaimed job's next attempt keeps the job's key busy with its own events; the ending
    awaiting Vertex's error is read again every error_recheck_seconds, not on each of them."""
    run = Run.start()
    run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
    run.submitted(1)
    run.running(1)
    run.ended(1, "FAILED")  # Spot, no error yet, no record: a reclaim, decided at once
    assert run.state.attempts[0].provisional
    reads = []
    for step in range(1, 31):  # a look every second for 30 s: the next attempt's events
        actions = run.feed(ev.TimerFired(), at=1000.0 + step)
        reads += [step for a in actions if isinstance(a, ReadVertexJob) and a.attempt == 1]
    assert reads == [10, 20, 30]


def test_a_reason_that_already_named_the_replica_is_refined_without_a_second_alert():
    run = Run.start(max_failures=0)
    run.submitted(1)
    run.running(1)
    own = ReplicaExit("workerpool0-0", "runtime_error", 70, step=7, detail="RuntimeError: boom")
    run.ended(1, "FAILED", exit_reason="runtime_error", exit_step=7, replica_exits=(own,))
    assert run.state.phase is Phase.FAILED and "workerpool0-0 exit 70 at step 7" in run.state.terminal_reason
    text = "The replica workerpool0-0 exited with a non-zero status of 70. Termination reason: Error."
    actions = run.feed(
        ev.VertexObserved(1, vname(1), "FAILED", 3, text, end_time=1000.0, replica_exits=(own,), spot=True)
    )
    assert not any(isinstance(a, RaiseAlert) for a in actions)
    assert text in run.state.terminal_reason and "at step 7" in run.state.terminal_reason


def test_a_reclaim_corrected_to_out_of_memory_gives_the_same_account_when_it_ends_the_job():
    """The worker's node killed out of memory looks, to the trainer, like a reclaimed peer (the
    chief stopped by the teardown, the worker without a record): decided a preemption at once.
    Vertex's error corrects it; with no failure budget left the job fails, and its reason names
    the replica, its code, the step and the command that opens that replica's log."""
    run = running_without_budget()
    chief = ReplicaExit("workerpool0-0", "stopped_by_peer", 70, step=12)
    run.ended(1, "FAILED", exit_reason="stopped_by_peer", exit_step=12, replica_exits=(chief,))
    assert run.state.attempts[0].ending is Ending.PREEMPTED and run.state.attempts[0].provisional
    run.submitted(2)
    actions = late_error(run)
    state = run.state
    assert state.phase is Phase.FAILED and (state.preemptions, state.failures) == (0, 1)
    assert state.attempts[0].rule == "out-of-memory"
    for said in (
        "workerpool1-0",
        "137",
        "step 12",
        "relaunch logs job-1 --attempt 1 --replica workerpool1-0",
    ):
        assert said in state.terminal_reason, state.terminal_reason
    assert not any(isinstance(a, SubmitAttempt) for a in actions)


def test_out_of_memory_reads_the_same_whether_vertexs_error_came_first_or_late():
    """On a loaded machine Vertex's out-of-memory error is already set when the ending is first
    read; otherwise it arrives after the ending was decided and corrects it. The job's reason
    must not depend on that race: both name the replica, its code, the step and the command for
    that replica's log, in the same words."""
    reasons = []
    chief = ReplicaExit("workerpool0-0", "stopped_by_peer", 70, step=12)
    evidence = {"exit_reason": "stopped_by_peer", "exit_step": 12, "replica_exits": (chief,)}
    for error_first in (True, False):
        run = Run.start(max_failures=0)
        run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
        run.submitted(1)
        run.running(1)
        if error_first:
            run.ended(1, "FAILED", 3, OOM, **evidence)
        else:
            run.ended(1, "FAILED", **evidence)
            run.submitted(2)
            run.feed(ev.VertexObserved(1, vname(1), "FAILED", 3, OOM, end_time=1000.0, spot=True, **evidence))
        assert (run.state.phase, run.state.preemptions, run.state.failures) == (Phase.FAILED, 0, 1)
        reasons.append(run.state.terminal_reason)
    first, late = reasons
    assert "relaunch logs job-1 --attempt 1 --replica workerpool1-0" in first, first
    assert "step 12" in first and "137" in first, first
    account = first.split("last: ")[1]
    assert account in late, (first, late)
