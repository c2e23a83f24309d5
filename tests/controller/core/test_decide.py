"""Scenarios of a job's life, each checking what a user would see."""

from controller.core import events as ev
from controller.core.actions import CancelVertexJob, MarkTerminal, RaiseAlert, ScheduleWakeup, SubmitAttempt
from controller.core.classify import Ending
from controller.core.decide import CoreConfig
from controller.core.model import JobState, Phase
from tests.support.core_driver import PREEMPTED, STOCKOUT, USER_ERROR, Run, vname


def submits(actions):
    return [a for a in actions if isinstance(a, SubmitAttempt)]


def alerts(actions, kind=None):
    return [a for a in actions if isinstance(a, RaiseAlert) and (kind is None or a.kind == kind)]


def test_accepted_request_submits_attempt_1_from_scratch():
    run = Run.start()
    assert run.state.phase is Phase.SUBMITTING
    assert submits(run.actions) == [SubmitAttempt(1, None, None, False, True)]


def test_happy_path_ends_succeeded():
    run = Run.start()
    run.submitted(1)
    assert run.state.phase is Phase.QUEUED
    run.running(1)
    assert run.state.phase is Phase.RUNNING
    actions = run.ended(1, "SUCCEEDED")
    assert run.state.phase is Phase.SUCCEEDED
    assert actions == [MarkTerminal("succeeded", "completed")]


def test_preemption_resubmits_from_latest_checkpoint_without_spending_failures():
    run = Run.start(max_failures=0)
    run.submitted(1)
    run.running(1)
    run.feed(ev.CheckpointObserved(40, "gs://b/ckpt/step-0000000040"))
    actions = run.ended(1, "FAILED", 14, PREEMPTED)
    assert run.state.phase is Phase.BACKING_OFF
    (wake,) = [a for a in actions if isinstance(a, ScheduleWakeup)]
    assert 8 <= wake.at - run.now <= 12  # first retry: initial delay 10 s with 20% jitter
    assert run.state.preemptions == 1 and run.state.failures == 0
    assert run.feed(ev.TimerFired()) == [ScheduleWakeup(wake.at)]  # too early: nothing yet
    actions = run.wake()
    assert submits(actions) == [SubmitAttempt(2, "gs://b/ckpt/step-0000000040", 40, False, True)]


def test_trainer_exit_record_marks_preemption_even_with_a_generic_error():
    run = Run.start(max_failures=0)
    run.submitted(1)
    run.running(1)
    run.ended(1, "FAILED", 3, USER_ERROR, exit_reason="preempted")
    assert run.state.current.ending is Ending.PREEMPTED
    assert run.state.phase is Phase.BACKING_OFF


def test_user_errors_spend_the_budget_then_fail_with_an_alert():
    run = Run.start(max_failures=2, crash_loop_attempts=100)
    for n in (1, 2):
        run.submitted(n)
        run.running(n)
        run.ended(n, "FAILED", 3, USER_ERROR)
        assert run.state.phase is Phase.BACKING_OFF
        run.wake()
    run.submitted(3)
    run.running(3)
    actions = run.ended(3, "FAILED", 3, USER_ERROR)
    assert run.state.phase is Phase.FAILED and run.state.failures == 3
    (alert,) = alerts(actions, "job_failed")
    assert alert.severity == "ERROR" and "failure budget exhausted" in alert.summary
    assert actions[-1] == MarkTerminal("failed", run.state.terminal_reason)


def test_configuration_error_fails_at_once():
    run = Run.start(max_failures=5)
    run.submitted(1)
    run.running(1)
    run.ended(1, "FAILED", 3, "The replica workerpool0-0 exited with a non-zero status of 64.")
    assert run.state.phase is Phase.FAILED and "permanently" in run.state.terminal_reason


def test_backoff_grows_with_consecutive_failures_without_progress():
    run = Run.start(max_failures=10, crash_loop_attempts=100)
    delays = []
    for n in range(1, 6):
        run.submitted(n)
        run.ended(n, "FAILED", 8, STOCKOUT)
        delays.append(run.state.next_attempt_at - run.now)
        run.wake()
    assert delays == sorted(delays) and delays[-1] <= 100 * 1.2 and delays[0] >= 10 * 0.8
    assert run.state.failures == 5  # stockouts spend the failure budget
    assert run.state.no_progress_streak == 0  # but never ran, so it is no crash loop


def test_crash_loop_gives_up_after_attempts_without_checkpoint_progress():
    run = Run.start(max_failures=10, crash_loop_attempts=3)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n)
        actions = run.ended(n, "FAILED", 13, "Internal error occurred.")
        if n < 3:
            run.wake()
    assert run.state.phase is Phase.FAILED
    assert alerts(actions, "crash_loop")


def test_checkpoint_progress_resets_the_crash_loop_count():
    run = Run.start(max_failures=10, crash_loop_attempts=2)
    run.submitted(1)
    run.running(1)
    run.ended(1, "FAILED", 13, "Internal error occurred.")
    run.wake()
    run.submitted(2)
    run.running(2)
    run.feed(ev.CheckpointObserved(10, "gs://b/c/step-10"))
    run.ended(2, "FAILED", 13, "Internal error occurred.")
    assert run.state.phase is Phase.BACKING_OFF and run.state.no_progress_streak == 0


def test_max_preemptions_limits_preemptions():
    run = Run.start(max_preemptions=1)
    run.submitted(1)
    run.ended(1, "FAILED", 14, PREEMPTED)
    run.wake()
    run.submitted(2)
    run.ended(2, "FAILED", 14, PREEMPTED)
    assert run.state.phase is Phase.FAILED and "maxPreemptions=1" in run.state.terminal_reason


def test_switch_to_on_demand_after_n_preemptions():
    run = Run.start(on_demand_after_preemptions=2)
    for n in (1, 2):
        run.submitted(n)
        run.ended(n, "FAILED", 14, PREEMPTED)
        actions = run.wake()
    assert submits(actions)[0].on_demand is True
    assert [a.on_demand for a in run.state.attempts] == [False, False, True]


def test_cancel_while_running_cancels_the_vertex_job_and_ends_cancelled():
    run = Run.start()
    run.submitted(1)
    run.running(1)
    actions = run.feed(ev.CancelRequested())
    assert actions == [CancelVertexJob(vname(1), 1)] and run.state.phase is Phase.CANCELLING
    assert run.feed(ev.TimerFired()) == [CancelVertexJob(vname(1), 1)]  # level-triggered retry
    run.ended(1, "CANCELLED", 1, "CANCELED")
    assert run.state.phase is Phase.CANCELLED


def test_cancel_while_backing_off_stops_retries_at_once():
    run = Run.start()
    run.submitted(1)
    run.ended(1, "FAILED", 14, PREEMPTED)
    run.feed(ev.CancelRequested())
    assert run.state.phase is Phase.CANCELLED
    assert run.wake() == []


def test_cancel_before_the_vertex_name_is_known_looks_up_instead_of_creating():
    run = Run.start()
    actions = run.feed(ev.CancelRequested())
    assert actions == [SubmitAttempt(1, None, None, False, create_if_missing=False)]
    run.feed(ev.AttemptNotFound(1))
    assert run.state.phase is Phase.CANCELLED


def test_cancel_then_late_submission_report_cancels_that_job():
    run = Run.start()
    run.feed(ev.CancelRequested())
    actions = run.submitted(1)
    assert actions == [CancelVertexJob(vname(1), 1)]


def test_a_job_cancelled_outside_relaunch_ends_cancelled_with_a_warning():
    run = Run.start()
    run.submitted(1)
    actions = run.ended(1, "CANCELLED", 1, "CANCELED")
    assert run.state.phase is Phase.CANCELLED
    assert alerts(actions)[0].severity == "WARNING"


def test_permanent_submit_failure_fails_the_job():
    run = Run.start()
    run.feed(ev.SubmitFailed(1, "worker_pool_specs[0]: machine type unknown", permanent=True))
    assert run.state.phase is Phase.FAILED and "rejected" in run.state.terminal_reason


def test_transient_submit_failure_retries_the_same_attempt_later():
    run = Run.start()
    actions = run.feed(ev.SubmitFailed(1, "UNAVAILABLE", permanent=False))
    assert isinstance(actions[0], ScheduleWakeup) and run.state.phase is Phase.SUBMITTING
    actions = run.wake()
    assert submits(actions) == [SubmitAttempt(1, None, None, False, True)]


def test_reconcile_adopts_a_job_whose_name_was_never_recorded():
    run = Run.start()  # crashed after CreateCustomJob, before recording the name
    run.feed(ev.VertexObserved(1, vname(1), "RUNNING"))
    assert run.state.phase is Phase.RUNNING and run.state.current.vertex_name == vname(1)


def test_stale_event_about_an_old_attempt_changes_nothing():
    run = Run.start()
    run.submitted(1)
    run.ended(1, "FAILED", 14, PREEMPTED)
    run.wake()
    run.submitted(2)
    before = run.state
    assert run.ended(1, "FAILED", 14, PREEMPTED) == []
    assert run.state == before


def test_an_old_attempt_seen_running_is_cancelled_as_a_stray():
    run = Run.start()
    run.submitted(1)
    run.ended(1, "FAILED", 14, PREEMPTED)
    run.wake()
    run.submitted(2)
    before = run.state
    assert run.running(1) == [CancelVertexJob(vname(1), 1)]
    assert run.state == before


def test_nothing_changes_after_a_terminal_state():
    run = Run.start()
    run.submitted(1)
    run.ended(1, "SUCCEEDED")
    final = run.state
    for event in (
        ev.TimerFired(),
        ev.CancelRequested(),
        ev.RequestAccepted(),
        ev.CheckpointObserved(99, "gs://x"),
        ev.VertexObserved(1, vname(1), "FAILED"),
    ):
        assert run.feed(event) == []
    assert run.state == final


def test_vertex_job_deleted_outside_counts_as_infrastructure_failure():
    run = Run.start()
    run.submitted(1)
    run.feed(ev.VertexJobMissing(1, vname(1)))
    assert run.state.current.ending is Ending.INFRASTRUCTURE
    assert run.state.phase is Phase.BACKING_OFF and run.state.failures == 1


def test_capacity_wait_alert_is_raised_once_per_attempt():
    run = Run.start()
    run.config = CoreConfig(capacity_wait_alert_seconds=600)
    run.submitted(1)
    run.feed(ev.VertexObserved(1, vname(1), "PENDING"))
    assert run.feed(ev.TimerFired(), at=run.now + 100) == []
    first = run.feed(ev.TimerFired(), at=run.now + 600)
    second = run.feed(ev.TimerFired(), at=run.now + 60)
    assert [a.kind for a in alerts(first)] == ["capacity_wait"] and second == []


def test_preemption_storm_alert():
    run = Run.start()
    run.config = CoreConfig(preemption_storm_count=3, preemption_storm_window_seconds=3600)
    kinds = []
    for n in range(1, 5):
        run.submitted(n)
        kinds += [a.kind for a in alerts(run.ended(n, "FAILED", 14, PREEMPTED))]
        run.wake()
    assert kinds == ["preemption_storm"]
    assert run.state.phase is Phase.SUBMITTING  # a storm warns; it does not give up


def test_state_round_trips_through_json():
    import json

    run = Run.start(on_demand_after_preemptions=3)
    run.submitted(1)
    run.feed(ev.CheckpointObserved(5, "gs://b/step-5"))
    run.ended(1, "FAILED", 14, PREEMPTED)
    data = json.loads(json.dumps(run.state.to_dict()))
    assert JobState.from_dict(data) == run.state
