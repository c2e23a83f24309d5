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
