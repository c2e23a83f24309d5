"""Shrink to fit in the decision core: when an elastic job runs smaller, and when it grows back.

The job: a chief (workerpool0, 1 replica) and 3 workers that may shrink to 1 (4 replicas, at
least 2). Vertex's behaviour under a stockout is *unknown*: the attempt may wait QUEUED or
PENDING for ever ("Waiting for job to be provisioned"), or end FAILED with the documented
stockout text after Vertex's own retries. Both are driven here.
"""

from __future__ import annotations

import itertools
import random

import pytest

from controller.core import events as ev
from controller.core.actions import CancelVertexJob, RaiseAlert, ReadVertexJob, ScheduleWakeup, SubmitAttempt
from controller.core.classify import Ending
from controller.core.decide import decide, new_job
from controller.core.elastic import GROW_AFTER, GROW_NEVER, ElasticPolicy
from controller.core.model import JobState, Phase
from tests.support.core_driver import PREEMPTED, STOCKOUT, USER_ERROR, Run, make_policy, vname

FULL = (1, 3)
MINIMUM = (1, 1)
SHRINK_AFTER = 900.0


def elastic_run(grow_back: str = "everyAttempt", after: float | None = None, **policy) -> Run:
    elastic = ElasticPolicy(FULL, MINIMUM, SHRINK_AFTER, grow_back, after)
    run = Run(new_job("job-1", make_policy(**policy), 1000.0, elastic))
    run.feed(ev.RequestAccepted())
    return run


def submits(actions) -> list[SubmitAttempt]:
    return [a for a in actions if isinstance(a, SubmitAttempt)]


def waiting(run: Run, n: int, vertex_state: str = "QUEUED", *, at: float) -> list:
    return run.feed(ev.VertexObserved(n, vname(n), vertex_state), at=at)


def test_the_first_attempt_asks_for_the_full_size():
    run = elastic_run()
    assert run.state.current.replicas == FULL
    assert submits(run.actions)[0].replicas == FULL


def test_a_job_without_an_elastic_range_renders_the_request_as_it_is():
    run = Run.start()
    assert run.state.current.replicas is None and submits(run.actions)[0].replicas is None


@pytest.mark.parametrize("vertex_state", ["QUEUED", "PENDING"])  # which one Vertex shows is unknown
def test_waiting_past_shrink_after_replaces_the_attempt_with_a_smaller_one_exactly_once(vertex_state):
    run = elastic_run()
    run.submitted(1)  # submitted at 1000
    assert ScheduleWakeup(1000.0 + SHRINK_AFTER) in run.actions
    assert not submits(waiting(run, 1, vertex_state, at=1000.0 + SHRINK_AFTER - 1))  # not yet

    actions = waiting(run, 1, vertex_state, at=1000.0 + SHRINK_AFTER)
    first, second = run.state.attempts
    assert first.ending is Ending.CAPACITY and first.rule == "replaced-by-smaller"
    assert CancelVertexJob(vname(1), 1) in actions
    assert [s.replicas for s in submits(actions)] == [MINIMUM] and second.number == 2
    assert run.state.phase is Phase.SUBMITTING
    # Nothing spent: a capacity wait is nobody's fault.
    assert run.state.failures == 0 and run.state.preemptions == 0

    # The same observation again, late or duplicated: the old attempt is no longer current, so
    # only its job is cancelled (again, harmlessly); no third attempt.
    again = waiting(run, 1, vertex_state, at=1000.0 + SHRINK_AFTER + 5)
    assert again == [CancelVertexJob(vname(1), 1)] and len(run.state.attempts) == 2
    # The smaller attempt waits too: it is at the minimum, so it is never replaced.
    run.submitted(2)
    assert not submits(waiting(run, 2, vertex_state, at=1000.0 + 10 * SHRINK_AFTER))
    assert len(run.state.attempts) == 2 and run.state.phase is Phase.QUEUED


def test_the_timer_reads_the_job_before_replacing_it_and_a_start_in_between_keeps_it():
    run = elastic_run()
    run.submitted(1)
    due = 1000.0 + SHRINK_AFTER
    actions = run.feed(ev.TimerFired(), at=due)
    # A stored observation is not enough: read the job now.
    assert actions == [ReadVertexJob(vname(1), 1)] and len(run.state.attempts) == 1
    # The read shows it started meanwhile: it runs at the full size, nothing is replaced.
    run.running(1)
    assert run.state.phase is Phase.RUNNING and len(run.state.attempts) == 1
    assert run.state.current.replicas == FULL


def test_a_stockout_ending_before_it_ran_is_replaced_at_once_by_the_minimum():
    run = elastic_run()
    run.submitted(1)
    actions = run.ended(1, "FAILED", 8, STOCKOUT)  # Vertex gave up provisioning: the other answer
    assert run.state.attempts[0].ending is Ending.CAPACITY
    assert [s.replicas for s in submits(actions)] == [MINIMUM]
    assert run.state.phase is Phase.SUBMITTING and run.state.failures == 0
    assert any(isinstance(a, RaiseAlert) and a.kind == "capacity_wait" for a in actions)


def test_a_stockout_at_the_minimum_waits_as_any_capacity_ending_does():
    run = elastic_run()
    run.submitted(1)
    run.ended(1, "FAILED", 8, STOCKOUT)
    run.submitted(2)
    actions = run.ended(2, "FAILED", 8, STOCKOUT)
    assert run.state.phase is Phase.BACKING_OFF and not submits(actions)
    run.wake()
    assert run.state.current.replicas == MINIMUM  # it never ran: nothing says capacity is back


def test_quota_refusals_for_shrink_after_make_the_next_attempt_smaller():
    run = elastic_run()
    refused = ev.SubmitFailed(1, "The following quota metrics exceed quota limits", False, capacity=True)
    assert not submits(run.feed(refused, at=1000.0))
    run.wake()
    actions = run.feed(refused, at=1000.0 + SHRINK_AFTER)
    assert [s.replicas for s in submits(actions)] == [MINIMUM]
    assert run.state.attempts[0].rule == "replaced-by-smaller"
    assert not any(isinstance(a, CancelVertexJob) for a in actions)  # none was ever created


def shrunk_and_running(run: Run, start: float = 1000.0) -> None:
    """Attempt 1 waits past shrinkAfter; attempt 2 runs at the minimum."""
    run.submitted(1)
    waiting(run, 1, at=start + SHRINK_AFTER)
    run.submitted(2)
    run.now = start + SHRINK_AFTER + 60
    run.running(2)


def test_running_shrunk_raises_one_alert_and_the_next_attempt_asks_for_the_full_size_again():
    run = elastic_run()
    shrunk_and_running(run)
    alerts = [a for a in run.actions if isinstance(a, RaiseAlert) and a.kind == "running_shrunk"]
    assert len(alerts) == 1 and alerts[0].details["replicas"] == list(MINIMUM)
    assert run.state.outbox and run.state.outbox[-1].kind == "running_shrunk"
    run.running(2)  # seen running again: no second alert
    assert len([a for a in run.actions if isinstance(a, RaiseAlert) and a.kind == "running_shrunk"]) == 1

    # A reclaim of the shrunk gang: a preemption, no failure; the next attempt tries 4 again.
    run.now += 600
    run.ended(2, "FAILED", 8, PREEMPTED)
    assert run.state.preemptions == 1 and run.state.failures == 0
    actions = run.wake()
    assert [s.replicas for s in submits(actions)] == [FULL]
    # Capacity is back: it runs at the full size.
    run.submitted(3)
    run.running(3)
    assert run.state.current.replicas == FULL and run.state.phase is Phase.RUNNING


def test_a_full_size_retry_that_waits_again_is_shrunk_again_and_alerted_again():
    run = elastic_run()
    shrunk_and_running(run)
    run.now += 600
    run.ended(2, "FAILED", 8, PREEMPTED)
    run.wake()
    run.submitted(3)
    submitted_at = run.now
    waiting(run, 3, at=submitted_at + SHRINK_AFTER)
    assert run.state.current.number == 4 and run.state.current.replicas == MINIMUM
    run.submitted(4)
    run.running(4)
    assert len([a for a in run.actions if isinstance(a, RaiseAlert) and a.kind == "running_shrunk"]) == 2


def test_grow_back_after_a_time_keeps_the_shrunk_size_until_then():
    run = elastic_run(GROW_AFTER, after=7200.0)
    shrunk_and_running(run)  # shrunk at 1900 (attempt 2's intent)
    run.now = 1900.0 + 3600
    run.ended(2, "FAILED", 8, PREEMPTED)
    run.wake()
    assert run.state.current.replicas == MINIMUM  # an hour in: not yet
    run.submitted(3)
    run.running(3)
    run.now = 1900.0 + 7200
    run.ended(3, "FAILED", 8, PREEMPTED)
    run.wake()
    assert run.state.current.replicas == FULL  # two hours in: the full size again


def test_grow_back_never_stays_at_the_minimum():
    run = elastic_run(GROW_NEVER)
    shrunk_and_running(run)
    run.now += 600
    run.ended(2, "FAILED", 8, PREEMPTED)
    run.wake()
    assert run.state.current.replicas == MINIMUM


def test_a_user_error_of_a_shrunk_attempt_spends_the_budget_as_usual():
    run = elastic_run(max_failures=0)
    shrunk_and_running(run)
    run.ended(2, "FAILED", 3, USER_ERROR)
    assert run.state.phase is Phase.FAILED and run.state.failures == 1


def test_a_running_shrunk_job_is_never_stopped_to_grow():
    run = elastic_run()
    shrunk_and_running(run)
    for _ in range(5):
        run.now += 3600
        actions = run.feed(ev.TimerFired())
        assert not any(isinstance(a, (CancelVertexJob, SubmitAttempt)) for a in actions)
    assert run.state.phase is Phase.RUNNING and run.state.current.number == 2


def test_a_cancel_stops_the_shrinking():
    run = elastic_run()
    run.submitted(1)
    run.feed(ev.CancelRequested())
    actions = waiting(run, 1, at=1000.0 + SHRINK_AFTER)
    assert not submits(actions) and len(run.state.attempts) == 1


def test_the_sizes_survive_the_state_store_round_trip():
    run = elastic_run(GROW_AFTER, after=3600.0)
    shrunk_and_running(run)
    stored = JobState.from_dict(run.state.to_dict())
    assert stored == run.state
    assert stored.elastic == run.state.elastic and stored.current.replicas == MINIMUM


def test_a_state_stored_before_elastic_jobs_existed_still_loads():
    state = Run.start().state.to_dict()
    del state["elastic"]
    for attempt in state["attempts"]:
        del attempt["replicas"]
    loaded = JobState.from_dict(state)
    assert loaded.elastic is None and loaded.current.replicas is None


def test_reordered_events_never_make_more_than_one_replacement():
    """Every order of the same handful of late and duplicated observations ends with attempt 2 at
    the minimum and attempt 1's job cancelled, never a third attempt."""
    at = 1000.0 + SHRINK_AFTER
    events = [
        ev.VertexObserved(1, vname(1), "QUEUED"),
        ev.VertexObserved(1, vname(1), "PENDING"),
        ev.TimerFired(),
        ev.AttemptSubmitted(1, vname(1)),
    ]
    for order in itertools.permutations(events):
        base = elastic_run()
        base.submitted(1)
        state = base.state
        for event in order:
            state = decide(state, event, at, random.Random(0)).state
        assert len(state.attempts) == 2 and state.current.replicas == MINIMUM, order


def test_after_a_crash_that_lost_the_actions_the_next_passes_finish_the_replacement():
    """The replacement is one state write; its actions (cancel attempt 1, create attempt 2) may be
    lost to a crash. What is stored is enough: the timer asks for attempt 2 again (the shell
    adopts a CustomJob it finds by its labels before it creates one), and the next sight of
    attempt 1's live CustomJob cancels it."""
    run = elastic_run()
    run.submitted(1)
    waiting(run, 1, at=1000.0 + SHRINK_AFTER)
    stored = JobState.from_dict(run.state.to_dict())  # what the store holds; the actions are gone
    restarted = Run(stored, now=run.now + 30)

    again = restarted.feed(ev.TimerFired())
    assert [(s.attempt, s.replicas, s.create_if_missing) for s in submits(again)] == [(2, MINIMUM, True)]
    assert restarted.feed(ev.VertexObserved(1, vname(1), "QUEUED")) == [CancelVertexJob(vname(1), 1)]
    # Attempt 2's CustomJob was created before the crash: found by its labels, adopted, not made twice.
    restarted.feed(ev.VertexObserved(2, vname(2), "QUEUED"))
    assert restarted.state.current.vertex_name == vname(2) and restarted.state.phase is Phase.QUEUED
    assert len(restarted.state.attempts) == 2
