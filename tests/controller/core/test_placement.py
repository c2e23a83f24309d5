"""The placement choice: expected cost and time per unit of training, from the evidence."""

from __future__ import annotations

import pytest

from controller.core.checkpoint_interval import HOUR, EndingKind, prior_for
from controller.core.placement import (
    PRIOR_WAIT_SECONDS,
    Evidence,
    JobCosts,
    Objective,
    Placement,
    Pool,
    Transfer,
    choose,
    evaluate,
    speed_prior,
)

H100 = (Pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 2),)
COSTS = JobCosts(checkpoint_stall=30.0, checkpoint_write=120.0, restart=300.0, remaining_units=100 * HOUR)
HERE = Transfer(checkpoint_region=None)


def spot(region: str = "us-central1", price: float = 30.0, name: str | None = None) -> Placement:
    return Placement(name or f"{region}-spot", region, H100, "SPOT", price)


def standard(region: str = "us-central1", price: float = 88.0) -> Placement:
    return Placement(f"{region}-standard", region, H100, "STANDARD", price)


def reclaimed_every(hours: float, times: int, placement: Placement) -> Evidence:
    rates = prior_for(placement.capacity_class())
    for _ in range(times):
        rates = rates.observe(EndingKind.RECLAIM_UNSAVED, hours * HOUR)
    return Evidence(rates=rates, wait_seconds=0.0, units_per_second=1.0)


def test_spot_is_cheapest_while_its_reclaims_are_rare_and_standard_once_they_are_constant():
    cheap, steady = spot(), standard()
    calm = {cheap.name: reclaimed_every(20.0, 5, cheap), steady.name: Evidence(wait_seconds=0.0)}
    assert choose((cheap, steady), calm, COSTS, HERE, Objective.LOWEST_COST).chosen == cheap.name
    # Reclaimed every 2 minutes of training: almost nothing survives the restart and the
    # checkpoints, so Spot's low price buys little training.
    busy = {cheap.name: reclaimed_every(2 / 60, 200, cheap), steady.name: Evidence(wait_seconds=0.0)}
    choice = choose((cheap, steady), busy, COSTS, HERE, Objective.LOWEST_COST)
    assert choice.chosen == steady.name
    figures = {f.name: f for f in choice.figures}
    assert figures[cheap.name].cost_per_unit > figures[steady.name].cost_per_unit
    assert figures[cheap.name].lost_per_hour > 5.0


def test_the_checkpoint_copy_counts_against_moving_away_from_it():
    home, away = spot("us-central1"), spot("europe-west4")
    evidence = {p.name: reclaimed_every(10.0, 3, p) for p in (home, away)}
    # With a multi-region root (nothing to copy) the two are equal and the order decides.
    assert choose((away, home), evidence, COSTS, HERE, Objective.EARLIEST_FINISH).chosen == away.name
    # 2 TB to copy from us-central1 at 200 MB/s: ten thousand seconds before the attempt can start.
    far = Transfer(checkpoint_region="us-central1", checkpoint_bytes=2e12)
    choice = choose((away, home), evidence, COSTS, far, Objective.EARLIEST_FINISH)
    assert choice.chosen == home.name
    assert {f.name: f.copy_seconds for f in choice.figures} == {away.name: 1e4, home.name: 0.0}
    assert choose((away, home), evidence, COSTS, far, Objective.LOWEST_COST).chosen == home.name


def test_a_long_stockout_makes_spot_slow_but_not_costly():
    cheap, steady = spot(), standard()
    evidence = {
        cheap.name: Evidence(rates=reclaimed_every(20.0, 5, cheap).rates, wait_seconds=12 * HOUR),
        steady.name: Evidence(wait_seconds=0.0),
    }
    assert choose((cheap, steady), evidence, COSTS, HERE, Objective.LOWEST_COST).chosen == cheap.name
    assert choose((cheap, steady), evidence, COSTS, HERE, Objective.EARLIEST_FINISH).chosen == steady.name


def test_the_measured_speed_decides_the_earliest_finish():
    slow, fast = spot("us-central1", name="slow"), spot("us-east4", name="fast")
    evidence = {
        "slow": Evidence(rates=reclaimed_every(10.0, 3, slow).rates, wait_seconds=0.0, units_per_second=1.0),
        "fast": Evidence(rates=reclaimed_every(10.0, 3, fast).rates, wait_seconds=0.0, units_per_second=1.5),
    }
    choice = choose((slow, fast), evidence, COSTS, HERE, Objective.EARLIEST_FINISH)
    assert choice.chosen == "fast"
    assert choice.figures[1].finish_seconds < choice.figures[0].finish_seconds / 1.4


def test_under_a_deadline_the_cheapest_that_makes_it_or_else_the_earliest():
    cheap, steady = spot(), standard()
    evidence = {
        cheap.name: Evidence(rates=reclaimed_every(3.0, 10, cheap).rates, wait_seconds=4 * HOUR),
        steady.name: Evidence(wait_seconds=0.0),
    }
    figures = {
        f.name: f for f in choose((cheap, steady), evidence, COSTS, HERE, Objective.LOWEST_COST).figures
    }
    roomy = figures[cheap.name].finish_seconds * 1.01
    tight = (figures[cheap.name].finish_seconds + figures[steady.name].finish_seconds) / 2
    assert figures[steady.name].finish_seconds < figures[cheap.name].finish_seconds
    by = Objective.COST_UNDER_DEADLINE
    assert choose((cheap, steady), evidence, COSTS, HERE, by, seconds_to_deadline=roomy).chosen == cheap.name
    assert choose((cheap, steady), evidence, COSTS, HERE, by, seconds_to_deadline=tight).chosen == steady.name
    hopeless = choose((cheap, steady), evidence, COSTS, HERE, by, seconds_to_deadline=HOUR)
    assert hopeless.chosen == steady.name
    assert "none expected to finish within the deadline" in hopeless.reason
    with pytest.raises(ValueError, match="deadline"):
        choose((cheap, steady), evidence, COSTS, HERE, by)


def test_an_unseen_placement_reads_as_its_priors_and_says_so():
    seen, unseen = spot("us-central1"), Placement("flex", "us-east5", H100, "FLEX_START", 50.0)
    evidence = {
        seen.name: Evidence(
            rates=reclaimed_every(5.0, 4, seen).rates, wait_seconds=60.0, units_per_second=2.0
        )
    }
    choice = choose((seen, unseen), evidence, COSTS, HERE, Objective.LOWEST_COST)
    flex = next(f for f in choice.figures if f.name == "flex")
    assert flex.from_prior == ("rates", "wait", "speed")
    assert flex.wait_seconds == PRIOR_WAIT_SECONDS["FLEX_START"]
    assert flex.units_per_second == 2.0  # the measured speed per accelerator, same accelerators
    assert flex.lost_per_hour == pytest.approx(prior_for(unseen.capacity_class()).mean_rate * HOUR)
    assert "prior: rates, wait, speed" in choice.reason or choice.chosen == "flex"
    assert choice.to_dict()["figures"][1]["fromPrior"] == ["rates", "wait", "speed"]


def test_flex_start_capacity_is_held_at_most_seven_days():
    flex = Placement("flex", "us-east5", H100, "FLEX_START", 50.0)
    same_without_limit = Placement("std", "us-east5", H100, "STANDARD", 50.0)
    month = JobCosts(30.0, 120.0, 300.0, remaining_units=30 * 24 * HOUR)
    there = Evidence(wait_seconds=0.0, units_per_second=1.0)
    # A month of work on FLEX_START needs a new attempt (and its restart) every 7 days.
    assert (
        evaluate(flex, there, month, HERE, 1.0).time_per_unit
        > evaluate(same_without_limit, there, month, HERE, 1.0).time_per_unit
    )


def test_placements_are_checked():
    with pytest.raises(ValueError, match="strategy"):
        Placement("x", "r", H100, "PREEMPTIBLE", 1.0)
    with pytest.raises(ValueError, match="pool"):
        Placement("x", "r", (), "SPOT", 1.0)
    with pytest.raises(ValueError, match="no placement"):
        choose((), {}, COSTS, HERE, Objective.LOWEST_COST)


def test_a_refusal_sends_the_attempt_to_the_next_best_at_once():
    # us-east4 costs 5 % more per node hour: within what a refusal moves for.
    cheap, other, steady = spot("us-central1"), spot("us-east4", price=31.5), standard()
    evidence = {p.name: reclaimed_every(20.0, 5, p) for p in (cheap, other)}
    evidence[steady.name] = Evidence(wait_seconds=0.0)
    placements = (cheap, other, steady)
    assert choose(placements, evidence, COSTS, HERE, Objective.LOWEST_COST).chosen == cheap.name
    after_one = choose(
        placements, evidence, COSTS, HERE, Objective.LOWEST_COST, refused=frozenset({cheap.name})
    )
    assert after_one.chosen == other.name
    assert "refused this attempt" in after_one.reason
    refused_all = frozenset(p.name for p in placements)
    assert (
        choose(placements, evidence, COSTS, HERE, Objective.LOWEST_COST, refused=refused_all).chosen
        == cheap.name
    )


def test_for_the_lowest_cost_a_refusal_waits_rather_than_pay_much_more_elsewhere():
    cheap, steady = spot(), standard()
    evidence = {cheap.name: reclaimed_every(20.0, 5, cheap), steady.name: Evidence(wait_seconds=0.0)}
    refused = frozenset({cheap.name})
    waiting = choose((cheap, steady), evidence, COSTS, HERE, Objective.LOWEST_COST, refused=refused)
    assert (waiting.chosen, waiting.wait) == (cheap.name, True)
    assert "waiting for it" in waiting.reason
    hurry = choose((cheap, steady), evidence, COSTS, HERE, Objective.EARLIEST_FINISH, refused=refused)
    assert (hurry.chosen, hurry.wait) == (steady.name, False)


A100 = (Pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, 2),)


def test_an_unseen_accelerator_is_expected_at_its_peak_throughput_ratio_and_tried_once():
    slow = Placement("a100", "us-central1", A100, "SPOT", 10.0)
    fast = Placement("h100", "us-central1", H100, "SPOT", 30.0)
    measured = {
        "a100": Evidence(rates=reclaimed_every(20.0, 3, slow).rates, wait_seconds=0.0, units_per_second=0.3)
    }
    # 989 / 312 TFLOPS: 0.95 units a second promised for the H100s, so at three times the price
    # per hour they look cheaper per unit than the measured A100s (0.9 a second would tie).
    assert speed_prior(fast, (slow, fast), measured) == pytest.approx(0.3 * 989 / 312)
    assert choose((slow, fast), measured, COSTS, HERE, Objective.LOWEST_COST).chosen == "h100"
    # Measured slower than its peak: back to the A100s.
    measured["h100"] = Evidence(
        rates=reclaimed_every(20.0, 3, fast).rates, wait_seconds=0.0, units_per_second=0.6
    )
    assert choose((slow, fast), measured, COSTS, HERE, Objective.LOWEST_COST).chosen == "a100"
    # The same accelerator elsewhere is expected at its measured speed, not a scaled guess.
    elsewhere = Placement("h100-east", "us-east4", H100, "SPOT", 30.0)
    assert speed_prior(elsewhere, (slow, fast, elsewhere), measured) == pytest.approx(0.6)


def test_what_was_learned_of_an_idle_placement_fades_back_to_its_prior():
    busy = spot("us-central1")
    learned = reclaimed_every(0.5, 20, busy)
    fresh = evaluate(busy, learned, COSTS, HERE, 1.0)
    idle = Evidence(learned.rates, learned.wait_seconds, learned.units_per_second, idle_seconds=24 * HOUR)
    later = evaluate(busy, idle, COSTS, HERE, 1.0, half_life_seconds=12 * HOUR)
    prior = prior_for(busy.capacity_class()).mean_rate * HOUR
    # Two half-lives: a quarter of what was learned is left, three quarters of the prior back.
    assert later.lost_per_hour == pytest.approx(0.25 * fresh.lost_per_hour + 0.75 * prior)
    assert later.cost_per_unit < fresh.cost_per_unit


def test_a_refusal_moves_for_a_short_dearer_stay_but_waits_rather_than_lock_into_a_dear_week():
    cheap = spot("us-central1", price=30.0)
    other = spot("us-east4", price=36.0)  # a fifth dearer: over the 10 % premium
    flex = Placement("flex", "us-east5", H100, "FLEX_START", 40.0)
    rates = reclaimed_every(3.0, 10, cheap).rates
    refused = frozenset({cheap.name})

    def after_refusal(wait_hours: float, alternative: Placement) -> str:
        evidence = {
            cheap.name: Evidence(rates, wait_hours * HOUR, 1.0),
            alternative.name: Evidence(rates if alternative.strategy == "SPOT" else None, 0.0, 1.0),
        }
        choice = choose((cheap, alternative), evidence, COSTS, HERE, Objective.LOWEST_COST, refused=refused)
        return "wait" if choice.wait else choice.chosen

    # An attempt on the other Spot placement keeps about 3 h of work for about 20 % more: worth it
    # when the stockout is expected to last hours, not when it is expected to end in minutes.
    assert after_refusal(4.0, other) == other.name
    assert after_refusal(0.05, other) == "wait"
    # FLEX_START holds its machines up to 7 days: the whole remaining job at a third more.
    assert after_refusal(4.0, flex) == "wait"


def test_after_two_cheap_placements_refused_the_wait_is_for_the_first_of_them_to_come_back():
    cheap, twin = spot("us-central1", price=30.0), spot("us-west1", price=30.0)
    other = spot("us-east4", price=36.0)  # a fifth dearer: over the 10 % premium
    rates = reclaimed_every(3.0, 10, cheap).rates
    evidence = {
        cheap.name: Evidence(rates, 1.0 * HOUR, 1.0),
        twin.name: Evidence(rates, 1.0 * HOUR, 1.0),
        other.name: Evidence(rates, 0.0, 1.0),
    }
    # One refused with an hour's expected wait: an attempt elsewhere (~3 h of work at a fifth
    # more) is worth less than the hour, so it moves.
    alone = choose(
        (cheap, other), evidence, COSTS, HERE, Objective.LOWEST_COST, refused=frozenset({cheap.name})
    )
    assert alone.chosen == other.name and not alone.wait
    # Two refused, an hour each, independently: the first of them is back in half an hour, which
    # is worth less than the extra money elsewhere: wait.
    both = choose(
        (cheap, twin, other),
        evidence,
        COSTS,
        HERE,
        Objective.LOWEST_COST,
        refused=frozenset({cheap.name, twin.name}),
    )
    assert both.wait and both.chosen == cheap.name
    assert "0.5 h" in both.reason
