"""The checkpoint-interval core: closed forms, the rate estimate, the choice and its explanation."""

import json
import math
import random
from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from controller.core import checkpoint_interval
from controller.core.checkpoint_interval import (
    DEFAULT_HALF_LIFE_SECONDS,
    HOUR,
    MAX_HALF_LIFE_SECONDS,
    MEMORY_ENDINGS,
    NON_PREEMPTIBLE_PRIOR,
    PRIOR_FLOOR_ALPHA,
    SPOT_PRIOR,
    CapacityClass,
    EndingKind,
    RateBook,
    RateEstimate,
    best_interval,
    choose_interval,
    choose_interval_detail,
    daly_interval,
    explain,
    loses_work,
    memory_seconds,
    prior_for,
    retimed,
    work_rate,
    young_interval,
)

SPOT_H100 = CapacityClass("us-central1", "a3-highgpu-8g", "NVIDIA_H100_80GB", "SPOT")
STANDARD_H100 = CapacityClass("us-central1", "a3-highgpu-8g", "NVIDIA_H100_80GB", "STANDARD")


def known_rate(mtbf: float) -> RateEstimate:
    """A posterior so narrow that it is, in effect, the rate 1/mtbf known exactly."""
    return RateEstimate(alpha=1e9, beta=1e9 * mtbf)


# --- closed forms ---------------------------------------------------------------------------------


def test_young_is_sqrt_of_twice_cost_times_mtbf():
    # 2 * 300 s * 86400 s = 51 840 000 = 7200^2
    assert young_interval(300.0, 86400.0) == pytest.approx(7200.0)
    assert young_interval(8.0, 1.0) == pytest.approx(4.0)


def test_daly_matches_its_published_expansion_and_approaches_young_when_cost_is_small():
    c, m = 600.0, 3600.0  # C / 2M = 1/12
    r = c / (2 * m)
    expected = math.sqrt(2 * c * m) * (1 + math.sqrt(r) / 3 + r / 9) - c
    assert daly_interval(c, m) == pytest.approx(expected)
    assert daly_interval(1.0, 1e6) == pytest.approx(young_interval(1.0, 1e6), rel=2e-3)


@pytest.mark.parametrize(("mtbf_hours", "minutes"), [(24.0, 117.0), (6.0, 57.0), (0.25, 9.1)])
def test_daly_reproduces_the_optima_printed_in_his_paper(mtbf_hours, minutes):
    # Daly (2006), figures 3-5: dump time 5 min, M = 24 h, 6 h and 15 min.
    assert daly_interval(300.0, mtbf_hours * HOUR) / 60.0 == pytest.approx(
        minutes, abs=0.5 if minutes > 10 else 0.05
    )


def test_daly_is_the_mtbf_once_the_cost_reaches_twice_the_mtbf():
    assert daly_interval(7200.0, 3600.0) == 3600.0
    assert daly_interval(10_000.0, 3600.0) == 3600.0


@pytest.mark.parametrize(
    ("cost", "mtbf"), [(10.0, 3600.0), (60.0, 3600.0), (600.0, 3600.0), (600.0, 36000.0)]
)
def test_daly_is_within_a_percent_of_the_exact_renewal_optimum_when_nothing_is_saved(cost, mtbf):
    assert best_interval(known_rate(mtbf), cost) == pytest.approx(daly_interval(cost, mtbf), rel=0.01)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_closed_forms_reject_non_positive_or_infinite_inputs(bad):
    with pytest.raises(ValueError):
        young_interval(bad, 3600.0)
    with pytest.raises(ValueError):
        daly_interval(60.0, bad)


# --- what loses work ------------------------------------------------------------------------------


def test_only_endings_without_a_committed_save_lose_work():
    losing = {kind for kind in EndingKind if loses_work(kind)}
    assert losing == {
        EndingKind.RECLAIM_UNSAVED,
        EndingKind.KILLED,
        EndingKind.CRASHED,
        EndingKind.NODE_LOST,
    }


# --- the estimate ---------------------------------------------------------------------------------


def test_conjugate_update_adds_endings_to_shape_and_exposure_to_rate():
    prior = RateEstimate(alpha=1.0, beta=4 * HOUR, half_life_seconds=math.inf)  # without forgetting
    post = prior.update(3, 10 * HOUR, saved_reclaims=5)
    assert (post.alpha, post.beta) == (4.0, 14 * HOUR)
    assert (post.endings, post.exposure_seconds, post.saved_reclaims) == (3, 10 * HOUR, 5)
    assert post.mean_rate == pytest.approx(4 / (14 * HOUR))
    assert post.mtbf == pytest.approx(3.5 * HOUR)
    assert post.saved_rate == pytest.approx(5 / (14 * HOUR))


def test_observe_counts_each_kind_of_ending_where_it_belongs():
    prior = replace(SPOT_PRIOR, half_life_seconds=math.inf)  # the counting, without forgetting
    killed = prior.observe(EndingKind.KILLED, 1000.0)
    assert (killed.alpha, killed.beta, killed.saved_reclaims) == (prior.alpha + 1, prior.beta + 1000.0, 0)
    saved = prior.observe(EndingKind.RECLAIM_SAVED, 1000.0)
    assert (saved.alpha, saved.beta, saved.saved_reclaims) == (prior.alpha, prior.beta + 1000.0, 1)
    succeeded = prior.observe(EndingKind.SUCCEEDED, 1000.0)
    assert (succeeded.alpha, succeeded.beta, succeeded.saved_reclaims) == (
        prior.alpha,
        prior.beta + 1000.0,
        0,
    )
    before = prior.observe(EndingKind.BEFORE_TRAINING, 0.0)
    assert (before.alpha, before.beta, before.saved_reclaims) == (prior.alpha, prior.beta, 0)


@pytest.mark.parametrize(("endings", "exposure"), [(-1, 10.0), (0, -1.0), (0, math.inf), (0, math.nan)])
def test_update_rejects_impossible_observations(endings, exposure):
    with pytest.raises(ValueError):
        SPOT_PRIOR.update(endings, exposure)


def test_unobserved_classes_read_as_their_prior_and_spot_is_the_pessimistic_one():
    book = RateBook()
    assert book.estimate(SPOT_H100) == SPOT_PRIOR == prior_for(SPOT_H100)
    assert book.estimate(STANDARD_H100) == NON_PREEMPTIBLE_PRIOR
    assert SPOT_PRIOR.mtbf < NON_PREEMPTIBLE_PRIOR.mtbf
    spot = choose_interval(book.estimate(SPOT_H100), 60.0, 60.0, 48 * HOUR)
    standard = choose_interval(book.estimate(STANDARD_H100), 60.0, 60.0, 48 * HOUR)
    assert spot < standard


def test_rate_book_keeps_classes_apart():
    book = RateBook().observe(SPOT_H100, EndingKind.KILLED, HOUR)
    other = CapacityClass("europe-west4", "a3-highgpu-8g", "NVIDIA_H100_80GB", "SPOT")
    assert book.estimate(SPOT_H100).endings == 1
    assert book.estimate(other) == SPOT_PRIOR
    book = book.observe(SPOT_H100, EndingKind.RECLAIM_SAVED, HOUR)
    assert len(book.estimates) == 1
    assert book.estimate(SPOT_H100).saved_reclaims == 1
    assert book.estimate(SPOT_H100).exposure_seconds == 2 * HOUR


def test_rate_book_round_trips_through_json():
    book = (
        RateBook()
        .observe(SPOT_H100, EndingKind.KILLED, 5000.0)
        .observe(SPOT_H100, EndingKind.RECLAIM_SAVED, 7000.5)
        .observe(STANDARD_H100, EndingKind.SUCCEEDED, 86400.0)
    )
    assert RateBook.from_dict(json.loads(json.dumps(book.to_dict()))) == book
    assert CapacityClass.from_dict(SPOT_H100.to_dict()) == SPOT_H100
    assert SPOT_H100.key() == "us-central1/a3-highgpu-8g/NVIDIA_H100_80GB/SPOT"


@given(
    alpha=st.floats(0.1, 1e4),
    beta=st.floats(1.0, 1e9),
    endings=st.integers(0, 10_000),
    exposure=st.floats(0.0, 1e9),
    saved=st.integers(0, 10_000),
)
def test_estimate_round_trips_through_json(alpha, beta, endings, exposure, saved):
    estimate = RateEstimate(alpha, beta, endings, exposure, saved)
    assert RateEstimate.from_dict(json.loads(json.dumps(estimate.to_dict()))) == estimate


# --- the model and the choice ---------------------------------------------------------------------


def test_work_rate_without_endings_is_the_share_of_time_not_stalled():
    assert work_rate(3600.0, 60.0, 0.0, 0.0) == pytest.approx(3600.0 / 3660.0)


def test_work_rate_falls_below_the_no_failure_share_when_work_is_lost():
    assert work_rate(3600.0, 60.0, 1 / 7200.0, 0.0) < 3600.0 / 3660.0


def test_with_only_saved_reclaims_checkpointing_never_pays():
    # Every ending saves its work: the longer the interval, the fewer stalls, the more work.
    rates = [work_rate(tau, 60.0, 0.0, 1 / 3600.0, restart_cost=300.0) for tau in (600.0, 3600.0, 36000.0)]
    assert rates == sorted(rates)
    # A million hours of training, a million saved reclaims, no work-losing ending at all.
    only_saved = RateEstimate(alpha=1.0, beta=1e6 * HOUR, saved_reclaims=1_000_000)
    assert choose_interval(only_saved, 60.0, 60.0, 12 * HOUR) == 12 * HOUR


def test_saved_reclaims_lengthen_the_interval():
    lossy = known_rate(10 * HOUR)
    with_saves = RateEstimate(alpha=lossy.alpha, beta=lossy.beta, saved_reclaims=int(9e9))  # mu = 9 lambda
    plain = best_interval(lossy, 300.0)
    assert best_interval(with_saves, 300.0) > 1.1 * plain


def test_with_many_observations_the_choice_converges_to_daly_for_the_true_rate():
    # Many observations narrow the posterior only where nothing is forgotten (a forgetting estimate
    # rests on its window: about 1.44 half-lives of exposure, a dozen endings here).
    true_mtbf = 3 * HOUR
    estimate = replace(SPOT_PRIOR, half_life_seconds=math.inf).update(2000, 2000 * true_mtbf)
    assert choose_interval(estimate, 120.0, 1.0, 48 * HOUR) == pytest.approx(
        daly_interval(120.0, true_mtbf), rel=0.02
    )


def test_zero_observations_choose_from_the_prior():
    choice = choose_interval_detail(SPOT_PRIOR, 60.0, 60.0, 24 * HOUR)
    assert choice.clamped_by is None
    # Near Daly for the prior's mean MTBF, leaning a little to whatever stays good if the rate is
    # higher or lower than the prior's mean.
    assert choice.seconds == pytest.approx(daly_interval(60.0, SPOT_PRIOR.mtbf), rel=0.1)


def test_clamped_to_the_configured_bounds_and_floored_by_the_write_time():
    estimate = SPOT_PRIOR.update(50, 50 * HOUR)  # MTBF about an hour: unclamped ~ 10 min at C = 60 s
    free = choose_interval_detail(estimate, 60.0, 1.0, 48 * HOUR)
    assert free.clamped_by is None and 300.0 < free.seconds < 1200.0
    raised = choose_interval_detail(estimate, 60.0, 1800.0, 48 * HOUR)
    assert (raised.seconds, raised.clamped_by) == (1800.0, "min")
    lowered = choose_interval_detail(estimate, 60.0, 1.0, 120.0)
    assert (lowered.seconds, lowered.clamped_by) == (120.0, "max")
    floored = choose_interval_detail(estimate, 60.0, 1.0, 48 * HOUR, write_seconds=1500.0)
    assert (floored.seconds, floored.clamped_by) == (1500.0, "write_time")
    assert free.unclamped_seconds == raised.unclamped_seconds == lowered.unclamped_seconds


@pytest.mark.parametrize(("low", "high"), [(0.0, 10.0), (-5.0, 10.0), (100.0, 10.0)])
def test_bounds_must_make_sense(low, high):
    with pytest.raises(ValueError):
        choose_interval(SPOT_PRIOR, 60.0, low, high)


@given(
    failures=st.integers(0, 200),
    more=st.integers(1, 50),
    exposure_hours=st.floats(1.0, 2000.0),
    saved_per_hour=st.floats(0.0, 1.0),
    cost=st.floats(1.0, 1800.0),
)
def test_more_work_losing_endings_never_lengthen_the_interval(
    failures, more, exposure_hours, saved_per_hour, cost
):
    # At most one saved reclaim per hour of training: with far more, attempts end long before any
    # interval does, every interval is as good as any other, and the optimum is not well defined.
    saved = int(saved_per_hour * exposure_hours)
    seen = SPOT_PRIOR.update(failures, exposure_hours * HOUR, saved_reclaims=saved)
    worse = SPOT_PRIOR.update(failures + more, exposure_hours * HOUR, saved_reclaims=saved)
    # Where a checkpoint costs less than the time between failures; beyond, the optimum hardly
    # depends on anything (see the test on C >= 2M) and the search's tolerance decides.
    assume(cost < worse.mtbf)
    seen_tau = best_interval(seen, cost)
    # Where the interval matters: shorter than an attempt lasts on average. Far beyond, attempts
    # end before the interval does, all long intervals are as good, and the optimum is flat.
    assume(seen_tau < 1.0 / (worse.mean_rate + worse.saved_rate))
    # The search stops within 0.2 % of the optimum, hence the tolerance.
    assert best_interval(worse, cost) <= seen_tau * (1 + 5e-3)


@given(
    failures=st.integers(0, 200),
    exposure_hours=st.floats(1.0, 2000.0),
    cost=st.floats(1.0, 900.0),
    factor=st.floats(1.5, 4.0),
)
def test_a_costlier_checkpoint_is_taken_less_often(failures, exposure_hours, cost, factor):
    estimate = SPOT_PRIOR.update(failures, exposure_hours * HOUR)
    # Where checkpoints cost less than the mean time between failures. Beyond, the exact optimum
    # stops depending on C (Daly: tau = M once C >= 2M): see the next test.
    assume(cost * factor < estimate.mtbf)
    assert best_interval(estimate, cost * factor) > best_interval(estimate, cost)


def test_once_a_checkpoint_costs_more_than_two_mtbfs_the_interval_is_about_the_mtbf_whatever_it_costs():
    mtbf = 600.0
    intervals = [best_interval(known_rate(mtbf), cost) for cost in (1500.0, 3000.0, 6000.0)]
    for tau in intervals:
        assert tau == pytest.approx(daly_interval(3000.0, mtbf), rel=0.05)
    assert max(intervals) < 1.05 * min(intervals)


@given(
    alpha=st.floats(0.5, 1e5),
    mtbf_hours=st.floats(0.01, 1e4),
    saved=st.integers(0, 10_000),
    cost=st.floats(0.5, 7200.0),
    low=st.floats(1.0, 7200.0),
    span=st.floats(1.0, 1000.0),
    restart=st.floats(0.0, 3600.0),
    write=st.floats(0.0, 3600.0),
)
def test_the_choice_is_always_finite_and_within_the_bounds(
    alpha, mtbf_hours, saved, cost, low, span, restart, write
):
    estimate = RateEstimate(alpha=alpha, beta=alpha * mtbf_hours * HOUR, saved_reclaims=saved)
    seconds = choose_interval(estimate, cost, low, low * span, restart_cost=restart, write_seconds=write)
    assert math.isfinite(seconds) and low <= seconds <= low * span


# --- the explanation ------------------------------------------------------------------------------


def test_explanation_names_the_estimate_its_basis_the_cost_and_the_interval():
    estimate = SPOT_PRIOR.update(3, 12 * HOUR, saved_reclaims=4)
    choice = choose_interval_detail(estimate, 45.0, 60.0, 24 * HOUR)
    text = explain(estimate, 45.0, choice)
    assert f"MTBF {estimate.mtbf / HOUR:.1f} h" in text
    # The rates rest on the evidence as it weighs now, and the explanation says so.
    weighted = (
        f"{estimate.recent_endings:.3g} work-losing ending(s) and {estimate.recent_saved:.3g} saved "
        f"reclaim(s) in {estimate.recent_exposure / HOUR:.1f} h of training, weighted over the last ~12.0 h "
        f"(half-life {estimate.memory_half_life / HOUR:.1f} h: {MEMORY_ENDINGS:g} endings at this rate, at "
        "least 12.0 h; 3 work-losing ending(s) and 4 saved reclaim(s) in 12.0 h of training in all)"
    )
    assert weighted in text and estimate.recent_endings < 3
    assert "C 45 s" in text
    assert f"interval {choice.seconds / 60:.1f} min" in text
    assert "prior only" in explain(
        SPOT_PRIOR, 45.0, choose_interval_detail(SPOT_PRIOR, 45.0, 60.0, 24 * HOUR)
    )
    clamped = choose_interval_detail(estimate, 45.0, 3 * HOUR, 24 * HOUR)
    assert "configured minimum" in explain(estimate, 45.0, clamped)


def test_explanation_of_a_long_history_names_the_window_the_weights_cover_not_all_of_it():
    estimate = SPOT_PRIOR
    for _ in range(200):  # 200 h of training, an unsaved reclaim every hour
        estimate = estimate.observe(EndingKind.RECLAIM_UNSAVED, 1 * HOUR)
    text = explain(estimate, 45.0, choose_interval_detail(estimate, 45.0, 60.0, 24 * HOUR))
    # A busy class forgets at the configured 12 h: 12 h / ln 2 is the weighted exposure's
    # ceiling, not the 200 h seen in all.
    assert "weighted over the last ~17.3 h (half-life 12.0 h:" in text
    assert "200 work-losing ending(s) and 0 saved reclaim(s) in 200.0 h of training in all" in text
    assert f"in {estimate.recent_exposure / HOUR:.1f} h of training, weighted" in text
    assert estimate.recent_exposure < 17.4 * HOUR


def test_a_calm_class_keeps_several_endings_of_evidence_and_a_busy_one_forgets_in_hours():
    draw = random.Random(20261128)
    calm, busy = SPOT_PRIOR, SPOT_PRIOR
    for _ in range(30):  # one work-losing ending per 20 h of training; one per hour
        calm = calm.observe(EndingKind.RECLAIM_UNSAVED, draw.expovariate(1 / (20 * HOUR)))
        busy = busy.observe(EndingKind.RECLAIM_UNSAVED, draw.expovariate(1 / HOUR))
    # 12 h of memory would hold about one of the calm class's endings; it keeps several.
    assert calm.recent_endings > MEMORY_ENDINGS / 2
    assert calm.memory_half_life > 4 * DEFAULT_HALF_LIFE_SECONDS
    assert busy.memory_half_life < 1.5 * DEFAULT_HALF_LIFE_SECONDS
    assert busy.recent_exposure < memory_seconds(DEFAULT_HALF_LIFE_SECONDS)
    # ... and the explanation says over what stretch of training.
    text = explain(calm, 45.0, choose_interval_detail(calm, 45.0, 60.0, 24 * HOUR))
    assert f"half-life {calm.memory_half_life / HOUR:.1f} h: {MEMORY_ENDINGS:g} endings at this rate" in text


def test_a_class_that_never_sees_an_ending_still_forgets_within_the_longest_half_life():
    quiet = SPOT_PRIOR.observe(EndingKind.RECLAIM_UNSAVED, HOUR)
    for _ in range(40):
        quiet = quiet.observe(EndingKind.SUCCEEDED, 100 * HOUR)
    assert quiet.memory_half_life == MAX_HALF_LIFE_SECONDS
    assert quiet.recent_endings < 0.05  # that reclaim, 4,000 h of training ago
    assert quiet.recent_exposure < memory_seconds(MAX_HALF_LIFE_SECONDS)


def test_explanation_of_an_estimate_that_never_forgets_gives_the_raw_counts():
    never = replace(SPOT_PRIOR, half_life_seconds=math.inf).update(3, 12 * HOUR, saved_reclaims=4)
    text = explain(never, 45.0, choose_interval_detail(never, 45.0, 60.0, 24 * HOUR))
    assert "3 work-losing ending(s) and 4 saved reclaim(s) in 12.0 h of training + prior" in text
    assert "weighted" not in text


def test_retimed_keeps_what_the_estimate_weighs_now_and_forgets_faster_from_then_on():
    # A busy class (a reclaim an hour), where the configured half-life, not the endings, is in force.
    seen = _history(SPOT_PRIOR, [1.0] * 30)
    fast = retimed(seen, 2 * HOUR)
    assert fast.mean_rate == seen.mean_rate and fast.half_life_seconds == 2 * HOUR
    assert retimed(seen, seen.half_life_seconds) is seen
    # 10 quiet hours later the faster-forgetting estimate has let go of more of that reclaim.
    assert (
        fast.observe(EndingKind.SUCCEEDED, 10 * HOUR).recent_endings
        < seen.observe(EndingKind.SUCCEEDED, 10 * HOUR).recent_endings
    )
    with pytest.raises(ValueError):
        retimed(seen, 0.0)


# --- forgetting ---------------------------------------------------------------------------------


def _history(estimate, lifetimes_hours):
    for hours in lifetimes_hours:
        estimate = estimate.observe(EndingKind.RECLAIM_UNSAVED, hours * HOUR)
    return estimate


def test_an_observation_weighs_half_after_a_half_life_of_later_exposure():

    start = SPOT_PRIOR.observe(EndingKind.RECLAIM_UNSAVED, 1.0)
    half_life = start.memory_half_life
    later = start.observe(EndingKind.SUCCEEDED, half_life)
    assert later.recent_endings == pytest.approx(0.5)
    # A half-life of exposure counts as H / (2 ln 2) seconds: its first hours have faded already.
    assert later.recent_exposure == pytest.approx(half_life / (2 * math.log(2)), rel=1e-4)
    assert later.endings == 1  # the raw count, for status, is kept
    assert later.lifetime_weights() == pytest.approx([0.5, 1.0])


def test_the_estimate_follows_a_rate_that_rises_and_one_that_never_forgets_lags():
    calm_then_busy = [30.0] * 4 + [1.0] * 24
    forgetting = _history(SPOT_PRIOR, calm_then_busy)
    never = _history(replace(SPOT_PRIOR, half_life_seconds=math.inf), calm_then_busy)
    assert never.mean_rate * HOUR < 0.25
    assert forgetting.mean_rate * HOUR > 0.35  # 0.41: the last day weighs most
    # ... and so the interval the next attempt gets is closer to the busy phase's own.
    busy_only = _history(SPOT_PRIOR, [1.0] * 40)
    tau = {
        name: choose_interval(e, 300.0, 60.0, 24 * HOUR, restart_cost=300.0, write_seconds=600.0)
        for name, e in (("forgetting", forgetting), ("never", never), ("busy", busy_only))
    }
    assert tau["busy"] < tau["forgetting"] < tau["never"]


def test_a_few_attempts_that_the_old_rate_makes_unlikely_restart_the_estimate_from_them(monkeypatch):
    calm = _history(SPOT_PRIOR, [30.0] * 6)
    after_four = _history(calm, [1.0] * 4)
    # Four reclaims within an hour each, where one per ~30 h was the rule: the estimate restarts
    # from the new attempts (and the prior's floor) instead of averaging them with the calm days.
    # (Three did at the former 4 nats; at 8 a rise this large takes one attempt more.)
    assert after_four.mean_rate * HOUR > 0.4
    assert len(after_four.lifetimes) <= 4 and after_four.endings == 10  # the raw count stays
    # Forgetting alone still reads about one reclaim per 5 h.
    monkeypatch.setattr(checkpoint_interval, "CHANGE_THRESHOLD_NATS", math.inf)
    assert _history(calm, [1.0] * 4).mean_rate * HOUR < 0.25


def test_a_short_burst_in_a_steady_class_keeps_its_history_and_most_of_its_interval():
    def interval(estimate):
        return choose_interval(estimate, 300.0, 60.0, 24 * HOUR, restart_cost=300.0, write_seconds=600.0)

    steady = _history(SPOT_PRIOR, [3.0] * 30)  # a reclaim every 3 h, for days
    burst = _history(steady, [0.1] * 3)  # then three within 6 min each, as a zone-wide burst does
    # The burst is weighed with the days before it, not taken for the class's new rate: the next
    # attempt, most likely a long calm one again, is not cut to the burst's interval.
    assert len(burst.lifetimes) == 33
    assert interval(burst) > 0.8 * interval(steady)
    # A run that goes on is a change: eight such attempts restart the estimate from them.
    lasting = _history(steady, [0.1] * 8)
    assert len(lasting.lifetimes) <= 8
    assert interval(lasting) < 0.5 * interval(steady)


def test_a_steady_rate_seldom_looks_like_a_change():
    draw = random.Random(20261127)
    estimate, restarts = SPOT_PRIOR, 0
    for _ in range(2000):
        before = len(estimate.lifetimes)
        estimate = estimate.observe(EndingKind.RECLAIM_UNSAVED, draw.expovariate(1.0 / (2 * HOUR)))
        restarts += len(estimate.lifetimes) < before
    assert restarts <= 40  # at most 2 % of the attempts
    assert 0.3 < estimate.mean_rate * HOUR < 0.8  # one per 2 h


def test_the_estimate_comes_down_again_when_the_reclaims_stop():
    busy = _history(SPOT_PRIOR, [1.0] * 30)
    calm_again = busy.observe(EndingKind.SUCCEEDED, 100 * HOUR)
    assert calm_again.mean_rate < busy.mean_rate / 10
    # The prior keeps a floor of weight: a long calm spell is not read as "never reclaimed".
    very_calm = calm_again.observe(EndingKind.SUCCEEDED, 1000 * HOUR)

    assert very_calm.alpha >= PRIOR_FLOOR_ALPHA * 0.999
    # ... nor is a thousand hours of one attempt taken at full weight: a class this calm forgets
    # at the longest half-life, and its evidence is at most 1.44 of those without a reclaim.
    assert very_calm.memory_half_life == MAX_HALF_LIFE_SECONDS
    assert very_calm.recent_exposure < memory_seconds(MAX_HALF_LIFE_SECONDS)
    assert very_calm.mean_rate > PRIOR_FLOOR_ALPHA / (memory_seconds(MAX_HALF_LIFE_SECONDS) + SPOT_PRIOR.beta)


def test_forgetting_survives_the_store_and_old_books_start_forgetting():
    estimate = _history(SPOT_PRIOR, [3.0, 5.0, 0.5])
    again = RateEstimate.from_dict(json.loads(json.dumps(estimate.to_dict())))
    assert again == estimate
    never = replace(SPOT_PRIOR, half_life_seconds=math.inf)
    assert RateEstimate.from_dict(json.loads(json.dumps(never.to_dict()))).half_life_seconds == math.inf
    old = {"alpha": 2.5, "beta": 100000.0, "endings": 2, "exposure_seconds": 56800.0}
    read = RateEstimate.from_dict(old)
    assert read.half_life_seconds == DEFAULT_HALF_LIFE_SECONDS
    assert read.recent_endings == 2.0 and read.mean_rate == 2.5 / 100000.0


def test_a_batch_of_endings_fades_with_its_exposure():
    # n endings over T seconds, folded in at once, read as the same rate they had (not as n
    # endings at the end of T's faded exposure).
    batch = SPOT_PRIOR.update(200, 200 * 3 * HOUR)
    assert batch.recent_endings / batch.recent_exposure == pytest.approx(1 / (3 * HOUR), rel=1e-9)
    assert 3 * HOUR < batch.mtbf < 3.6 * HOUR  # the prior's floor (24 h) pulls a little


def test_one_long_attempt_in_a_busy_class_does_not_restart_the_estimate(monkeypatch):
    busy = _history(SPOT_PRIOR, [1.0] * 30)
    # Six times the mean, then reclaimed: unusual for one reclaim an hour (one attempt in ~400),
    # not evidence that the reclaims stopped. The estimate keeps its history and stays busy.
    long_one = busy.observe(EndingKind.RECLAIM_UNSAVED, 6 * HOUR)
    assert len(long_one.lifetimes) == 31
    assert long_one.mean_rate * HOUR > 0.5
    # A fall judged as a rise was at the former 4 nats: the estimate restarted from that one attempt.
    monkeypatch.setattr(checkpoint_interval, "CHANGE_DROP_EXTRA_NATS", 0.0)
    monkeypatch.setattr(checkpoint_interval, "CHANGE_THRESHOLD_NATS", 4.0)
    assert len(busy.observe(EndingKind.RECLAIM_UNSAVED, 6 * HOUR).lifetimes) == 1
    # A calm spell still brings the estimate down at once (its own exposure outweighs the faded
    # busy hours).
    monkeypatch.undo()
    assert busy.observe(EndingKind.RECLAIM_UNSAVED, 30 * HOUR).mean_rate < busy.mean_rate / 4


def test_a_half_life_that_grows_later_does_not_bring_faded_evidence_back():
    busy = _history(SPOT_PRIOR, [1.0] * 30)
    quiet = busy.observe(EndingKind.SUCCEEDED, 40 * HOUR)  # faded at the busy class's half-life
    assert quiet.memory_half_life > 2 * busy.memory_half_life
    faded = 0.5 ** (40 * HOUR / busy.memory_half_life)
    assert len(quiet.lifetimes) == 31
    assert all(weight <= faded * (1 + 1e-9) for weight in quiet.lifetime_weights()[:-1])
    # ... and they stay faded after a round trip through the store.
    again = RateEstimate.from_dict(json.loads(json.dumps(quiet.to_dict())))
    assert again.lifetime_weights() == quiet.lifetime_weights()


def test_lifetimes_more_variable_than_exponential_ones_restart_the_estimate_less_often(monkeypatch):
    def restarts() -> int:
        draw, estimate, count = random.Random(20261128), SPOT_PRIOR, 0
        for _ in range(2000):  # a steady class whose young machines are reclaimed first
            before = len(estimate.lifetimes)
            seconds = draw.weibullvariate(2 * HOUR, 0.7)
            estimate = estimate.observe(EndingKind.RECLAIM_UNSAVED, seconds)
            count += len(estimate.lifetimes) < before
        return count

    corrected = restarts()
    monkeypatch.setattr(checkpoint_interval, "CHANGE_OVERDISPERSION", False)
    assert corrected < restarts()
