"""The ending table at work: every ending decided at once from the evidence, Vertex's late error
confirming or correcting the record without a second resubmission."""

import pytest

from controller.core import events as ev
from controller.core.actions import ReadVertexJob, SubmitAttempt
from controller.core.classify import Ending, ReplicaExit
from controller.core.decide import CoreConfig
from controller.core.model import Phase
from tests.support.core_driver import Run, vname

# Google documents neither the code nor the text of a Spot reclaim: each plausible answer, and
# "not set yet" (Vertex sets the error about a minute after the end).
RECLAIM_ENDINGS = [
    (0, ""),
    (8, "The job was preempted."),
    (8, "Resources are insufficient in region: us-central1."),
    (10, "Job was terminated by the system."),
    (13, "Internal error occurred for the current attempt."),
    (14, "The service is currently unavailable."),
    (14, "Spot VM was preempted"),
]


def submits(actions):
    return [a for a in actions if isinstance(a, SubmitAttempt)]


def started_run(**policy):
    run = Run.start(**policy)
    run.submitted(1)
    run.running(1)
    return run


@pytest.mark.parametrize("code, text", RECLAIM_ENDINGS)
def test_a_started_spot_attempt_reclaimed_with_any_code_and_wording_is_a_preemption_at_once(code, text):
    run = started_run(max_failures=0)
    run.feed(ev.CheckpointObserved(40, "gs://b/ckpt/step-0000000040"))
    run.ended(1, "FAILED", code, text)
    assert run.state.current.ending is Ending.PREEMPTED
    assert (run.state.preemptions, run.state.failures) == (1, 0)
    (submit,) = submits(run.wake())
    assert submit.resume_from_step == 40


def test_a_reclaim_decided_before_the_error_is_confirmed_by_it_and_nothing_else_changes():
    run = started_run(max_failures=0)
    run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
    ended_at = run.now
    run.ended(1, "FAILED")
    assert run.state.current.provisional and run.state.current.ending is Ending.PREEMPTED
    actions = run.wake()
    assert len(submits(actions)) == 1 and ReadVertexJob(vname(1), 1) in actions
    run.now = ended_at + 60
    assert run.ended(1, "FAILED", 10, "Job was terminated by the system.") == []
    first = run.state.attempts[0]
    assert not first.provisional and first.ending is Ending.PREEMPTED and first.error_code == 10
    assert (run.state.preemptions, run.state.failures) == (1, 0)


def test_a_late_out_of_memory_error_corrects_a_preemption_into_a_failure_without_resubmitting():
    run = started_run(max_failures=3)
    run.ended(1, "FAILED")
    run.wake()
    run.submitted(2)
    oom = "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137."
    actions = run.feed(
        ev.VertexObserved(1, vname(1), "FAILED", 3, oom, end_time=run.now, exit_reason=None, spot=True)
    )
    assert submits(actions) == [] and len(run.state.attempts) == 2
    first = run.state.attempts[0]
    assert first.ending is Ending.USER_ERROR and first.rule == "out-of-memory"
    assert (run.state.preemptions, run.state.failures) == (0, 1)


def test_past_the_bound_without_an_error_the_decision_stands():
    run = started_run()
    run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
    ended_at = run.now
    run.ended(1, "FAILED")
    run.feed(ev.TimerFired(), at=ended_at + 91)
    assert not run.state.attempts[0].provisional and run.state.preemptions == 1


def test_a_reclaim_after_the_trainer_completed_is_success_and_starts_nothing():
    run = started_run(max_failures=0)
    actions = run.ended(
        1,
        "FAILED",
        exit_reason="completed",
        exit_step=100,
        exit_committed_step=100,
        final_step=100,
    )
    assert run.state.phase is Phase.SUCCEEDED and run.state.failures == 0
    assert submits(actions) == []


def test_a_reclaim_at_the_last_step_with_its_checkpoint_committed_succeeds():
    run = started_run(max_failures=0)
    run.feed(ev.CheckpointObserved(100, "gs://b/ckpt/step-0000000100"))
    actions = run.ended(1, "FAILED", 14, "", exit_reason="preempted", exit_step=100, final_step=100)
    assert run.state.phase is Phase.SUCCEEDED and submits(actions) == []


def test_no_attempt_starts_when_the_latest_checkpoint_is_the_final_step():
    """The final step's checkpoint is seen only after the ending was decided (a preemption)."""
    run = started_run(max_failures=0)
    run.ended(1, "FAILED", 8, "preempted", exit_reason="preempted", exit_step=99, final_step=100)
    assert run.state.phase is Phase.BACKING_OFF
    run.feed(ev.CheckpointObserved(100, "gs://b/ckpt/step-0000000100"))
    actions = run.wake()
    assert run.state.phase is Phase.SUCCEEDED and submits(actions) == []


def test_reclaims_during_start_up_do_not_count_toward_the_crash_loop():
    run = Run.start(max_failures=0, crash_loop_attempts=3)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n)
        run.ended(n, "FAILED", 10, "Job was terminated by the system.")
        run.wake()
    assert run.state.phase is Phase.SUBMITTING and run.state.preemptions == 3
    assert run.state.no_progress_streak == 0


def test_out_of_memory_seen_by_the_launcher_is_a_failure_naming_replica_code_and_step():
    from trainer.layout import SIGNAL_OOM_KILL

    run = started_run(max_failures=0)
    records = (
        ReplicaExit("workerpool0-0", "stopped_by_peer", 143, step=25),
        ReplicaExit("workerpool1-0", "runtime_error", 137, signal=SIGNAL_OOM_KILL, step=25),
    )
    actions = run.ended(1, "FAILED", replica_exits=records)
    assert run.state.current.rule == "out-of-memory" and run.state.preemptions == 0
    reason = run.state.terminal_reason
    assert "workerpool1-0" in reason and "exit 137" in reason and "step 25" in reason
    assert "relaunch logs" in reason and "--replica workerpool1-0" in reason
    assert submits(actions) == []


def test_a_user_error_recorded_by_a_replica_is_decided_at_once_and_names_the_exception():
    run = started_run(max_failures=0)
    records = (ReplicaExit("workerpool0-0", "runtime_error", 1, step=25, detail="ValueError: boom"),)
    run.ended(1, "FAILED", exit_reason="runtime_error", exit_step=25, replica_exits=records)
    assert run.state.phase is Phase.FAILED and run.state.preemptions == 0
    assert (
        "ValueError: boom" in run.state.terminal_reason and "exit 1 at step 25" in run.state.terminal_reason
    )


def test_a_user_error_without_exit_records_waits_for_nothing_on_spot_and_is_corrected_by_the_error():
    """A replica exits 1 without a record (its launcher died too): decided as a reclaim at once,
    then Vertex's error names the replica's own exit status and the record is charged."""
    run = started_run(max_failures=3)
    run.ended(1, "FAILED")
    msg = "The replica workerpool0-0 exited with a non-zero status of 1."
    run.feed(ev.VertexObserved(1, vname(1), "FAILED", 3, msg, end_time=run.now, spot=True))
    assert run.state.attempts[0].ending is Ending.USER_ERROR
    assert (run.state.preemptions, run.state.failures) == (0, 1)


def test_an_ending_before_start_without_an_error_is_capacity_at_once_and_corrected_if_the_request_was_wrong():
    run = Run.start(max_failures=3)
    run.submitted(1)
    run.ended(1, "FAILED")
    assert run.state.current.ending is Ending.CAPACITY and run.state.failures == 0
    run.feed(
        ev.VertexObserved(1, vname(1), "FAILED", 7, "Permission denied on the service account.", spot=True)
    )
    assert run.state.attempts[0].ending is Ending.INFRASTRUCTURE and run.state.failures == 1


def test_a_correction_is_on_the_timeline_saying_why():
    from controller.readmodel.jobs import transition_entries

    run = started_run(max_failures=3)
    run.ended(1, "FAILED")
    before = run.state
    oom = "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137."
    event = ev.VertexObserved(1, vname(1), "FAILED", 3, oom, spot=True)
    run.feed(event)
    (line,) = [e for e in transition_entries(before, run.state, event, [], run.now) if "corrected" in str(e)]
    assert "preempted" in str(line) and "user_error (out-of-memory)" in str(line)


def test_every_ending_has_a_named_action_and_every_named_action_is_used():
    from controller.core.decide import ACTION_OF_ENDING, ENDING_ACTIONS

    assert set(ACTION_OF_ENDING) == set(Ending)
    assert set(ACTION_OF_ENDING.values()) | {"stop-as-requested", "fail-permanently"} == set(ENDING_ACTIONS)
    assert ACTION_OF_ENDING[Ending.PREEMPTED] == "restart-not-counted"


def test_a_correction_that_spends_the_last_failure_fails_the_job_and_cancels_the_live_attempt():
    from controller.core.actions import CancelVertexJob

    run = started_run(max_failures=0)
    run.ended(1, "FAILED")
    run.wake()
    run.submitted(2)
    run.running(2)
    msg = "The replica workerpool0-0 exited with a non-zero status of 1."
    actions = run.feed(ev.VertexObserved(1, vname(1), "FAILED", 3, msg, spot=True))
    assert run.state.phase is Phase.FAILED and "corrected by Vertex's error" in run.state.terminal_reason
    assert CancelVertexJob(vname(2), 2) in actions and submits(actions) == []


def test_silent_endings_without_progress_still_end_as_a_crash_loop_once_the_error_never_comes():
    run = Run.start(max_failures=0, crash_loop_attempts=2)
    run.config = CoreConfig(error_settle_seconds=100, error_recheck_seconds=1)
    for n in (1, 2):
        run.submitted(n)
        run.running(n)
        run.ended(n, "FAILED")
        run.wake()
    assert run.state.phase is not Phase.FAILED  # decided as reclaims, nothing known against them
    run.feed(ev.TimerFired(), at=run.now + 200)
    assert run.state.phase is Phase.FAILED and run.state.failures == 0
    assert "crashLoopAttempts=2" in run.state.terminal_reason


def test_a_chief_runtime_error_from_a_vanished_peer_on_spot_is_a_reclaim():
    """One node reclaimed without warning: the survivors' gloo calls fail (the chief records
    runtime_error), their own records say stopped_by_peer, the vanished node left none."""
    run = started_run(max_failures=0)
    survivors = (ReplicaExit("workerpool0-0", "stopped_by_peer", 70, step=12),)
    run.ended(1, "FAILED", exit_reason="runtime_error", exit_step=12, replica_exits=survivors)
    assert run.state.current.ending is Ending.PREEMPTED and run.state.failures == 0


def test_a_chief_runtime_error_of_its_own_stays_a_user_error():
    run = started_run(max_failures=0)
    own = (ReplicaExit("workerpool0-0", "runtime_error", 70, step=12, detail="ValueError: boom"),)
    run.ended(1, "FAILED", exit_reason="runtime_error", exit_step=12, replica_exits=own)
    assert run.state.phase is Phase.FAILED and run.state.preemptions == 0
