"""Restarts in place (Vertex restarting a CustomJob's replicas inside the same CustomJob): each one
the trainer's run records tell is counted once, as a preemption or a failure, in the budgets, the
storm alert and the checkpoint interval's rate book. Pure: no I/O."""

from controller.core import events as ev
from controller.core.actions import CancelVertexJob, RaiseAlert, SubmitAttempt
from controller.core.adaptive_interval import Ledger, restart_endings
from controller.core.checkpoint_interval import CapacityClass, EndingKind
from controller.core.classify import Ending, ReplicaExit
from controller.core.decide import CoreConfig
from controller.core.model import JobState, Phase
from controller.core.restarts import InPlaceRestart, from_evidence, unseen
from tests.support.core_driver import Run, vname

T0 = 1000.0


def running(**policy) -> Run:
    run = Run.start(**policy)
    run.submitted(1)
    run.running(1)
    return run


def reclaim(run_number: int, at: float, *, gap: float = 30.0, resume: int | None = 40) -> InPlaceRestart:
    """Run `run_number` began `gap` seconds after the previous run's chief recorded `preempted`."""
    return from_evidence(
        run_number,
        at + gap,
        (ReplicaExit("workerpool0-0", "preempted", 75, "SIGTERM", step=45),),
        "preempted",
        at,
        at,
        45,
        resume,
    )


def crash(run_number: int, at: float) -> InPlaceRestart:
    exits = (
        ReplicaExit("workerpool0-0", "stopped_by_peer", 70, step=25),
        ReplicaExit("workerpool1-0", "runtime_error", 70, step=25, detail="RuntimeError: boom"),
    )
    return from_evidence(run_number, at + 20, exits, "runtime_error", at, at, 25)


def restarts_seen(run: Run, *restarts: InPlaceRestart) -> list:
    return run.feed(ev.RestartsObserved(1, vname(1), restarts))


def test_a_restart_in_place_after_a_reclaim_counts_one_preemption_once_and_starts_nothing():
    run = running(max_failures=0)
    first = reclaim(2, run.now + 100)
    actions = restarts_seen(run, first)
    assert (run.state.preemptions, run.state.failures) == (1, 0)
    assert run.state.phase is Phase.RUNNING and run.state.current.restarts == (first,)
    assert not [a for a in actions if isinstance(a, (SubmitAttempt, CancelVertexJob))]
    # The probe reads the same records again, then a second restart: each run counted once.
    assert restarts_seen(run, first) == [] and run.state.preemptions == 1
    restarts_seen(run, first, reclaim(3, run.now + 300))
    assert run.state.preemptions == 2 and [r.run for r in run.state.current.restarts] == [2, 3]


def test_a_restart_after_the_program_failed_spends_the_failure_budget_and_can_end_the_job():
    run = running(max_failures=0)
    actions = restarts_seen(run, crash(2, run.now + 50))
    assert (run.state.preemptions, run.state.failures) == (0, 1)
    assert run.state.phase is Phase.FAILED
    assert "workerpool1-0 runtime_error exit 70" in run.state.terminal_reason
    # The CustomJob Vertex keeps restarting is stopped.
    assert CancelVertexJob(vname(1), 1) in actions
    assert any(isinstance(a, RaiseAlert) and a.kind == "job_failed" for a in actions)


def test_restarts_beyond_max_preemptions_end_the_job():
    run = running(max_preemptions=1)
    restarts_seen(run, reclaim(2, run.now + 10))
    assert run.state.phase is Phase.RUNNING
    actions = restarts_seen(run, reclaim(3, run.now + 200))
    assert run.state.phase is Phase.FAILED and CancelVertexJob(vname(1), 1) in actions
    assert "maxPreemptions=1" in run.state.terminal_reason


def test_restarts_in_place_feed_the_preemption_storm_alert():
    run = running()
    run.config = CoreConfig(preemption_storm_count=3, preemption_storm_window_seconds=3600)
    restarts_seen(run, reclaim(2, run.now + 10), reclaim(3, run.now + 100))
    assert not any(isinstance(a, RaiseAlert) and a.kind == "preemption_storm" for a in run.actions)
    actions = restarts_seen(run, reclaim(4, run.now + 200))
    (storm,) = [a for a in actions if isinstance(a, RaiseAlert) and a.kind == "preemption_storm"]
    assert storm.details["recentPreemptions"] == 3


def test_restarts_read_with_the_ending_are_counted_before_it():
    run = running(max_failures=3)
    run.feed(ev.CheckpointObserved(100, "gs://b/ckpt/step-0000000100"))
    run.ended(1, "SUCCEEDED", restarts=(reclaim(2, run.now - 500), crash(3, run.now - 200)))
    assert run.state.phase is Phase.SUCCEEDED
    assert (run.state.preemptions, run.state.failures) == (1, 1)
    assert [r.counted_as for r in run.state.attempts[0].restarts] == ["preempted", "failure"]


def test_restarts_of_an_ended_attempt_are_not_counted_from_a_late_probe():
    run = running()
    run.preempted(1)
    assert restarts_seen(run, reclaim(2, run.now)) == []
    assert run.state.preemptions == 1


def test_the_evidence_table_reclaim_kill_and_failure():
    assert not reclaim(2, T0).previous_failed and reclaim(2, T0).restarting_seconds == 30.0
    killed = from_evidence(2, T0, (), None, None, None)
    assert not killed.previous_failed and killed.previous_ended_at is None
    assert "no exit record" in killed.evidence
    assert crash(2, T0).previous_failed and crash(2, T0).previous_reason == "runtime_error"
    oom = from_evidence(
        2,
        T0,
        (ReplicaExit("workerpool1-0", "runtime_error", 137, "SIGKILL (out of memory)"),),
        None,
        None,
        T0,
    )
    assert oom.previous_failed
    # A chief's own error with no replica record left.
    assert from_evidence(2, T0, (), "runtime_error", T0 - 5, None).previous_failed


def test_unseen_counts_each_run_once_in_order():
    a, b = reclaim(2, T0), reclaim(3, T0 + 100)
    assert unseen((), (b, a, a)) == (a, b)
    assert unseen((a,), (a, b)) == (b,)
    assert unseen((), (from_evidence(1, T0, (), None, None, None),)) == ()


def test_state_with_restarts_round_trips_through_its_stored_form():
    run = running()
    restarts_seen(run, reclaim(2, run.now + 10), crash(3, run.now + 100))
    assert JobState.from_dict(run.state.to_dict()) == run.state


def test_each_restart_is_an_ending_for_the_rate_book_with_the_run_it_cut_short():
    started = T0
    restarts = (
        reclaim(2, T0 + 100, gap=20, resume=45),
        reclaim(3, T0 + 300, resume=40),
        from_evidence(4, T0 + 500, (), None, None, None),
    )
    endings = restart_endings(restarts, started)
    assert endings == (
        (EndingKind.RECLAIM_SAVED, 100.0),  # resumed at the step it stopped at
        (EndingKind.RECLAIM_UNSAVED, 180.0),  # 120 -> 300: work after step 40 recomputed
        (EndingKind.KILLED, 170.0),  # no record: from run 3's start (330) to run 4's (500)
    )
    capacity = CapacityClass("us-central1", "n1-standard-4", "", "SPOT")
    without = Ledger().record("j", 1, capacity, EndingKind.RECLAIM_SAVED, 600.0, T0)
    with_restarts = Ledger().record("j", 1, capacity, EndingKind.RECLAIM_SAVED, 600.0, T0, restarts=endings)
    before, after = without.book.estimate(capacity), with_restarts.book.estimate(capacity)
    assert after.endings == before.endings + 2  # the unsaved reclaim and the kill lose work
    assert after.exposure_seconds == before.exposure_seconds  # the attempt's exposure, split


def test_a_preempted_attempt_ending_counts_alongside_its_restarts():
    run = running()
    restarts_seen(run, reclaim(2, run.now + 10))
    run.preempted(1)
    assert run.state.attempts[0].ending is Ending.PREEMPTED
    assert run.state.preemptions == 2
