"""Scenarios of a job's life, each checking what a user would see."""

from controller.core import events as ev
from controller.core.actions import (
    CancelVertexJob,
    MarkTerminal,
    RaiseAlert,
    ReadVertexJob,
    ScheduleWakeup,
    SubmitAttempt,
)
from controller.core.classify import Ending, ReplicaExit
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
    assert submits(run.actions) == [SubmitAttempt(1, None, None, False, True, new_attempt=True)]


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
    actions = run.ended(1, "FAILED", 8, PREEMPTED)
    assert run.state.phase is Phase.BACKING_OFF
    # A reclaim after progress is nobody's fault: the next attempt is due at once, no backoff.
    (wake,) = [a for a in actions if isinstance(a, ScheduleWakeup)]
    assert wake.at == run.now
    assert run.state.preemptions == 1 and run.state.failures == 0
    actions = run.wake()
    assert submits(actions) == [
        SubmitAttempt(2, "gs://b/ckpt/step-0000000040", 40, False, True, new_attempt=True)
    ]


def test_reclaims_in_a_row_without_progress_back_off():
    run = Run.start(max_failures=0, crash_loop_attempts=100)
    run.submitted(1)
    run.preempted(1)
    delay = run.state.next_attempt_at - run.now
    assert 8 <= delay <= 12  # no progress: the backoff's first delay, 10 s with 20% jitter


def test_trainer_exit_record_marks_preemption_even_with_a_generic_error():
    run = Run.start(max_failures=0)
    run.submitted(1)
    run.running(1, spot=False)
    run.ended(1, "FAILED", 13, "Internal error occurred.", exit_reason="preempted", spot=False)
    assert run.state.current.ending is Ending.PREEMPTED
    assert run.state.phase is Phase.BACKING_OFF


def test_a_crashed_worker_beats_the_chiefs_sigterm_record_and_the_gang_fails_after_max_failures():
    """Vertex tears the gang down when a worker exits 1; the chief writes `preempted` on that
    SIGTERM. The worker's crash is what happened: it spends the budget, and the job ends."""
    run = Run.start(max_failures=2, crash_loop_attempts=100)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n)
        actions = run.ended(n, "FAILED", 3, USER_ERROR, exit_reason="preempted")
        assert run.state.current.rule == "replica-exit-error"
        if n < 3:
            run.wake()
    assert run.state.phase is Phase.FAILED and run.state.failures == 3 and run.state.preemptions == 0
    assert alerts(actions, "job_failed")


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
        run.ended(n, "FAILED", 13, "Internal error occurred.")
        delays.append(run.state.next_attempt_at - run.now)
        run.wake()
    assert delays == sorted(delays) and delays[-1] <= 100 * 1.2 and delays[0] >= 10 * 0.8
    assert run.state.failures == 5  # internal errors spend the failure budget
    assert run.state.no_progress_streak == 0  # but never ran, so it is no crash loop


def test_crash_loop_gives_up_after_attempts_without_checkpoint_progress():
    run = Run.start(max_failures=10, crash_loop_attempts=3)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n, spot=False)
        actions = run.ended(n, "FAILED", 13, "Internal error occurred.", spot=False)
        if n < 3:
            run.wake()
    assert run.state.phase is Phase.FAILED
    assert alerts(actions, "crash_loop")


def test_reclaims_whose_checkpoint_root_is_unreadable_do_not_stop_a_job_as_a_crash_loop():
    """The controller cannot read the bucket (403): no checkpoint and no exit record are seen.
    That proves nothing about progress, so the job keeps being recovered, each ending marked."""
    run = Run.start(max_failures=0, crash_loop_attempts=2)
    for n in range(1, 6):
        run.submitted(n)
        run.running(n)
        run.feed(
            ev.VertexObserved(
                n, vname(n), "FAILED", 8, PREEMPTED, end_time=run.now, spot=True, progress_unknown=True
            )
        )
        assert run.state.current.progress_unknown
        assert run.state.phase is Phase.BACKING_OFF
        run.wake()
    assert run.state.preemptions == 5 and run.state.no_progress_streak == 0


def test_failures_with_progress_unknown_still_spend_the_failure_budget():
    run = Run.start(max_failures=2, crash_loop_attempts=100)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n, spot=False)
        actions = run.feed(
            ev.VertexObserved(
                n, vname(n), "FAILED", 13, "Internal error occurred.", end_time=run.now, progress_unknown=True
            )
        )
        if n < 3:
            run.wake()
    assert run.state.phase is Phase.FAILED and run.state.failures == 3
    assert alerts(actions, "job_failed")


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
    run.preempted(1)
    run.wake()
    run.submitted(2)
    run.preempted(2)
    assert run.state.phase is Phase.FAILED and "maxPreemptions=1" in run.state.terminal_reason


def test_switch_to_on_demand_after_n_preemptions():
    run = Run.start(on_demand_after_preemptions=2)
    for n in (1, 2):
        run.submitted(n)
        run.preempted(n)
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
    run.preempted(1)
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
    # The same attempt again, not a new one: the adapter looks it up before creating (the
    # failed create may have made it after all).
    assert submits(actions) == [SubmitAttempt(1, None, None, False, True, new_attempt=False)]


def test_reconcile_adopts_a_job_whose_name_was_never_recorded():
    run = Run.start()  # crashed after CreateCustomJob, before recording the name
    run.feed(ev.VertexObserved(1, vname(1), "RUNNING"))
    assert run.state.phase is Phase.RUNNING and run.state.current.vertex_name == vname(1)


def test_stale_event_about_an_old_attempt_changes_nothing():
    run = Run.start()
    run.submitted(1)
    run.preempted(1)
    run.wake()
    run.submitted(2)
    before = run.state
    assert run.ended(1, "FAILED", 14, PREEMPTED) == []
    assert run.state == before


def test_an_old_attempt_seen_running_is_cancelled_as_a_stray():
    run = Run.start()
    run.submitted(1)
    run.preempted(1)
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
        run.running(n)
        kinds += [a.kind for a in alerts(run.ended(n, "FAILED", 8, PREEMPTED, exit_reason="preempted"))]
        run.wake()
    assert kinds == ["preemption_storm"]
    assert run.state.phase is Phase.SUBMITTING  # a storm warns; it does not give up


def test_state_round_trips_through_json():
    import json

    run = Run.start(on_demand_after_preemptions=3)
    run.submitted(1)
    run.feed(ev.CheckpointObserved(5, "gs://b/step-5"))
    run.preempted(1)
    data = json.loads(json.dumps(run.state.to_dict()))
    assert JobState.from_dict(data) == run.state


# --- Vertex as documented: reclaims, the late error, capacity and quota ------------------------


def test_five_reclaims_that_kill_at_once_spend_no_failures_while_checkpoints_advance():
    """No exit record (SIGKILL before the emergency save) and no word "preempt": still preemptions."""
    run = Run.start(max_failures=0, crash_loop_attempts=2)
    for n in range(1, 6):
        run.submitted(n)
        run.running(n)
        run.feed(ev.CheckpointObserved(10 * n, f"gs://b/c/step-{10 * n}"))
        run.ended(n, "FAILED", 8, STOCKOUT)
        assert run.state.current.rule == "spot-reclaim"
        run.wake()
    assert run.state.preemptions == 5 and run.state.failures == 0
    assert run.state.phase is Phase.SUBMITTING


def test_reclaims_inferred_without_progress_still_end_as_a_crash_loop():
    """Once training had started (a replica recorded a step), reclaims without progress add up."""
    trained = (ReplicaExit("workerpool0-0", "stopped_by_peer", 143, step=5),)
    run = Run.start(max_failures=0, crash_loop_attempts=3)
    for n in (1, 2, 3):
        run.submitted(n)
        run.running(n)
        actions = run.ended(n, "FAILED", 8, PREEMPTED, replica_exits=trained)
        if n < 3:
            run.wake()
    assert run.state.failures == 0 and run.state.phase is Phase.FAILED
    assert alerts(actions, "crash_loop")


def test_a_failed_job_without_its_error_is_read_again_then_classified():
    """Not Spot, nothing from the trainer: the one ending that still waits for Vertex's error."""
    run = Run.start(max_failures=0)
    run.config = CoreConfig(error_settle_seconds=90, error_recheck_seconds=10)
    run.submitted(1)
    run.running(1, spot=False)
    first_seen = run.now
    actions = run.ended(1, "FAILED", spot=False)
    assert actions == [ScheduleWakeup(first_seen + 10)]
    assert run.state.phase is Phase.RUNNING and not run.state.current.ended
    assert run.feed(ev.TimerFired(), at=first_seen + 10) == [ReadVertexJob(vname(1), 1)]
    run.now = first_seen + 10
    assert run.ended(1, "FAILED", spot=False) == [ScheduleWakeup(first_seen + 20)]  # again later
    # Vertex fills the error in: classified at once, from it.
    run.now = first_seen + 60
    run.ended(1, "FAILED", 3, USER_ERROR, spot=False)
    assert run.state.current.ending is Ending.USER_ERROR and run.state.failures == 1


def test_the_error_wait_is_bounded_and_then_what_there_is_decides():
    run = Run.start(max_failures=0)
    run.config = CoreConfig(error_settle_seconds=90)
    run.submitted(1)
    run.running(1, spot=False)
    first_seen = run.now
    run.ended(1, "FAILED", spot=False)
    assert run.feed(ev.TimerFired(), at=first_seen + 90) == [ReadVertexJob(vname(1), 1)]
    run.ended(1, "FAILED", spot=False)  # still no error: what there is decides
    assert run.state.current.ending is Ending.INFRASTRUCTURE and run.state.failures == 1


def test_a_chief_sigterm_record_waits_for_the_error_but_a_runtime_error_record_does_not():
    run = Run.start(max_failures=3)
    run.submitted(1)
    run.running(1)
    assert [type(a) for a in run.ended(1, "FAILED", exit_reason="preempted")] == [ScheduleWakeup]
    run.ended(1, "FAILED", 3, USER_ERROR, exit_reason="preempted")
    assert run.state.current.ending is Ending.USER_ERROR
    run.wake()
    run.submitted(2)
    run.running(2)
    run.ended(2, "FAILED", exit_reason="runtime_error")
    assert run.state.attempts[1].ending is Ending.USER_ERROR


def test_a_stockout_before_running_is_retried_at_once_then_backs_off_to_the_capacity_retry():
    run = Run.start(max_failures=0)
    run.config = CoreConfig(capacity_retry_seconds=120)
    kinds = []
    # The first retry at once; then 15, 30, 60 s and the capacity retry, each up to a fifth more.
    windows = [(0, 0), (15, 18), (30, 36), (60, 72), (120, 144), (120, 144)]
    for n, (low, high) in enumerate(windows, start=1):
        run.submitted(n)
        actions = run.ended(n, "FAILED", 8, STOCKOUT)
        kinds += [a.kind for a in alerts(actions)]
        assert run.state.current.ending is Ending.CAPACITY
        assert low <= run.state.next_attempt_at - run.now <= high
        run.wake()
    assert run.state.failures == 0 and run.state.phase is Phase.SUBMITTING
    assert kinds == ["capacity_wait"]  # once per run of refusals
    run.submitted(7)
    run.running(7)
    assert run.state.capacity_wait_since is None  # running again: the next refusal warns anew


def test_a_quota_refusal_at_create_backs_off_for_minutes_and_warns_once():
    run = Run.start(max_failures=0)
    run.config = CoreConfig(capacity_retry_seconds=120, submit_retry_seconds=30)
    quota = "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_cpus"
    first = run.feed(ev.SubmitFailed(1, quota, permanent=False, capacity=True))
    assert [a.kind for a in alerts(first)] == ["capacity_wait"] and quota in alerts(first)[0].summary
    assert run.state.next_attempt_at - run.now >= 120
    run.wake()
    second = run.feed(ev.SubmitFailed(1, quota, permanent=False, capacity=True))
    assert alerts(second) == [] and run.state.failures == 0 and run.state.phase is Phase.SUBMITTING


def test_a_timeout_whose_chief_was_sigtermed_is_a_timeout():
    run = Run.start(max_failures=0)
    run.submitted(1)
    run.running(1)
    run.ended(1, "FAILED", 4, "Job exceeded its timeout of 60s.", exit_reason="preempted")
    assert run.state.current.ending is Ending.TIMEOUT and run.state.phase is Phase.FAILED


def _lost_checkpoints(run: Run) -> list:
    """Attempt 2 resumes from step 40, and the trainer finds nothing under the root it can load."""
    run.submitted(1)
    run.running(1)
    run.feed(ev.CheckpointObserved(40, "gs://b/ckpt/step-0000000040"))
    run.ended(1, "FAILED", 8, PREEMPTED)
    run.wake()
    run.submitted(2)
    run.running(2)
    return run.feed(
        ev.VertexObserved(
            2,
            vname(2),
            "FAILED",
            3,
            "The replica workerpool0-0 exited with a non-zero status of 65. Termination reason: Error.",
            end_time=run.now,
            exit_reason="no_usable_checkpoint",
            spot=True,
            checkpoint_root="gs://b/ckpt",
            steps_lost=40,
        )
    )


def test_no_usable_checkpoint_fails_the_job_by_default_with_an_alert_naming_the_loss():
    run = Run.start(max_failures=5)
    actions = _lost_checkpoints(run)
    assert run.state.phase is Phase.FAILED
    assert run.state.current.ending is Ending.NO_USABLE_CHECKPOINT
    assert run.state.failures == 0  # not the user's error: the failure budget is untouched
    (alert,) = alerts(actions, "checkpoint_lost")
    assert alert.severity == "ERROR" and "gs://b/ckpt" in alert.summary and "step 40" in alert.summary


def test_no_usable_checkpoint_restarts_from_scratch_when_the_policy_says_so():
    run = Run.start(max_failures=0, on_no_usable_checkpoint="restartFromScratch")
    actions = _lost_checkpoints(run)
    assert run.state.phase is Phase.BACKING_OFF and run.state.failures == 0
    (alert,) = alerts(actions, "checkpoint_lost")
    assert alert.details["stepsLost"] == 40 and "restarting from step 0" in alert.summary
    # The next attempt has no resume point: the trainer starts at step 0.
    assert submits(run.wake()) == [SubmitAttempt(3, None, None, False, True, new_attempt=True)]


def test_every_alert_is_written_to_the_outbox_with_its_cause_and_leaves_it_once_delivered():
    """A transactional outbox: the page travels in the same state write as the failure, so a
    crash or a lost lease between the write and the publish cannot lose it."""
    run = Run.start(max_failures=0, crash_loop_attempts=100)
    run.submitted(1)
    run.running(1, spot=False)
    actions = run.ended(1, "FAILED", 3, USER_ERROR)
    (alert,) = alerts(actions, "job_failed")
    assert run.state.phase is Phase.FAILED
    assert [p.outbox_id for p in run.state.outbox] == [alert.outbox_id]
    assert JobState.from_dict(run.state.to_dict()).outbox == run.state.outbox

    run.feed(ev.AlertDelivered(alert.outbox_id))  # delivered after the job ended: still counts
    assert run.state.outbox == ()
    run.feed(ev.AlertDelivered(alert.outbox_id))  # a repeated report changes nothing
    assert run.state.outbox == () and run.state.phase is Phase.FAILED


def test_a_cancel_is_asked_again_until_vertex_says_cancelling_and_then_never():
    """Each ask is one CancelCustomJob and one "cancelling vertex job" log line: once Vertex says
    CANCELLING the cancel has landed, so neither a timer nor a look at the job asks again."""
    run = Run.start()
    run.submitted(1)
    run.running(1)
    assert run.feed(ev.CancelRequested()) == [CancelVertexJob(vname(1), 1)]
    assert run.feed(ev.TimerFired()) == [CancelVertexJob(vname(1), 1)]  # not landed yet: ask again
    assert run.feed(ev.VertexObserved(1, vname(1), "CANCELLING")) == []
    assert [run.feed(ev.TimerFired()) for _ in range(3)] == [[], [], []]
    assert run.feed(ev.VertexObserved(1, vname(1), "CANCELLING")) == []
    run.ended(1, "CANCELLED", 1, "CANCELED")
    assert run.state.phase is Phase.CANCELLED
