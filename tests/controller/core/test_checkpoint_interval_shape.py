"""The checkpoint interval beyond a constant hazard: kept lifetimes, their replay, old books."""

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.checkpoint_interval import (
    HOUR,
    LIFETIMES_KEPT,
    SPOT_PRIOR,
    CapacityClass,
    EndingKind,
    RateBook,
    RateEstimate,
    best_interval,
    choose_interval_detail,
    explain,
    replay_rate,
)

SPOT_H100 = CapacityClass("us-central1", "a3-highgpu-8g", "NVIDIA_H100_80GB", "SPOT")
LOST = EndingKind.RECLAIM_UNSAVED


# The shape of the lifetimes is under test here, not a change of rate: evidence is not forgotten.
STEADY = replace(SPOT_PRIOR, half_life_seconds=math.inf)


def observed(lifetimes, kind=LOST):
    estimate = STEADY
    for seconds in lifetimes:
        estimate = estimate.observe(kind, seconds)
    return estimate


def quantiles(inverse_cdf, n=LIFETIMES_KEPT):
    """n lifetimes spread evenly over a distribution: a sample without sampling noise."""
    return [inverse_cdf((i + 0.5) / n) for i in range(n)]


def weibull(shape, mean):
    scale = mean / math.gamma(1.0 + 1.0 / shape)
    return lambda p: scale * (-math.log1p(-p)) ** (1.0 / shape)


# --- what the estimate keeps ----------------------------------------------------------------------


def test_observe_keeps_each_attempts_lifetime_and_kind_but_not_endings_before_training():
    estimate = (
        SPOT_PRIOR.observe(EndingKind.KILLED, 1000.0)
        .observe(EndingKind.BEFORE_TRAINING, 0.0)
        .observe(EndingKind.RECLAIM_SAVED, 2500.0)
        .observe(EndingKind.SUCCEEDED, 40.0)
    )
    assert estimate.lifetimes == (
        (1000.0, EndingKind.KILLED),
        (2500.0, EndingKind.RECLAIM_SAVED),
        (40.0, EndingKind.SUCCEEDED),
    )
    # The rates go on as before.
    assert (estimate.endings, estimate.saved_reclaims, estimate.exposure_seconds) == (1, 1, 3540.0)


def test_only_the_most_recent_lifetimes_are_kept():
    estimate = observed([float(i) for i in range(1, LIFETIMES_KEPT + 11)])
    assert len(estimate.lifetimes) == LIFETIMES_KEPT
    assert estimate.lifetimes[0][0] == 11.0 and estimate.lifetimes[-1][0] == LIFETIMES_KEPT + 10.0
    # ...while the rate still counts every ending ever seen.
    assert estimate.endings == LIFETIMES_KEPT + 10


def test_a_book_written_before_lifetimes_were_kept_loads_and_chooses_as_it_did():
    old = {
        "classes": [
            {
                "capacity": SPOT_H100.to_dict(),
                "estimate": {
                    "alpha": 6.5,
                    "beta": 43200.0 + 18000.0,
                    "endings": 6,
                    "exposure_seconds": 18000.0,
                    "saved_reclaims": 2,
                },
            }
        ]
    }
    estimate = RateBook.from_dict(old).estimate(SPOT_H100)
    assert estimate.lifetimes == ()
    assert (estimate.alpha, estimate.endings, estimate.saved_reclaims) == (6.5, 6, 2)
    # Without lifetimes the choice is the constant-hazard one, exactly: it optimises the model alone.
    chosen = best_interval(estimate, 120.0, restart_cost=300.0, write_seconds=240.0)
    rates_only = RateEstimate(alpha=6.5, beta=61200.0, endings=6, exposure_seconds=18000.0, saved_reclaims=2)
    assert chosen == best_interval(rates_only, 120.0, restart_cost=300.0, write_seconds=240.0)


def test_lifetimes_round_trip_through_json_and_unknown_kinds_are_skipped():
    book = (
        RateBook()
        .observe(SPOT_H100, EndingKind.NODE_LOST, 1234.5)
        .observe(SPOT_H100, EndingKind.RECLAIM_SAVED, 99.0)
    )
    data = json.loads(json.dumps(book.to_dict()))
    assert RateBook.from_dict(data) == book
    data["classes"][0]["estimate"]["lifetimes"].append([5.0, "a_kind_from_a_newer_version"])
    assert RateBook.from_dict(data) == book


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_impossible_lifetimes_are_rejected(bad):
    with pytest.raises(ValueError):
        RateEstimate(alpha=1.0, beta=HOUR, lifetimes=((bad, LOST),))


# --- the replay -----------------------------------------------------------------------------------


def test_replay_keeps_the_committed_checkpoints_of_a_lost_attempt_and_all_but_the_stalls_of_a_saved_one():
    # Cycle 10 000 s (9 000 s of work + a 1 000 s stall). The lost attempt ran 14 000 s: the first
    # checkpoint had committed, whichever lifetime within 25 % of it we take (10 500 .. 17 500 s).
    lost = replay_rate(9000.0, 1000.0, ((14000.0, EndingKind.KILLED),), restart_cost=500.0)
    assert lost == pytest.approx(9000.0 / 14500.0)
    # The saved attempt ran 25 000 s: two stalls, everything else is work.
    saved = replay_rate(9000.0, 1000.0, ((25000.0, EndingKind.RECLAIM_SAVED),), restart_cost=500.0)
    assert saved == pytest.approx(23000.0 / 25500.0)
    # A checkpoint commits W after its stall: with W = 8 000 s none had committed by 14 000 s.
    assert replay_rate(9000.0, 1000.0, ((9000.0, EndingKind.KILLED),), write_seconds=8000.0) == 0.0


@pytest.mark.parametrize(
    "lifetime",
    [
        5_000.0,  # the whole spread (3 750 .. 6 250 s, less W) ends before the first commit
        11_000.0,  # the spread's top just past the first commit
        14_000.0,  # the spread straddles the first commit
        26_500.0,  # straddles the second
        95_000.0,  # spans several cycles
    ],
)
def test_a_lost_attempt_keeps_the_checkpoints_committed_on_average_over_its_spread(lifetime):
    # Cycle 10 000 s, W = 2 000 s: a checkpoint counts once W has passed after its stall, i.e. one
    # per full cycle of (t - W). The replay spreads the lifetime uniformly over +-25 %; here the
    # same average is taken by brute force on a fine grid.
    tau, cost, write = 9000.0, 1000.0, 2000.0
    low, high = 0.75 * lifetime, 1.25 * lifetime
    steps = 100_000
    committed = [
        max(math.floor((low + (high - low) * (i + 0.5) / steps - write) / (tau + cost)), 0)
        for i in range(steps)
    ]
    expected = tau * sum(committed) / steps / lifetime
    got = replay_rate(tau, cost, ((lifetime, EndingKind.KILLED),), write_seconds=write)
    assert got == pytest.approx(expected, rel=1e-3, abs=1e-6)


def test_replay_of_exponential_lifetimes_agrees_with_the_constant_hazard_model():
    mtbf, cost = 2 * HOUR, 60.0
    estimate = observed(quantiles(lambda p: -mtbf * math.log1p(-p)))
    rates_only = replace(estimate, lifetimes=())
    assert best_interval(estimate, cost) == pytest.approx(best_interval(rates_only, cost), rel=0.15)


def test_a_rising_hazard_shortens_the_interval():
    # Weibull shape 2: the longer an attempt has run, the likelier it ends, so an interval that
    # reaches far into an attempt is likelier to be lost than a constant hazard says. This shows
    # where the interval is not small next to the mean lifetime (C = 15 min, 1 h on average: the
    # constant-hazard optimum is about 35 min); far below, where a failure lands uniformly within
    # an interval whatever the shape, the two choices meet.
    estimate = observed(quantiles(weibull(2.0, HOUR)))
    assert best_interval(estimate, 900.0) < 0.9 * best_interval(replace(estimate, lifetimes=()), 900.0)


def test_bursts_of_short_attempts_lengthen_the_interval():
    # Half the attempts die within minutes (a zone-wide burst), the others run ~19 times longer:
    # the rate of endings is high, but nearly all training happens in the long attempts, where
    # endings are rare, and the short ones lose almost nothing whatever the interval.
    short = quantiles(lambda p: -0.2 * HOUR * math.log1p(-p), LIFETIMES_KEPT // 2)
    long = quantiles(lambda p: -3.8 * HOUR * math.log1p(-p), LIFETIMES_KEPT // 2)
    interleaved = [x for pair in zip(short, long, strict=True) for x in pair]
    estimate = observed(interleaved)
    assert best_interval(estimate, 120.0) > 1.15 * best_interval(replace(estimate, lifetimes=()), 120.0)


def test_the_shape_is_recovered_from_lifetimes_alone():
    # The same mean lifetime, three shapes: the choice orders them as the hazards say.
    rising = observed(quantiles(weibull(1.5, HOUR)))
    constant = observed(quantiles(weibull(1.0, HOUR)))
    falling = observed(quantiles(weibull(0.7, HOUR)))
    taus = [best_interval(e, 60.0, write_seconds=120.0) for e in (rising, constant, falling)]
    assert taus[0] < taus[1] < taus[2]


def test_the_choice_replays_lifetimes_but_keeps_the_bounds_and_the_write_time_floor():
    estimate = observed(quantiles(weibull(2.0, HOUR)))
    floored = choose_interval_detail(estimate, 60.0, 1.0, 48 * HOUR, write_seconds=3000.0)
    assert (floored.seconds, floored.clamped_by) == (3000.0, "write_time")
    capped = choose_interval_detail(estimate, 60.0, 1.0, 300.0)
    assert (capped.seconds, capped.clamped_by) == (300.0, "max")


def test_explanation_says_the_lifetimes_shaped_the_choice():
    estimate = observed([HOUR, 2 * HOUR, 0.5 * HOUR])
    text = explain(estimate, 60.0, choose_interval_detail(estimate, 60.0, 60.0, 24 * HOUR))
    assert "shaped by the last 3 attempt lifetime(s)" in text
    assert "shaped" not in explain(
        SPOT_PRIOR, 60.0, choose_interval_detail(SPOT_PRIOR, 60.0, 60.0, 24 * HOUR)
    )


@settings(max_examples=40, deadline=None)
@given(
    lifetimes=st.lists(
        st.tuples(st.floats(0.0, 1e7), st.sampled_from(list(EndingKind))), min_size=1, max_size=40
    ),
    cost=st.floats(0.5, 7200.0),
    low=st.floats(1.0, 7200.0),
    span=st.floats(1.0, 1000.0),
    restart=st.floats(0.0, 3600.0),
    write=st.floats(0.0, 3600.0),
)
def test_with_any_lifetimes_the_choice_is_finite_and_within_the_bounds(
    lifetimes, cost, low, span, restart, write
):
    estimate = SPOT_PRIOR
    for seconds, kind in lifetimes:
        estimate = estimate.observe(kind, seconds)
    choice = choose_interval_detail(
        estimate, cost, low, low * span, restart_cost=restart, write_seconds=write
    )
    assert math.isfinite(choice.seconds) and low <= choice.seconds <= low * span
    assert math.isfinite(choice.unclamped_seconds) and choice.unclamped_seconds > 0.0


def test_saved_attempts_alone_leave_the_interval_to_the_rates():
    # Twenty reclaims whose emergency saves committed and no work-losing ending: they show how long
    # attempts last, but nothing of where in an attempt work is lost, so their replay (which only
    # sees stalls, and favours ever longer intervals) does not move the choice.
    estimate = observed(
        [-2 * HOUR * math.log1p(-(i + 0.5) / 20) for i in range(20)], EndingKind.RECLAIM_SAVED
    )
    rates_only = replace(estimate, lifetimes=())
    assert best_interval(estimate, 60.0, restart_cost=300.0, write_seconds=120.0) == pytest.approx(
        best_interval(rates_only, 60.0, restart_cost=300.0, write_seconds=120.0), rel=0.02
    )
