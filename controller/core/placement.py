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
(`checkpoint_interval.prior_for`), a wait of `PRIOR_WAIT_SECONDS[strategy]`, and a speed: the
same accelerator's measured speed elsewhere, else a measured one's scaled by the accelerators'
peak throughput (`speed_prior`, `ACCELERATOR_PEAK_TFLOPS`), else 1 unit per second per
accelerator. What was learned of a placement left idle fades back to its prior over wall time
(`Evidence.idle_seconds`, the rate book's half-life), so capacity that was busy once is tried
again. After a refusal, lowest cost moves at once when the move is cheap enough or the expected
wait is worth more than one attempt's extra cost elsewhere (`worth_moving`); the wait is for the
first of the refused placements that are cheaper than the move to come back (`first_back`), each
refused placement's the rest of its stockout as the job's refusals predict (the shell's input,
`core.stockout_spells`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from controller.core.checkpoint_interval import (
    DEFAULT_HALF_LIFE_SECONDS,
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
# The speed prior of a placement not measured yet: a measured placement's speed per accelerator,
# scaled by the ratio of the accelerators' peak dense BF16/FP16 tensor throughput (TFLOPS, from
# NVIDIA's data sheets: https://www.nvidia.com/en-us/data-center/a100/, .../h100/, .../h200/,
# .../l4/, .../tesla-t4/, .../v100/, .../dgx-b200/; the sparsity figures halved). Peak is an
# optimistic guess for most jobs (memory and communication bound them below it), and the first
# attempt measures the truth; an accelerator not listed counts as the measured one's equal.
# Keys: Vertex AI's AcceleratorType names.
ACCELERATOR_PEAK_TFLOPS = {
    "NVIDIA_TESLA_T4": 65.0,
    "NVIDIA_TESLA_V100": 125.0,
    "NVIDIA_L4": 121.0,
    "NVIDIA_TESLA_A100": 312.0,
    "NVIDIA_A100_80GB": 312.0,
    "NVIDIA_H100_80GB": 989.0,
    "NVIDIA_H100_MEGA_80GB": 989.0,
    "NVIDIA_H200_141GB": 989.0,
    "NVIDIA_B200": 2250.0,
}


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

    @property
    def accelerator_type(self) -> str:
        """The chief pool's accelerator (what the speed prior scales by)."""
        return self.pools[0].accelerator_type

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
    # Wall-clock seconds since the rates were last updated (the placement's last ending): what
    # was learned of a placement nobody has used for a while fades back towards its prior (see
    # `evaluate`), so one that was busy once is tried again rather than shunned for ever.
    idle_seconds: float = 0.0


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
    units_per_attempt: float = 0.0  # the training one attempt is expected to keep
    dollars_per_hour: float = 0.0  # what its machines cost an hour while held

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
            "unitsPerAttempt": self.units_per_attempt,
            "dollarsPerHour": self.dollars_per_hour,
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
    *,
    half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS,
) -> Figures:
    """The expected cost and time per unit of training of one attempt on `placement`.

    Rates learned on it fade back to the prior by `evidence.idle_seconds` of wall time, with the
    rate book's half-life: the book discounts by exposure (later training in the class), which a
    class nobody uses never gets; capacity left alone changes all the same."""
    prior = prior_for(placement.capacity_class())
    rates = evidence.rates or prior
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
    if evidence.rates is not None and evidence.idle_seconds > 0.0:
        kept = 0.5 ** (evidence.idle_seconds / half_life_seconds)
        lost = kept * lost + (1.0 - kept) * prior.mean_rate
        saved = kept * saved + (1.0 - kept) * prior.saved_rate
    if placement.strategy == "FLEX_START":
        # The end of the longest run comes like a reclaim announced in time: the attempt saves and
        # a new one (with its restart, and its wait) is needed.
        saved += 1.0 / FLEX_START_MAX_RUN_SECONDS
    tau = planned_interval(lost, saved, costs)
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
        units_per_attempt=units,
        dollars_per_hour=placement.nodes * placement.price_per_node_hour,
    )


# Steps of the rate grid the planned interval is looked up on: 1/8 of a doubling (9 %).
_RATE_STEPS_PER_DOUBLING = 8


def planned_interval(lost_rate: float, saved_rate: float, costs: JobCosts) -> float:
    """The checkpoint interval an attempt at these rates (per second) is planned with: the
    constant-hazard model's best (the lifetimes' replay refines the interval the attempt will
    really use by a few percent of goodput at most; here it would only slow the comparison).

    Looked up for the rates rounded to 1/8 of a doubling, so that the choice, made for every
    placement before every attempt, costs a table look-up: goodput is flat near the optimum, and
    an interval 4.5 % off it loses about a thousandth of it (second order)."""
    return _planned_interval(
        _rate_step(lost_rate),
        _rate_step(saved_rate),
        costs.checkpoint_stall,
        costs.restart,
        costs.checkpoint_write,
    )


def _rate_step(rate: float) -> int | None:
    if rate <= 0.0:
        return None
    return round(math.log2(rate) * _RATE_STEPS_PER_DOUBLING)


@functools.lru_cache(maxsize=65536)
def _planned_interval(
    lost_step: int | None, saved_step: int | None, stall: float, restart: float, write: float
) -> float:
    def rate(step: int | None) -> float:
        return 0.0 if step is None else 2.0 ** (step / _RATE_STEPS_PER_DOUBLING)

    lost, saved = rate(lost_step), rate(saved_step)
    # An estimate whose posterior mean rates are these (nodes=1 reads the means alone).
    beta = HOUR
    known = RateEstimate(
        alpha=max(lost, 1e-300) * beta,
        beta=beta,
        weighted_endings=0.0,
        weighted_exposure=0.0,
        weighted_saved=saved * beta,
    )
    return best_interval(known, stall, restart_cost=restart, write_seconds=write, nodes=1)


def choose(
    placements: tuple[Placement, ...],
    evidence: dict[str, Evidence],
    costs: JobCosts,
    transfer: Transfer,
    objective: Objective,
    *,
    seconds_to_deadline: float | None = None,
    refused: frozenset[str] = frozenset(),
    move_premium: float = REFUSAL_MOVE_PREMIUM,
    half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS,
) -> Choice:
    """The placement for the next attempt, with the figures of every one compared.

    `refused`: placements that just refused this attempt (a stockout, a quota error): the attempt
    goes to the best of the others at once rather than waiting there (for the lowest cost, only
    when that costs at most `move_premium` more per unit: else `wait`; math.inf: always move, as
    a fixed failover order does). When every placement refused, all are eligible again (the
    attempt waits where it is best to). `half_life_seconds`: how fast what was learned of an
    idle placement fades back to its prior (the configured half-life of the rate book)."""
    if not placements:
        raise ValueError("no placement to choose from")
    if objective is Objective.COST_UNDER_DEADLINE and seconds_to_deadline is None:
        raise ValueError("lowest cost under a deadline needs the seconds to the deadline")
    figures = tuple(
        evaluate(
            p,
            seen := evidence.get(p.name, Evidence()),
            costs,
            transfer,
            1.0
            if seen.units_per_second is not None
            else speed_prior(p, placements, evidence) / p.accelerators,
            half_life_seconds=half_life_seconds,
        )
        for p in placements
    )
    eligible = [f for f in figures if f.name not in refused] or list(figures)
    # Ties go to the earlier placement in the request's order (min() keeps the first).
    by_cost = min(eligible, key=lambda f: (f.cost_per_unit, f.time_per_unit))
    cheapest = min(figures, key=lambda f: (f.cost_per_unit, f.time_per_unit))
    # The wait is for the first of the refused placements cheaper than the best other to come
    # back (any of them would do), not for the cheapest alone.
    waited_for = [f for f in figures if f.name in refused and f.cost_per_unit < by_cost.cost_per_unit]
    expected_wait = first_back(waited_for) if waited_for else cheapest.wait_seconds
    wait = (
        objective is Objective.LOWEST_COST
        and cheapest.name in refused
        and not worth_moving(by_cost, cheapest, move_premium, wait_seconds=expected_wait)
    )
    elsewhere = by_cost
    if wait:
        # Capacity elsewhere costs too much more: try the cheapest again after the backoff.
        by_cost = cheapest
    by_time = min(eligible, key=lambda f: (f.time_per_unit, f.cost_per_unit))
    if objective is Objective.LOWEST_COST:
        chosen, why = by_cost, f"lowest cost per unit ({_money(by_cost.cost_per_unit)})"
        if wait:
            why += (
                f"; refused, but the best other ({elsewhere.name}, {_money(elsewhere.cost_per_unit)}) "
                f"costs more than the expected wait ({_hours(expected_wait)}"
                + (f", the first of {len(waited_for)} refused back" if len(waited_for) > 1 else "")
                + ") is worth: waiting for it"
            )
        elif cheapest.name in refused and by_cost is not cheapest:
            why += f"; {cheapest.name} refused: " + _why_moved(by_cost, cheapest, move_premium, expected_wait)
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


def speed_prior(
    placement: Placement, placements: tuple[Placement, ...], evidence: dict[str, Evidence]
) -> float:
    """Units per second expected of `placement` before it is measured: the fastest measured speed
    per accelerator of the same accelerator type; without one, the most any measured placement's
    speed per accelerator promises for it, scaled by the accelerators' peak throughput
    (ACCELERATOR_PEAK_TFLOPS; optimistic, so an unseen kind of accelerator gets tried once); with
    nothing measured, 1 per accelerator (every placement compares at equal speed per accelerator)."""
    same = [
        e.units_per_second / p.accelerators
        for p in placements
        if p.accelerator_type == placement.accelerator_type
        and (e := evidence.get(p.name)) is not None
        and e.units_per_second is not None
    ]
    if same:  # the same accelerator measured elsewhere: its speed, not a scaled guess
        return max(same) * placement.accelerators
    mine = ACCELERATOR_PEAK_TFLOPS.get(placement.accelerator_type)
    promised = [
        e.units_per_second
        / p.accelerators
        * (mine / theirs if mine and (theirs := ACCELERATOR_PEAK_TFLOPS.get(p.accelerator_type)) else 1.0)
        for p in placements
        if (e := evidence.get(p.name)) is not None and e.units_per_second is not None
    ]
    return (max(promised) if promised else 1.0) * placement.accelerators


def first_back(refused: list[Figures]) -> float:
    """Expected seconds until the first of these refused placements has capacity again, each
    stockout taken as memoryless with its expected wait (so their rates of return add up)."""
    rate = sum(1.0 / f.wait_seconds if f.wait_seconds > 0.0 else math.inf for f in refused)
    return 1.0 / rate if rate > 0.0 else math.inf


def worth_moving(
    elsewhere: Figures,
    refused: Figures,
    move_premium: float = REFUSAL_MOVE_PREMIUM,
    *,
    wait_seconds: float | None = None,
) -> bool:
    """Lowest cost, after the cheapest refused: run the attempt `elsewhere` now, or wait for the
    refused one? Move when it costs at most `move_premium` more per unit, or when the extra money
    of one attempt there is at most what the wait would cost at the refused placement's own hourly
    price: an hour of the job's time is taken to be worth an hour of its machines (so a short
    stay a little dearer is taken, a week locked into FLEX_START at a third more is not).
    `wait_seconds`: the expected wait (by default `refused.wait_seconds`: for a refused placement
    the rest of its stockout, `core.stockout_spells`; `choose` passes the wait for the first of the refused placements cheaper than
    `elsewhere` to come back, `first_back`)."""
    if elsewhere.cost_per_unit <= refused.cost_per_unit * (1.0 + move_premium):
        return True
    extra, worth = move_against_wait(elsewhere, refused, wait_seconds=wait_seconds)
    return extra <= worth


def move_against_wait(
    elsewhere: Figures, refused: Figures, *, wait_seconds: float | None = None
) -> tuple[float, float]:
    """What `worth_moving` weighs: the extra dollars of one attempt `elsewhere`, and what the wait
    for `refused` is worth (hours of it at the refused placement's hourly price)."""
    extra = (elsewhere.cost_per_unit - refused.cost_per_unit) * elsewhere.units_per_attempt
    wait = refused.wait_seconds if wait_seconds is None else wait_seconds
    return extra, wait / HOUR * refused.dollars_per_hour


def _why_moved(elsewhere: Figures, refused: Figures, move_premium: float, wait_seconds: float) -> str:
    if elsewhere.cost_per_unit <= refused.cost_per_unit * (1.0 + move_premium):
        return f"moving, at most {move_premium:.0%} more per unit"
    extra, worth = move_against_wait(elsewhere, refused, wait_seconds=wait_seconds)
    return (
        f"moving, one attempt here costs {_money(extra)} more, less than the expected wait for it "
        f"({_hours(wait_seconds)}) is worth at its price ({_money(worth)})"
    )


def _money(dollars: float) -> str:
    return f"${dollars:.4g}"


def _hours(seconds: float) -> str:
    return f"{seconds / HOUR:.1f} h" if math.isfinite(seconds) else "never"
