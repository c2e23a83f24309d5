"""The adaptive interval's bookkeeping: what an ending teaches, the idempotent ledger, C from
markers, and the decision for the next attempt. Pure: no I/O."""

from __future__ import annotations

import json

import pytest

from controller.core.adaptive_interval import (
    DEFAULT_CHECKPOINT_STALL_SECONDS,
    MAX_REMEMBERED_JOBS,
    EndingFacts,
    IntervalSetting,
    Ledger,
    checkpoint_cost,
    decide_interval,
    ending_kind,
    estimate_for,
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
