"""Where the next attempt runs: the placement with the best expected cost or time per unit of
useful training, from what the controller has observed of each.

Pure (stdlib and the core only, no clock: times are passed in). The shell gathers the evidence
(the discounted rate book, observed waits, measured speeds, where the latest checkpoint is) and
the core chooses; the choice carries every figure it compared, for the job's timeline.

The model, per placement and per attempt (the choice is made again before every attempt):
- the attempt first waits for capacity (`Evidence.wait_seconds`: stockouts and retries for Spot,
  the queue for FLEX_START), then, when the latest checkpoint is in another region and the
  checkpoint root is not multi-region, for the copy of that checkpoint (`Transfer`);
- it then holds its machines for R (start-up, restore) plus its training time, which ends at the
  rate of its capacity class's endings (`RateEstimate`: work-losing ones at lambda, saved reclaims
  at mu; discounted, so it follows a rate that changes), or when the job is done, or at the
  strategy's longest run (FLEX_START: 7 days);
- while training it checkpoints at the interval `best_interval` picks for that estimate, and the
  share of machine time that becomes kept work is `work_rate` (restarts, stalls and lost work
  taken off); times its measured speed (units of training, e.g. steps, per second), that is the
  training the attempt buys.
Cost per unit = (machine seconds x nodes x price + copy cost) / units; time per unit = (wait +
copy + machine seconds) / units. Each is per attempt, so a one-off wait or copy is spread over the
work one attempt does, not over the whole job: a placement is not chosen for a long stay that a
reclaim may cut short.

Unseen placements start from stated priors: the rate book's prior for their strategy
(`checkpoint_interval.prior_for`), a wait of `PRIOR_WAIT_SECONDS[strategy]`, and a speed scaled
from the fastest measured placement per accelerator (or 1 unit per second when none is measured:
then every placement compares at equal speed per accelerator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from controller.core.checkpoint_interval import (
    HOUR,
    CapacityClass,
    RateEstimate,
    best_interval,
    prior_for,
    work_rate,
)

STRATEGIES = ("SPOT", "FLEX_START", "STANDARD")

# Waits a placement never tried is taken to have before it starts. Spot: one stockout try (60 s)
# and its 120 s capacity backoff, what a refused submission costs today. FLEX_START: the Dynamic
# Workload Scheduler queues a request until the whole gang can be provisioned; half an hour is a
# guess the first attempt corrects. STANDARD: on-demand capacity, assumed there.
PRIOR_WAIT_SECONDS = {"SPOT": 180.0, "FLEX_START": 1800.0, "STANDARD": 0.0}
# Lowest cost: after a refusal, the attempt moves at once to the cheapest other placement if that
# costs at most this much more per unit; else it waits for the refused one (a retry after the
# capacity backoff). Waiting costs no money, only time, so without a bound a cost-only job would
# never move; a tenth more per unit is what keeping training going is taken to be worth.
REFUSAL_MOVE_PREMIUM = 0.10
# FLEX_START capacity is held for at most 7 days, then the job ends and a new attempt is needed.
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * HOUR


class Objective(str, Enum):
    LOWEST_COST = "lowest-cost"
    EARLIEST_FINISH = "earliest-finish"
    COST_UNDER_DEADLINE = "lowest-cost-under-deadline"


@dataclass(frozen=True)
class Pool:
    machine_type: str
    accelerator_type: str  # "" for CPU-only machines
    accelerator_count: int
    replica_count: int


@dataclass(frozen=True)
class Placement:
    """One alternative for where and how an attempt runs."""

    name: str
    region: str
    pools: tuple[Pool, ...]
    strategy: str  # SPOT, FLEX_START or STANDARD
    price_per_node_hour: float  # dollars per replica-hour, the same for every pool's replicas
    max_wait_seconds: float | None = None  # FLEX_START: how long the request may queue

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES} (got {self.strategy!r})")
        if not self.pools or any(p.replica_count < 1 for p in self.pools):
            raise ValueError("a placement needs at least one pool of at least one replica")
        if not (self.price_per_node_hour >= 0.0 and math.isfinite(self.price_per_node_hour)):
            raise ValueError("price_per_node_hour must be finite and not negative")

    @property
    def nodes(self) -> int:
        return sum(p.replica_count for p in self.pools)

    @property
    def accelerators(self) -> int:
        return sum(p.replica_count * max(p.accelerator_count, 1) for p in self.pools)

    def capacity_class(self) -> CapacityClass:
        """The class whose reclaim rate applies: the first (chief) pool's machines."""
        chief = self.pools[0]
        return CapacityClass(self.region, chief.machine_type, chief.accelerator_type, self.strategy)


@dataclass(frozen=True)
class Evidence:
    """What was observed of one placement; None where nothing was (the prior is used)."""

    rates: RateEstimate | None = None  # from the (discounted) rate book
    wait_seconds: float | None = None  # expected wait for capacity before an attempt starts
    units_per_second: float | None = None  # measured training speed (e.g. steps per second)


@dataclass(frozen=True)
class Transfer:
    """Reaching the latest checkpoint from another region: a server-side copy."""

    checkpoint_region: str | None  # None: no checkpoint yet, or a multi/dual-region root
    checkpoint_bytes: float = 0.0
    bytes_per_second: float = 200e6  # server-side copy between regions
    dollars_per_gib: float = 0.02  # inter-region network within a continent

    def seconds(self, region: str) -> float:
        if self.checkpoint_region is None or region == self.checkpoint_region:
            return 0.0
        return self.checkpoint_bytes / self.bytes_per_second

    def dollars(self, region: str) -> float:
        if self.checkpoint_region is None or region == self.checkpoint_region:
            return 0.0
        return self.checkpoint_bytes / 2**30 * self.dollars_per_gib


@dataclass(frozen=True)
class JobCosts:
    """The job's own costs, as measured (or the interval's defaults): all seconds."""

    checkpoint_stall: float  # C
    checkpoint_write: float  # W
    restart: float  # R: start-up and restore
    remaining_units: float  # training left, in units of `units_per_second`


@dataclass(frozen=True)
class Figures:
    """What one placement was expected to give, and from what (for the timeline)."""

    name: str
    cost_per_unit: float  # dollars
    time_per_unit: float  # seconds
    finish_seconds: float  # remaining_units x time_per_unit
    lost_per_hour: float
    saved_per_hour: float
    interval_seconds: float
    wait_seconds: float
    copy_seconds: float
    units_per_second: float
    from_prior: tuple[str, ...]  # which inputs were priors: "rates", "wait", "speed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "costPerUnit": self.cost_per_unit,
            "timePerUnit": self.time_per_unit,
            "finishSeconds": self.finish_seconds,
            "lostPerHour": self.lost_per_hour,
            "savedPerHour": self.saved_per_hour,
            "intervalSeconds": self.interval_seconds,
            "waitSeconds": self.wait_seconds,
            "copySeconds": self.copy_seconds,
            "unitsPerSecond": self.units_per_second,
            "fromPrior": list(self.from_prior),
        }


@dataclass(frozen=True)
class Choice:
    chosen: str
    objective: Objective
    reason: str
    figures: tuple[Figures, ...]
    wait: bool = False  # the chosen placement refused this attempt: retry it after the backoff

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "objective": self.objective.value,
            "reason": self.reason,
            "wait": self.wait,
            "figures": [f.to_dict() for f in self.figures],
        }


def evaluate(
    placement: Placement,
    evidence: Evidence,
    costs: JobCosts,
    transfer: Transfer,
    speed_per_accelerator: float,
) -> Figures:
    """The expected cost and time per unit of training of one attempt on `placement`."""
    rates = evidence.rates or prior_for(placement.capacity_class())
    wait = PRIOR_WAIT_SECONDS[placement.strategy] if evidence.wait_seconds is None else evidence.wait_seconds
    speed = (
        speed_per_accelerator * placement.accelerators
        if evidence.units_per_second is None
        else evidence.units_per_second
    )
    from_prior = [
        name
        for name, seen in (
            ("rates", evidence.rates),
            ("wait", evidence.wait_seconds),
            ("speed", evidence.units_per_second),
        )
        if seen is None
    ]
    lost, saved = rates.mean_rate, rates.saved_rate
    if placement.strategy == "FLEX_START":
        # The end of the longest run comes like a reclaim announced in time: the attempt saves and
        # a new one (with its restart, and its wait) is needed.
        saved += 1.0 / FLEX_START_MAX_RUN_SECONDS
    # The constant-hazard interval (the lifetimes' replay refines the interval the attempt will
    # use, by a few percent of goodput at most; here it would only slow the comparison).
    tau = best_interval(
        replace(rates, lifetimes=()),
        costs.checkpoint_stall,
        restart_cost=costs.restart,
        write_seconds=costs.checkpoint_write,
        nodes=1,
    )
    kept_share = work_rate(
        tau,
        costs.checkpoint_stall,
        lost,
        saved,
        restart_cost=costs.restart,
        write_seconds=costs.checkpoint_write,
    )
    units_per_machine_second = max(kept_share * speed, 1e-300)
    ending = lost + saved
    held = costs.restart + (1.0 / ending if ending > 0.0 else math.inf)
    to_finish = costs.restart + costs.remaining_units / units_per_machine_second
    held = min(held, to_finish)
    units = held * units_per_machine_second
    copy_seconds = transfer.seconds(placement.region)
    dollars = held / HOUR * placement.nodes * placement.price_per_node_hour + transfer.dollars(
        placement.region
    )
    time_per_unit = (wait + copy_seconds + held) / units
    return Figures(
        name=placement.name,
        cost_per_unit=dollars / units,
        time_per_unit=time_per_unit,
        finish_seconds=costs.remaining_units * time_per_unit,
        lost_per_hour=lost * HOUR,
        saved_per_hour=saved * HOUR,
        interval_seconds=tau,
        wait_seconds=wait,
        copy_seconds=copy_seconds,
        units_per_second=speed,
        from_prior=tuple(from_prior),
    )


def choose(
    placements: tuple[Placement, ...],
    evidence: dict[str, Evidence],
    costs: JobCosts,
    transfer: Transfer,
    objective: Objective,
    *,
    seconds_to_deadline: float | None = None,
    refused: frozenset[str] = frozenset(),
) -> Choice:
    """The placement for the next attempt, with the figures of every one compared.

    `refused`: placements that just refused this attempt (a stockout, a quota error): the attempt
    goes to the best of the others at once rather than waiting there (for the lowest cost, only
    when that costs at most REFUSAL_MOVE_PREMIUM more: else `wait`). When every placement refused,
    all are eligible again (the attempt waits where it is best to)."""
    if not placements:
        raise ValueError("no placement to choose from")
    if objective is Objective.COST_UNDER_DEADLINE and seconds_to_deadline is None:
        raise ValueError("lowest cost under a deadline needs the seconds to the deadline")
    speed_per_accelerator = _speed_prior(placements, evidence)
    figures = tuple(
        evaluate(p, evidence.get(p.name, Evidence()), costs, transfer, speed_per_accelerator)
        for p in placements
    )
    eligible = [f for f in figures if f.name not in refused] or list(figures)
    # Ties go to the earlier placement in the request's order (min() keeps the first).
    by_cost = min(eligible, key=lambda f: (f.cost_per_unit, f.time_per_unit))
    cheapest = min(figures, key=lambda f: (f.cost_per_unit, f.time_per_unit))
    wait = (
        objective is Objective.LOWEST_COST
        and cheapest.name in refused
        and by_cost.cost_per_unit > cheapest.cost_per_unit * (1.0 + REFUSAL_MOVE_PREMIUM)
    )
    if wait:
        # Capacity elsewhere costs too much more: try the cheapest again after the backoff.
        by_cost = cheapest
    by_time = min(eligible, key=lambda f: (f.time_per_unit, f.cost_per_unit))
    if objective is Objective.LOWEST_COST:
        chosen, why = by_cost, f"lowest cost per unit ({_money(by_cost.cost_per_unit)})"
        if wait:
            why += f"; refused, but the others cost over {REFUSAL_MOVE_PREMIUM:.0%} more: waiting for it"
    elif objective is Objective.EARLIEST_FINISH:
        chosen, why = by_time, f"earliest expected finish ({_hours(by_time.finish_seconds)})"
    else:
        assert seconds_to_deadline is not None
        in_time = [f for f in eligible if f.finish_seconds <= seconds_to_deadline]
        if in_time:
            chosen = min(in_time, key=lambda f: (f.cost_per_unit, f.time_per_unit))
            why = (
                f"lowest cost per unit ({_money(chosen.cost_per_unit)}) of the {len(in_time)} expected "
                f"to finish within the deadline ({_hours(seconds_to_deadline)})"
            )
        else:
            chosen = by_time
            why = (
                f"none expected to finish within the deadline ({_hours(seconds_to_deadline)}): "
                f"the earliest ({_hours(chosen.finish_seconds)})"
            )
    others = "; ".join(
        f"{f.name} {_money(f.cost_per_unit)}/unit, {_hours(f.finish_seconds)}"
        + (f" (prior: {', '.join(f.from_prior)})" if f.from_prior else "")
        + (" (refused this attempt)" if f.name in refused else "")
        for f in figures
        if f is not chosen
    )
    reason = f"{chosen.name}: {why}" + (f"; compared with {others}" if others else "")
    return Choice(chosen=chosen.name, objective=objective, reason=reason, figures=figures, wait=wait)


def _speed_prior(placements: tuple[Placement, ...], evidence: dict[str, Evidence]) -> float:
    """Units per second per accelerator for placements not measured yet: the fastest measured
    placement's (optimistic, so an unseen placement gets tried), else 1."""
    measured = [
        e.units_per_second / p.accelerators
        for p in placements
        if (e := evidence.get(p.name)) is not None and e.units_per_second is not None
    ]
    return max(measured) if measured else 1.0


def _money(dollars: float) -> str:
    return f"${dollars:.4g}"


def _hours(seconds: float) -> str:
    return f"{seconds / HOUR:.1f} h" if math.isfinite(seconds) else "never"
