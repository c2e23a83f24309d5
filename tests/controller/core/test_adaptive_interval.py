"""The adaptive interval's bookkeeping: what an ending teaches, the idempotent ledger, C from
markers, and the decision for the next attempt. Pure: no I/O."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from controller.core.adaptive_interval import (
    DEFAULT_CHECKPOINT_STALL_SECONDS,
    EXPOSURE_RUN_TIME,
    EXPOSURE_TRAINING,
    MAX_REMEMBERED_JOBS,
    CheckpointCost,
    EndingFacts,
    Exposure,
    IntervalSetting,
    Ledger,
    checkpoint_cost,
    decide_interval,
    ending_kind,
    estimate_for,
    exposure,
    exposure_seconds,
)
from controller.core.checkpoint_interval import CapacityClass, EndingKind, RateEstimate, prior_for
from controller.core.classify import Ending

SPOT = CapacityClass("us-central1", "n1-standard-4", "", "SPOT")
OTHER = CapacityClass("europe-west4", "a3-highgpu-8g", "NVIDIA_H100_80GB", "SPOT")
AUTO = IntervalSetting(auto=True, min_seconds=1.0, max_seconds=3600.0)


def facts(ending: Ending, *, rule: str = "r", ran: bool = True, reason=None, saved=None) -> EndingFacts:
    return EndingFacts(
        ending=ending,
        rule=rule,
        started_at=100.0 if ran else None,
        ended_at=400.0,
        exit_reason=reason,
        checkpoint_saved=saved,
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (facts(Ending.PREEMPTED, reason="preempted", saved=True), EndingKind.RECLAIM_SAVED),
        (facts(Ending.PREEMPTED, reason="preempted", saved=False), EndingKind.RECLAIM_UNSAVED),
        (facts(Ending.PREEMPTED, rule="spot-reclaim"), EndingKind.KILLED),
        (facts(Ending.INFRASTRUCTURE, rule="capacity"), EndingKind.NODE_LOST),
        (facts(Ending.INFRASTRUCTURE, rule="internal"), EndingKind.CRASHED),
        (facts(Ending.INFRASTRUCTURE, rule="rendezvous-timeout"), None),
        (facts(Ending.SUCCEEDED), EndingKind.SUCCEEDED),
        (facts(Ending.CANCELLED), EndingKind.CANCELLED),
        (facts(Ending.USER_ERROR), EndingKind.USER_ERROR),
        (facts(Ending.TIMEOUT), EndingKind.USER_ERROR),
        (facts(Ending.CAPACITY), None),
        (facts(Ending.NO_USABLE_CHECKPOINT), None),
        (facts(Ending.PREEMPTED, ran=False), None),
    ],
)
def test_each_ending_counts_as_the_documented_kind(case, expected):
    assert ending_kind(case) is expected


def test_exposure_is_the_running_time_and_zero_for_an_attempt_that_never_ran():
    assert exposure_seconds(facts(Ending.PREEMPTED)) == 300.0
    assert exposure_seconds(facts(Ending.PREEMPTED, ran=False)) == 0.0


def timed(progress, resume_step=None) -> EndingFacts:
    """Ran from 100 to 400 (Vertex's times), with the trainer's (step, time) points."""
    return replace(facts(Ending.PREEMPTED), progress=tuple(progress), resume_step=resume_step)


def test_exposure_is_training_time_when_the_trainer_dated_two_steps_of_the_attempt():
    # Resumed at step 100; steps 110 and 130 reached at 200 and 240 s: 2 s a step, so step 101
    # began at 180 s. The 80 s before it (image pull, rendezvous, restore) are no exposure.
    found = exposure(timed([(130, 240.0), (110, 200.0)], resume_step=100))
    assert (found.seconds, found.source) == (220.0, EXPOSURE_TRAINING)
    # From scratch the same way: steps 10 and 30 at 200 and 240 s, step 1 began at 180 s.
    assert exposure(timed([(10, 200.0), (30, 240.0)])).seconds == 220.0


def test_a_step_dated_twice_counts_at_its_earliest_time_and_steps_before_the_resume_are_ignored():
    # The exit record of a saved reclaim names the emergency save's step again, later.
    points = [(110, 200.0), (130, 240.0), (130, 290.0), (100, 150.0), (90, 120.0)]
    assert exposure(timed(points, resume_step=100)).seconds == 220.0


def test_exposure_falls_back_to_the_run_time_without_two_dated_steps_or_when_they_date_the_start_badly():
    for progress in ([], [(120, 300.0)], [(110, 250.0), (130, 250.0)]):
        found = exposure(timed(progress, resume_step=100))
        assert (found.seconds, found.source) == (300.0, EXPOSURE_RUN_TIME)
    # Slow steps early on (or a skewed clock) would date the first step before Vertex's start.
    assert exposure(timed([(1000, 390.0), (1001, 391.0)])) == exposure(timed([]))
    # Whole-second stamps 1 s apart, 1000 steps after the first: 280 s +- 200 s says nothing.
    assert exposure(timed([(1000, 380.0), (1010, 381.0)])) == exposure(timed([]))
    # Stamps 100 s apart, 100 steps after the first, date it well enough (+- 3 s): at 200 s.
    found = exposure(timed([(1000, 300.0), (1100, 400.0)], resume_step=900))
    assert found == Exposure(200.0, EXPOSURE_TRAINING)


def test_a_work_losing_ending_raises_the_rate_of_its_class_only():
    ledger = Ledger().record("job", 1, SPOT, EndingKind.KILLED, 300.0, now=1.0)
    estimate = ledger.book.estimate(SPOT)
    assert (estimate.endings, estimate.exposure_seconds) == (1, 300.0)
    assert estimate.mean_rate > prior_for(SPOT).mean_rate
    assert ledger.book.estimate(OTHER) == prior_for(OTHER)


def test_the_same_ending_applied_twice_counts_once():
    once = Ledger().record("job", 1, SPOT, EndingKind.KILLED, 300.0, now=1.0)
    twice = once.record("job", 1, SPOT, EndingKind.KILLED, 300.0, now=2.0)
    assert twice == once
    # An older attempt of the same job, seen late, was counted before its successor.
    assert once.record("job", 1, SPOT, EndingKind.RECLAIM_SAVED, 50.0, now=3.0) == once
    third = once.record("job", 2, SPOT, EndingKind.RECLAIM_SAVED, 100.0, now=3.0)
    assert third.book.estimate(SPOT).saved_reclaims == 1 and third.book.estimate(SPOT).endings == 1


def test_an_attempt_passed_over_while_a_later_one_was_counted_is_counted_later_with_its_own_kind():
    # Attempt 1's exit record was unreadable; attempt 2 ended and was counted first.
    ledger = Ledger().record("job", 2, SPOT, EndingKind.KILLED, 300.0, now=1.0)
    assert ledger.has_counted("job", 2) and not ledger.has_counted("job", 1)
    ledger = Ledger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert not ledger.has_counted("job", 1)
    later = ledger.record("job", 1, SPOT, EndingKind.RECLAIM_SAVED, 100.0, now=2.0)
    estimate = later.book.estimate(SPOT)
    assert (estimate.endings, estimate.saved_reclaims, estimate.exposure_seconds) == (1, 1, 400.0)
    assert (
        later.has_counted("job", 1) and later.record("job", 1, SPOT, EndingKind.KILLED, 9.0, now=3.0) == later
    )
    # Attempts skipped in between are remembered as gaps too, and a ledger written before gaps
    # were kept reads as having none.
    gappy = later.record("job", 5, SPOT, None, 0.0, now=4.0)
    assert [a for a in range(1, 6) if not gappy.has_counted("job", a)] == [3, 4]
    assert Ledger.from_dict({"counted": [{"jobId": "old", "attempt": 3, "at": 1.0}]}).has_counted("old", 2)


def test_an_ending_that_teaches_nothing_is_remembered_but_changes_no_estimate():
    ledger = Ledger().record("job", 1, SPOT, None, 0.0, now=1.0)
    assert ledger.book == Ledger().book
    assert ledger.has_counted("job", 1)


def test_a_configured_prior_seeds_a_new_class_and_is_read_for_an_unseen_one():
    prior = RateEstimate(alpha=0.5, beta=60.0)
    assert estimate_for(Ledger().book, SPOT, prior) == prior
    ledger = Ledger().record("job", 1, SPOT, EndingKind.KILLED, 30.0, now=1.0, prior=prior)
    assert ledger.book.estimate(SPOT) == prior.observe(EndingKind.KILLED, 30.0)
    # Once the class is known, its own estimate wins over any prior.
    assert estimate_for(ledger.book, SPOT, RateEstimate(alpha=9.0, beta=9.0)) == ledger.book.estimate(SPOT)


def test_the_configured_half_life_carried_by_the_prior_applies_to_a_class_already_in_the_book():
    ledger = Ledger().record("job", 1, SPOT, EndingKind.KILLED, 3600.0, now=1.0)
    assert ledger.book.estimate(SPOT).half_life_seconds == 12 * 3600.0  # the default
    slow = replace(prior_for(SPOT), half_life_seconds=10 * 24 * 3600.0)
    read = estimate_for(ledger.book, SPOT, slow)
    assert read.half_life_seconds == slow.half_life_seconds
    assert read.mean_rate == ledger.book.estimate(SPOT).mean_rate
    week = 7 * 24 * 3600.0
    later = ledger.record("job", 2, SPOT, EndingKind.SUCCEEDED, week, now=2.0, prior=slow)
    default = ledger.record("job", 2, SPOT, EndingKind.SUCCEEDED, week, now=2.0)
    # A quiet week: a 10-day half-life keeps more of the reclaim than the default (12 h, or the
    # training in which the class expects 8 endings at its rate: about 3 days here).
    assert later.book.estimate(SPOT).half_life_seconds == slow.half_life_seconds
    assert default.book.estimate(SPOT).recent_endings < 0.5 < 0.6 < later.book.estimate(SPOT).recent_endings


def test_the_ledger_round_trips_through_json():
    ledger = (
        Ledger()
        .record("a", 1, SPOT, EndingKind.KILLED, 10.5, now=1.0)
        .record("b", 3, OTHER, EndingKind.RECLAIM_SAVED, 20.0, now=2.0)
    )
    assert Ledger.from_dict(json.loads(json.dumps(ledger.to_dict()))) == ledger


def test_the_ledger_remembers_a_bounded_number_of_jobs_newest_first():
    ledger = Ledger()
    for i in range(MAX_REMEMBERED_JOBS + 3):
        ledger = ledger.record(f"j{i}", 1, SPOT, None, 0.0, now=float(i))
    assert len(ledger.counted) == MAX_REMEMBERED_JOBS
    assert not ledger.has_counted("j0", 1) and ledger.has_counted(f"j{MAX_REMEMBERED_JOBS + 2}", 1)


def test_checkpoint_cost_is_the_median_of_the_newest_measured_markers():
    cost = checkpoint_cost([(1.0, 4.0, False), (9.0, 30.0, False), (2.0, 5.0, False), (None, None, False)])
    assert (cost.stall_seconds, cost.write_seconds) == (2.0, 5.0)
    assert "commit markers (3)" in cost.source


def test_checkpoint_cost_leaves_out_emergency_saves():
    # Newest first: a SIGTERM's save stalled 0.01 s; the periodic ones 2-3 s.
    cost = checkpoint_cost([(0.01, 0.5, True), (2.0, 5.0, False), (3.0, 6.0, False), (0.02, 0.4, True)])
    assert (cost.stall_seconds, cost.write_seconds) == (2.5, 5.5)
    assert "commit markers (2)" in cost.source
    assert checkpoint_cost([(0.01, 0.5, True)]).source.startswith("default")


def test_with_no_periodic_marker_left_c_is_what_an_earlier_attempt_measured():
    earlier = CheckpointCost(2.0, 5.0, "commit markers of attempt 2")
    assert checkpoint_cost([(0.01, 0.5, True)], earlier) == earlier
    assert checkpoint_cost([(3.0, 6.0, False)], earlier).stall_seconds == 3.0


def test_checkpoint_cost_defaults_before_any_marker_measured_it():
    cost = checkpoint_cost([(None, None, False)])
    assert cost.stall_seconds == DEFAULT_CHECKPOINT_STALL_SECONDS and cost.source.startswith("default")


def test_the_decision_shortens_the_interval_as_work_losing_endings_are_seen():
    prior = RateEstimate(alpha=0.5, beta=600.0)
    cost = checkpoint_cost([(0.5, 1.0, False)])
    first = decide_interval(AUTO, SPOT, prior, cost)
    ledger = Ledger()
    for attempt in range(1, 5):
        ledger = ledger.record("job", attempt, SPOT, EndingKind.KILLED, 30.0, now=attempt, prior=prior)
    later = decide_interval(AUTO, SPOT, ledger.book.estimate(SPOT), cost)
    assert later.seconds < first.seconds
    assert later.endings == 4 and later.rate_per_hour > first.rate_per_hour
    assert later.mode == "auto" and later.capacity == SPOT.key() and "work-losing" in later.explanation
    assert later.rate_sd_per_hour is not None and later.rate_sd_per_hour > 0


def test_the_decision_stays_within_the_requested_bounds_and_a_fixed_interval_is_kept():
    tight = IntervalSetting(auto=True, min_seconds=600.0, max_seconds=900.0)
    choice = decide_interval(tight, SPOT, prior_for(SPOT), checkpoint_cost([(0.01, 0.02, False)]))
    assert choice.seconds == 600.0 and choice.clamped_by == "min"
    fixed = decide_interval(
        IntervalSetting(auto=False, fixed_seconds=42.0), SPOT, prior_for(SPOT), checkpoint_cost([])
    )
    assert (fixed.seconds, fixed.mode) == (42.0, "fixed")


def test_an_interval_setting_is_auto_or_fixed_and_bounded():
    with pytest.raises(ValueError):
        IntervalSetting(auto=True, fixed_seconds=5.0)
    with pytest.raises(ValueError):
        IntervalSetting(auto=True, min_seconds=10.0, max_seconds=5.0)
    assert IntervalSetting(auto=True).to_json() == "auto"
    assert IntervalSetting(auto=False, fixed_seconds=30.0).to_json() == 30.0
