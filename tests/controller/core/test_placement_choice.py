"""The placement choice wired into the decision core: each new attempt of a job with placements
is put where the objective says, with the reason on the attempt; a stockout or a quota refusal
moves the next attempt at once; a running attempt is never moved; the refused placement is tried
again once another attempt has run.

Two regions, Spot in each: A (us-central1) is cheaper than B (europe-west4). No I/O: the rate
estimates are inputs, as the shell hands them to `decide`.
"""

from __future__ import annotations

import json
from dataclasses import replace

from controller.core import events as ev
from controller.core.actions import ScheduleWakeup, SubmitAttempt
from controller.core.classify import Ending
from controller.core.decide import decide, new_job
from controller.core.model import JobState, Phase
from controller.core.placement import JobCosts, Objective, Placement, Pool, Transfer
from controller.core.placement_choice import (
    PlacementInputs,
    choose_placements,
    evidence,
    refused,
    stockouts,
    wanted,
)
from tests.support.core_driver import PREEMPTED, STOCKOUT, Run, make_policy

POOLS = (Pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 1), Pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 1))
A = Placement("spot-a", "us-central1", POOLS, "SPOT", 1.0)
B = Placement("spot-b", "europe-west4", POOLS, "SPOT", 1.05)  # within the 10 % a refusal may move for
FAR = Placement("spot-far", "asia-east1", POOLS, "SPOT", 2.0)  # far dearer
FLEX = Placement("flex-b", "europe-west4", POOLS, "FLEX_START", 0.6, max_wait_seconds=3600.0)


def inputs(*placements: Placement, objective: Objective = Objective.LOWEST_COST) -> PlacementInputs:
    return PlacementInputs(
        placements=placements,
        objective=objective,
        deadline_at=None,
        rates={},  # every placement from its strategy's prior
        costs=JobCosts(30.0, 120.0, 300.0, 1e6),
        transfer=Transfer(None),
    )


class PlacedRun(Run):
    """A Run whose shell hands the placement inputs to every decide, as the reconcile does."""

    placing: PlacementInputs

    def feed(self, event, *, at: float | None = None):
        if at is not None:
            self.now = at
        decision = decide(self.state, event, self.now, self.rng, self.config, None, self.placing)
        self.state = decision.state
        self.actions.extend(decision.actions)
        return list(decision.actions)


def placed_run(*placements: Placement, objective: Objective = Objective.LOWEST_COST) -> PlacedRun:
    run = PlacedRun(new_job("job-1", make_policy(), 1000.0, None, tuple(p.name for p in placements)))
    run.placing = inputs(*placements, objective=objective)
    run.feed(ev.RequestAccepted())
    return run


def submits(actions) -> list[SubmitAttempt]:
    return [a for a in actions if isinstance(a, SubmitAttempt)]


def chosen(state: JobState) -> str:
    assert state.current is not None and state.current.placement is not None
    return str(state.current.placement["chosen"])


def test_a_job_without_placements_records_none_and_submits_as_today():
    run = Run.start()
    assert run.state.placements == () and run.state.current.placement is None
    assert submits(run.actions)[0].placement is None


def test_the_first_attempt_goes_to_the_cheapest_placement_with_the_figures_recorded():
    run = placed_run(B, A)
    assert chosen(run.state) == "spot-a"
    assert submits(run.actions)[0].placement == "spot-a"
    recorded = run.state.current.placement
    assert {f["name"] for f in recorded["figures"]} == {"spot-a", "spot-b"}
    assert "lowest cost per unit" in recorded["reason"] and "spot-b" in recorded["reason"]


def test_without_the_inputs_the_submission_waits_for_them_and_says_so():
    state = new_job("job-1", make_policy(), 1000.0, None, ("spot-a", "spot-b"))
    decision = decide(state, ev.RequestAccepted(), 1000.0, Run.start().rng)
    assert wanted(decision.actions) and decision.state.current.placement is None


def test_a_stockout_before_it_ran_moves_the_next_attempt_to_another_region_at_once():
    run = placed_run(A, B)
    run.submitted(1)
    ended = run.ended(1, "FAILED", 8, STOCKOUT)
    assert run.state.attempts[0].ending is Ending.CAPACITY
    # Due now, no backoff: the ending is written first, then the same look creates the next.
    assert ScheduleWakeup(run.now) in ended and run.state.next_attempt_at == run.now
    actions = run.feed(ev.TimerFired())
    assert [s.placement for s in submits(actions)] == ["spot-b"]
    assert run.state.phase is Phase.SUBMITTING and len(run.state.attempts) == 2
    assert "refused this attempt" in run.state.current.placement["reason"]
    assert run.state.failures == 0 and run.state.preemptions == 0


def test_a_quota_refusal_of_the_create_moves_the_next_attempt_at_once():
    run = placed_run(A, B)
    refused = run.feed(ev.SubmitFailed(1, "429 quota exceeded", permanent=False, capacity=True))
    first = run.state.attempts[0]
    assert first.ending is Ending.CAPACITY and first.rule == "create-refused-for-quota"
    assert ScheduleWakeup(run.now) in refused
    assert [s.placement for s in submits(run.feed(ev.TimerFired()))] == ["spot-b"]


def test_refused_where_the_others_cost_far_more_waits_the_capacity_backoff_for_the_same_placement():
    run = placed_run(A, FAR)
    run.submitted(1)
    run.ended(1, "FAILED", 8, STOCKOUT)
    actions = run.feed(ev.TimerFired())
    assert not submits(actions) and chosen(run.state) == "spot-a"
    retry_at = run.now + run.config.capacity_retry_seconds
    assert ScheduleWakeup(retry_at) in actions and run.state.next_attempt_at == retry_at
    assert run.state.current.placement["wait"] is True
    assert [s.placement for s in submits(run.wake())] == ["spot-a"]  # then it is submitted there


def test_once_another_attempt_has_run_the_cheaper_placement_that_refused_is_tried_again():
    run = placed_run(A, B)
    run.submitted(1)
    run.ended(1, "FAILED", 8, STOCKOUT)  # A stocked out: attempt 2 on B
    run.wake()
    run.submitted(2)
    run.now += 600
    run.preempted(2)  # B ran, then was reclaimed
    run.wake()
    assert chosen(run.state) == "spot-a" and run.state.current.number == 3
    assert submits(run.actions)[-1].placement == "spot-a"


def test_a_running_attempt_is_never_moved():
    run = placed_run(A, B)
    run.submitted(1)
    run.running(1)
    for _ in range(3):
        run.now += 3600
        assert not submits(run.feed(ev.TimerFired()))
    assert run.state.phase is Phase.RUNNING and len(run.state.attempts) == 1


def test_a_retried_submission_keeps_the_recorded_placement_even_when_the_inputs_changed():
    run = placed_run(A, B)
    run.feed(ev.SubmitFailed(1, "unavailable", permanent=False))  # transient: same attempt again
    run.placing = inputs(B)  # whatever the shell would say now
    actions = run.wake()
    assert [s.placement for s in submits(actions)] == ["spot-a"] and len(run.state.attempts) == 1


def test_flex_start_is_chosen_where_it_is_the_cheapest_and_the_reason_compares_spot():
    run = placed_run(A, FLEX)
    assert chosen(run.state) == "flex-b"
    assert "spot-a" in run.state.current.placement["reason"]


def test_refusals_count_only_the_trailing_run_of_attempts_that_never_ran():
    run = placed_run(A, B)
    run.submitted(1)
    run.ended(1, "FAILED", 8, STOCKOUT)
    run.wake()
    assert refused(run.state, 2) == frozenset({"spot-a"})
    run.submitted(2)
    run.running(2)
    run.ended(2, "FAILED", 8, PREEMPTED)
    assert refused(run.state, 3) == frozenset()


def test_waits_and_speeds_come_from_the_jobs_own_attempts_and_old_ones_fade():
    run = placed_run(A, B)
    run.submitted(1)
    run.now += 100
    run.running(1)
    run.feed(ev.CheckpointObserved(step=500, uri="gs://b/ckpt/500"))
    run.now += 1000
    run.ended(1, "FAILED", 8, PREEMPTED)
    seen = evidence(run.state, run.now)
    assert seen["spot-a"].wait_seconds == 100.0
    assert seen["spot-a"].units_per_second == 0.5
    # A second, slower attempt long ago weighs next to nothing beside a fresh one.
    fresh = run.state.attempts[0]
    old = replace(fresh, started_at=0.0, ended_at=1000.0, submitted_at=0.0, checkpoint_step_at_end=100)
    later = 1000.0 + 10 * 24 * 3600  # the old one ended ten days ago
    fresh = replace(fresh, submitted_at=later - 1100, started_at=later - 1000, ended_at=later)
    state = replace(run.state, attempts=(old, fresh))
    assert abs(evidence(state, later)["spot-a"].units_per_second - 0.5) < 0.01  # 0.3 unweighted
    # The configured half-life sets the scale: at 30 days ten days is a small age, and the
    # old attempt still pulls the speed well below the fresh one's.
    month = 30 * 24 * 3600.0
    assert evidence(state, later, half_life_seconds=month)["spot-a"].units_per_second < 0.4


def test_a_speed_measured_in_one_region_is_the_speed_of_the_same_machines_in_another():
    dear_flex = replace(FLEX, price_per_node_hour=3.0)
    run = placed_run(A, B, dear_flex)
    assert chosen(run.state) == "spot-a"
    run.submitted(1)
    run.running(1)
    run.feed(ev.CheckpointObserved(step=300, uri="gs://b/ckpt/300"))
    run.now += 600
    run.ended(1, "FAILED", 8, PREEMPTED)
    shapes = {p.name: p.pools for p in (A, B, FLEX)}
    seen = evidence(run.state, run.now, shapes)
    assert seen["spot-a"].units_per_second == seen["spot-b"].units_per_second == 0.5
    assert seen["flex-b"].units_per_second == 0.5  # FLEX's pools are the same machines here
    other = {**shapes, "flex-b": (POOLS[0],)}
    assert evidence(run.state, run.now, other)["flex-b"].units_per_second is None


def test_a_cancel_before_the_create_was_recorded_looks_for_the_job_where_it_was_placed():
    run = placed_run(B, A)
    actions = run.feed(ev.CancelRequested())  # no CustomJob name recorded yet
    (lookup,) = submits(actions)
    assert not lookup.create_if_missing and lookup.placement == "spot-a"


def test_an_auto_interval_is_chosen_for_the_capacity_of_the_attempts_placement():
    from controller.core.adaptive_interval import CheckpointCost, IntervalSetting
    from controller.core.checkpoint_interval import RateEstimate
    from controller.core.interval_choice import IntervalInputs

    calm, busy = RateEstimate(alpha=1.0, beta=360_000.0), RateEstimate(alpha=1.0, beta=1800.0)
    interval = IntervalInputs(
        IntervalSetting(auto=True, min_seconds=1.0, max_seconds=86_400.0),
        (A.capacity_class(), calm),  # what the jobSpec alone would run on
        (A.capacity_class(), calm),
        CheckpointCost(10.0, 30.0, "commit markers (3)"),
        {"spot-a": (A.capacity_class(), busy), "spot-b": (B.capacity_class(), calm)},
    )
    run = PlacedRun(new_job("job-1", make_policy(), 1000.0, None, ("spot-a", "spot-b")))
    run.placing = inputs(A, B)
    decision = decide(run.state, ev.RequestAccepted(), run.now, run.rng, run.config, interval, run.placing)
    attempt = decision.state.current
    assert attempt.placement["chosen"] == "spot-a"
    assert attempt.checkpoint_interval["capacity"] == A.capacity_class().key()
    busy_seconds = attempt.checkpoint_interval["seconds"]
    # The same job placed on the calm one gets a longer interval: the estimate followed it.
    run.placing = inputs(B)
    calm_state = decide(
        new_job("job-2", make_policy(), 1000.0, None, ("spot-b",)),
        ev.RequestAccepted(),
        run.now,
        run.rng,
        run.config,
        interval,
        run.placing,
    ).state
    assert calm_state.current.checkpoint_interval["seconds"] > busy_seconds


# A Spot placement 15 % dearer than A: beyond the 10 % a refusal moves for at once, so after a
# refusal of A the choice weighs one attempt's extra cost there (about $7 at the Spot prior's
# attempt length) against the expected wait for A at A's price ($2 an hour): a wait of over 3.6 h
# is worth the move, a shorter one is not.
DEARER = Placement("spot-m", "europe-west4", POOLS, "SPOT", 1.15)


def watch_stockout(run: PlacedRun, hours: float) -> None:
    """The current attempt's placement refuses every retry for `hours` (the job waiting for it),
    then starts and runs an hour before it is reclaimed."""
    until = run.now + hours * 3600
    while True:
        n = run.state.current.number
        run.submitted(n)
        if run.now >= until:
            break
        run.ended(n, "FAILED", 8, STOCKOUT)
        run.feed(ev.TimerFired())  # the next attempt: placed, and waiting for it
        assert chosen(run.state) == "spot-a" and run.state.current.placement["wait"] is True
        run.wake()
    run.running(n)
    run.now += 3600
    run.ended(n, "FAILED", 8, PREEMPTED)
    run.wake()


def refused_again(history_hours: float) -> PlacedRun:
    """A job that watched one stockout of A for `history_hours`, ran on A, and is refused by A again."""
    run = placed_run(A, DEARER)
    watch_stockout(run, history_hours)
    assert chosen(run.state) == "spot-a"
    n = run.state.current.number
    run.submitted(n)
    run.ended(n, "FAILED", 8, STOCKOUT)
    run.feed(ev.TimerFired())
    return run


def test_after_watching_long_stockouts_a_refusal_moves_at_once_and_after_short_ones_it_waits():
    # A stockout of A watched for 6 h (refused every two minutes, then A started): the job expects
    # the next one to last about (2 h prior + 6 h) / 2 = 4 h, worth more than the move's extra cost.
    long = refused_again(6)
    placement = long.state.current.placement
    assert chosen(long.state) == "spot-m" and placement["wait"] is False
    assert submits(long.actions)[-1].placement == "spot-m"
    # (5.97 h watched weighs 0.94 an hour after it ended: (2 + 5.6) / 1.94 = 3.9 h.)
    waited = next(f for f in placement["figures"] if f["name"] == "spot-a")["waitSeconds"]
    assert abs(waited / 3600 - 3.9) < 0.05
    assert "spot-a refused 0.0 h ago: 3.9 h expected yet" in placement["reason"]
    assert (
        "one attempt here costs $7.225 more, less than the expected wait for it (3.9 h)"
        in placement["reason"]
    )
    # Stockouts of ten minutes: the next is expected to last (2 h + 10 min) / 2, about an hour,
    # not worth a move 15 % dearer: the job waits for A after the capacity backoff.
    short = refused_again(10 / 60)
    assert chosen(short.state) == "spot-a" and short.state.current.placement["wait"] is True
    assert "1.1 h expected yet" in short.state.current.placement["reason"]


def test_the_stored_record_gives_a_restarted_controller_the_same_stockout_evidence_and_choice():
    run = refused_again(6)
    stored = json.loads(json.dumps(run.state.to_dict()))
    restored = JobState.from_dict(stored)
    assert evidence(restored, run.now) == evidence(run.state, run.now)
    # The choice for the refused attempt made again from the restored record: the same.
    submit = replace(submits(run.actions)[-1], placement=None)
    undecided = replace(restored.attempts[-1], placement=None)
    restored = replace(restored, attempts=restored.attempts[:-1] + (undecided,))
    again, actions = choose_placements(restored, [submit], run.placing, run.now, 120.0)
    assert again.current.placement == run.state.current.placement
    assert [a.placement for a in submits(actions)] == ["spot-m"]


def test_a_refusal_long_ago_predicts_no_wait_and_old_stockouts_fade_back_to_the_prior():
    run = refused_again(6)
    assert abs(evidence(run.state, run.now)["spot-a"].wait_seconds / 3600 - 3.9) < 0.05
    # Two days later, with nothing asked of A since, its refusal says next to nothing.
    assert evidence(run.state, run.now + 2 * 24 * 3600)["spot-a"].wait_seconds < 60.0
    # The same 6 h stockout three days before the refusal: it weighs 1/64 (12 h half-life), the
    # expected stockout is back near the 2 h prior, and the job waits for A rather than move.
    old = placed_run(A, DEARER)
    watch_stockout(old, 6)
    old.submitted(old.state.current.number)
    old.running(old.state.current.number)
    old.now += 3 * 24 * 3600
    old.ended(old.state.current.number, "FAILED", 8, PREEMPTED)
    old.wake()
    n = old.state.current.number
    old.submitted(n)
    old.ended(n, "FAILED", 8, STOCKOUT)
    old.feed(ev.TimerFired())
    assert chosen(old.state) == "spot-a" and old.state.current.placement["wait"] is True
    assert "2.1 h expected yet" in old.state.current.placement["reason"]


def test_with_a_long_capacity_retry_configured_the_refusals_between_retries_still_count_as_watched():
    run = placed_run(A, FAR)  # A refused: the job waits for it, asking again after each retry
    run.config = replace(run.config, capacity_retry_seconds=3600.0)
    for n in (1, 2, 3):
        run.submitted(n)
        run.ended(n, "FAILED", 8, STOCKOUT)
        run.feed(ev.TimerFired())
        assert chosen(run.state) == "spot-a" and run.state.current.placement["wait"] is True
        run.wake()  # an hour later
    run.submitted(4)
    run.running(4)
    # Refused at 0, 1 h and 2 h, started at 3 h: one stockout seen to end, 2.5 h watched.
    seen = stockouts(run.state, retry_seconds=3600.0)
    assert seen.ended == 1 and abs(seen.watched / 3600 - 2.5) < 0.01
    # Read as if the retry were the default 2 minutes, the hour-long gaps were unwatched.
    assert stockouts(run.state).ended == 0
