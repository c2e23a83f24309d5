"""The checkpoint interval where attempts end at different rates (bursts of short attempts, long calm ones)."""

import math
from dataclasses import replace

import pytest

from controller.core.checkpoint_interval import (
    HOUR,
    SPOT_PRIOR,
    EndingKind,
    RateEstimate,
    _mixture_work_rate,
    _rate_multipliers,
    best_interval,
    lifetime_dispersion,
    work_rate,
)

LOST = EndingKind.RECLAIM_UNSAVED


# The shape of the lifetimes is under test here, not a change of rate: evidence is not forgotten.
STEADY = replace(SPOT_PRIOR, half_life_seconds=math.inf)


def observed(hours):
    estimate = STEADY
    for h in hours:
        estimate = estimate.observe(LOST, h * HOUR)
    return estimate


def exponential_quantiles(mean, n):
    return [-mean * math.log1p(-(i + 0.5) / n) for i in range(n)]


def test_dispersion_is_one_for_exponential_or_regular_lifetimes_and_large_for_bursts():
    exponential = [(s, LOST) for s in exponential_quantiles(HOUR, 200)]
    assert lifetime_dispersion(exponential) == pytest.approx(1.0, abs=0.15)
    assert lifetime_dispersion(((HOUR, LOST),) * 10) == 1.0  # never below 1
    assert lifetime_dispersion(((HOUR, LOST),)) == 1.0  # one lifetime says nothing of spread
    bursts = [
        (s, LOST) for s in exponential_quantiles(0.1 * HOUR, 50) + exponential_quantiles(1.9 * HOUR, 50)
    ]
    assert lifetime_dispersion(bursts) > 2.0


def test_lifetimes_more_variable_than_exponential_widen_the_spread_of_rates_across_attempts():
    # Same endings, same exposure: only how the training time is shared between attempts differs.
    even = observed([2.0, 2.0, 2.0, 2.0])
    bursty = observed([0.2, 0.2, 0.2, 7.4])
    assert even.mean_rate == bursty.mean_rate
    even_m, bursty_m = _rate_multipliers(even, 5), _rate_multipliers(bursty, 5)
    assert even_m is not None and bursty_m is not None
    assert min(bursty_m) < min(even_m) and max(bursty_m) > max(even_m)
    assert sum(even_m) / len(even_m) == pytest.approx(1.0, abs=0.05)


def test_no_spread_is_used_before_a_work_losing_ending_or_for_the_plug_in_choice():
    assert _rate_multipliers(SPOT_PRIOR, 5) is None
    assert _rate_multipliers(SPOT_PRIOR.observe(EndingKind.RECLAIM_SAVED, HOUR), 5) is None
    assert _rate_multipliers(observed([1.0, 2.0]), 1) is None


def test_one_rate_for_every_attempt_is_the_constant_hazard_model():
    args = (1800.0, 900.0, 1 / (5 * HOUR), 1 / (20 * HOUR))
    mixed = _mixture_work_rate(*args, [1.0], 300.0, 1800.0)
    assert mixed == pytest.approx(work_rate(*args, restart_cost=300.0, write_seconds=1800.0))


def test_where_attempts_differ_the_long_ones_set_a_longer_interval():
    # Attempts end at a quarter or at four times the mean rate, equally often: the slow ones hold
    # about 94 % of the time, so the best interval is far closer to theirs than the single-rate one.
    lost_rate, cost = 1 / (6 * HOUR), 900.0
    taus = [HOUR * 2 ** (k / 8) for k in range(-16, 33)]

    def best(rate_of):
        return max(taus, key=rate_of)

    single = best(lambda tau: work_rate(tau, cost, lost_rate, 0.0))
    mixed = best(lambda tau: _mixture_work_rate(tau, cost, lost_rate, 0.0, [0.25, 4.0], 0.0, 0.0))
    slow_only = best(lambda tau: work_rate(tau, cost, lost_rate / 4, 0.0))
    assert single < mixed <= slow_only
    assert mixed > 1.5 * single


def test_a_book_whose_counts_exceed_its_posterior_falls_back_to_one_rate():
    # Three endings on top of a posterior that holds half of one: only a hand-edited book says so.
    lifetimes = ((0.1 * HOUR, LOST), (10 * HOUR, LOST))
    odd = RateEstimate(alpha=0.5, beta=HOUR, endings=3, exposure_seconds=10 * HOUR, lifetimes=lifetimes)
    assert _rate_multipliers(odd, 5) is None
    assert 0.0 < best_interval(odd, 60.0) < math.inf


def test_lifetimes_as_regular_as_exponential_ones_are_one_rate_once_there_are_enough_endings():
    # Twenty endings no more variable than exponential ones: what is not known about the rate is
    # doubt, not attempts that differ, so no spread across attempts lengthens the interval.
    regular = observed(exponential_quantiles(1.0, 20))
    assert _rate_multipliers(regular, 5) is None
    # The constant-hazard choice then: the blend's model part is the rates' posterior alone.
    tau = best_interval(regular, 900.0, restart_cost=300.0, write_seconds=1800.0)
    single = best_interval(replace(regular, lifetimes=()), 900.0, restart_cost=300.0, write_seconds=1800.0)
    assert tau <= single
    # Three endings say little: the posterior's spread still hedges.
    few = observed(exponential_quantiles(10.0, 3))
    assert _rate_multipliers(few, 5) is not None


def test_lifetimes_barely_more_variable_than_exponential_get_a_spread_no_wider_than_that():
    # Squared coefficient of variation just above 1: rates Gamma-distributed across attempts with
    # shape a give a / (a - 2), so the spread they imply is narrow, narrower than the posterior's.
    hours = exponential_quantiles(1.0, 19) + [4.5]
    estimate = observed(hours)
    dispersion = lifetime_dispersion(estimate.lifetimes)
    assert 1.0 < dispersion < 1.2
    multipliers = _rate_multipliers(estimate, 5)
    assert multipliers is not None
    mean = sum(multipliers) / len(multipliers)
    spread = sum((m / mean - 1.0) ** 2 for m in multipliers) / len(multipliers)
    implied = (dispersion - 1.0) / (2.0 * dispersion)
    assert spread <= 1.1 * implied
    # The posterior widened by the dispersion (what was used before) is wider.
    assert spread < 0.9 * dispersion / estimate.alpha
