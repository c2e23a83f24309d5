"""Cost and finish time of a long job whose attempts may run in several places (a benchmark script).

One job (`--work-hours` of training at the large shape's speed) over 3 regions x 2 machine shapes
x 3 strategies (18 placements). The attempt model is bench/goodput_sim.py's (`run_attempts`: a
restart R, then tau seconds of training and a C-second stall per checkpoint, committed W later; a
reclaim whose emergency save commits loses nothing, otherwise back to the newest commit), with
the constant-hazard interval (`placement.planned_interval`) for what the policy learned of that
placement.

Each placement has its own:
  reclaims    Spot: Poisson, mean per region and shape (REGION_SPOT_MTBF_HOURS); region A's
              changes 30-fold at `--change-at` hours of wall time (the grid: worse or better).
              FLEX_START and STANDARD: only crashes, one per 7 days on average.
  stockouts   Spot: alternating spells, capacity there (exponential, mean `up`) and gone (mean
              `spell`). A try during a spell is refused (60 s).
  queueing    FLEX_START: a wait per attempt (exponential, mean per region), then the whole gang;
              its capacity is held at most 7 days.
  price       dollars per node hour (Spot and FLEX_START as a share of on-demand, per region).
  speed       large: 1 unit per second; small: the grid's (0.45 or 0.25).
Moving to another region than the latest checkpoint's costs a copy (seconds and dollars).
Common random numbers: per replication, each placement's spells, lifetimes, emergency saves and
queue waits are drawn once and shared by every policy.

Policies:
  single         today: Spot in region A on the large shape, waiting out stockouts (a retry
                 every 60 s + 120 s capacity backoff)
  fixed-order    SkyPilot's failover: the placements in order of hourly price (FLEX_START
                 included), each attempt walks the list from the top; a refusal costs 60 s
  relaunch       `controller.core.placement.choose` (lowest cost) on what it observed: per
                 placement the real, forgetting `RateEstimate`, queue waits, stockout lengths
                 learned from the refusals it watched through the controller's own estimate
                 (`controller.core.stockout_spells`: a stockout nobody looked at for over half
                 an hour counts only up to its last refusal; old ones fade at a 12 h
                 half-life), measured speed, time since it was last used
  relaunch-move  the same, but a refusal always moves it on (as fixed-order does)
  hindsight      the single placement (waiting out its stockouts) with the lowest mean cost per
                 unit at that grid point, known only after the fact

    python bench/capacity_sim.py --replications 40 --jobs 2     # 16 points; verdicts at the end
    python bench/capacity_sim.py --replications 8 --only 6 --only 7
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import goodput_sim as gs

from controller.core.checkpoint_interval import (
    HOUR,
    EndingKind,
    RateEstimate,
    prior_for,
)
from controller.core.placement import (
    FLEX_START_MAX_RUN_SECONDS,
    REFUSAL_MOVE_PREMIUM,
    Evidence,
    JobCosts,
    Objective,
    Placement,
    Pool,
    Transfer,
    choose,
    planned_interval,
)
from controller.core.stockout_spells import DEFAULT_HALF_LIFE_SECONDS, PRIOR_STOCKOUT_SECONDS, Stockouts

REGIONS = ("A", "B", "C")
# Hourly price of each region against the list price: A is the cheapest (so a policy ordered by
# catalogue price goes there first), and A's Spot reclaim rate is the one that changes mid-job.
REGION_PRICE = (0.93, 1.0, 1.05)
# Spot: mean hours between reclaims of the large shape (the small one's are 1.5 times longer);
# A's changes 30-fold at `--change-at` hours of wall time (see Point.region_a).
REGION_SPOT_MTBF_HOURS = (20.0, 12.0, 6.0)
REGION_FLEX_QUEUE_HOURS = (2.0, 4.0, 1.0)  # FLEX_START: mean wait for the whole gang
# (machine type, accelerator, per node, nodes, on-demand $ per node hour); the speeds are the
# grid's (large: 1 unit per second, the reference; small: Point.small_speed).
SHAPES = {
    "large": ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 2, 88.0),
    "small": ("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, 2, 29.4),
}
FLEX_SHARE = 0.6  # FLEX_START price / on-demand
TRY_SECONDS, BACKOFF_SECONDS = 60.0, 120.0
CRASH_MTBF = 7 * 24 * HOUR
DRAWS = 4000


@dataclass(frozen=True)
class Point:
    spell_hours: float  # mean stockout spell (Spot)
    up_hours: float  # mean spell with capacity
    spot_share: float  # Spot price / on-demand
    region_a: str  # "worse": calm (20 h) then busy (40 min); "better": the reverse
    small_speed: float  # units per second of the small shape (the large one: 1)

    def label(self) -> str:
        return (
            f"{self.spell_hours:>5g} {self.up_hours:>4g} {self.spot_share:>5.2f} {self.region_a:>6} "
            f"{self.small_speed:>5.2f}"
        )


@dataclass
class World:
    """One replication's draws, per placement (shared by every policy)."""

    spells: dict[str, tuple[list[float], list[float]]]  # stockout spells: starts, ends (wall seconds)
    units: dict[str, np.ndarray]  # unit exponentials for lifetimes, by attempt on the placement
    saved: dict[str, np.ndarray]
    queue: dict[str, np.ndarray]


@dataclass
class Env:
    placements: tuple[Placement, ...]
    speed: dict[str, float]
    mtbf: dict[str, tuple[float, float]]  # Spot: (before, after the change)
    queue_mean: dict[str, float]
    change_at: float
    save_success: float
    costs: JobCosts
    copy: Transfer


def build(point: Point, args: argparse.Namespace) -> Env:
    placements, speed, mtbf, queue_mean = [], {}, {}, {}
    for r_index, region in enumerate(REGIONS):
        for shape, (machine, acc, per, nodes, od_price) in SHAPES.items():
            for strategy, share in (
                ("SPOT", point.spot_share),
                ("FLEX_START", FLEX_SHARE),
                ("STANDARD", 1.0),
            ):
                name = f"{region}/{shape}/{strategy}"
                price = od_price * share * REGION_PRICE[r_index]
                placements.append(Placement(name, region, (Pool(machine, acc, per, nodes),), strategy, price))
                speed[name] = 1.0 if shape == "large" else point.small_speed
                calm = REGION_SPOT_MTBF_HOURS[r_index] * HOUR * (1.0 if shape == "large" else 1.5)
                if region != "A":
                    mtbf[name] = (calm, calm)
                elif point.region_a == "worse":
                    mtbf[name] = (calm, calm / 30.0)
                else:
                    mtbf[name] = (calm / 30.0, calm)
                queue_mean[name] = REGION_FLEX_QUEUE_HOURS[r_index] * HOUR
    costs = JobCosts(args.stall, 2 * args.stall, args.restart, args.work_hours * HOUR)
    copy = Transfer(checkpoint_region=None, checkpoint_bytes=args.checkpoint_gb * 1e9)
    return Env(tuple(placements), speed, mtbf, queue_mean, args.change_at * HOUR, 0.5, costs, copy)


def draw_world(env: Env, point: Point, seed: int, horizon: float) -> World:
    spells, units, saved, queue = {}, {}, {}, {}
    for index, p in enumerate(env.placements):
        rng = np.random.default_rng([seed, index])
        starts: list[float] = []
        ends: list[float] = []
        t = rng.exponential(point.up_hours * HOUR)
        while t < horizon and p.strategy == "SPOT":
            end = t + rng.exponential(point.spell_hours * HOUR)
            starts.append(t)
            ends.append(end)
            t = end + rng.exponential(point.up_hours * HOUR)
        spells[p.name] = (starts, ends)
        units[p.name] = rng.exponential(1.0, DRAWS)
        saved[p.name] = rng.random(DRAWS) < env.save_success
        queue[p.name] = rng.exponential(env.queue_mean[p.name], DRAWS)
    return World(spells, units, saved, queue)


def stocked_out_until(world: World, name: str, t: float) -> float | None:
    starts, ends = world.spells[name]
    i = bisect.bisect_right(starts, t) - 1
    return ends[i] if i >= 0 and t < ends[i] else None


def lifetime(env: Env, p: Placement, unit: float, start: float) -> float:
    if p.strategy != "SPOT":
        return unit * CRASH_MTBF
    before_m, after_m = env.mtbf[p.name]
    ahead = max(env.change_at - start, 0.0)
    if unit <= ahead / before_m:
        return unit * before_m
    return ahead + (unit - ahead / before_m) * after_m


@dataclass
class Run:
    """One policy's progress through one replication."""

    wall: float = 0.0
    dollars: float = 0.0
    units: float = 0.0
    region: str | None = None  # where the latest checkpoint is
    used: dict[str, int] = field(default_factory=dict)  # attempts per placement (draw index)
    rates: dict[str, RateEstimate] = field(default_factory=dict)
    last_end: dict[str, float] = field(default_factory=dict)  # wall time of its last ending
    stockouts: Stockouts = field(default_factory=Stockouts)
    waits: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)


def attempt(env: Env, world: World, run: Run, p: Placement, work_total: float) -> None:
    """Run one attempt on `p` from `run.wall` (capacity is there); update the run."""
    costs = env.costs
    if run.region is not None and run.region != p.region:
        # A server-side copy of the latest checkpoint to the new region before the attempt starts.
        run.wall += env.copy.checkpoint_bytes / env.copy.bytes_per_second
        run.dollars += env.copy.checkpoint_bytes / 2**30 * env.copy.dollars_per_gib
    k = run.used.get(p.name, 0)
    run.used[p.name] = k + 1
    if p.strategy == "FLEX_START":
        wait = float(world.queue[p.name][k])
        run.wall += wait
        run.waits[p.name] = 0.5 * run.waits.get(p.name, wait) + 0.5 * wait
    estimate = run.rates.get(p.name) or prior_for(p.capacity_class())
    # The constant-hazard interval for what the policy learned of this placement (the controller's
    # replay of kept lifetimes would move it by a few percent of goodput at most on these Poisson
    # reclaims, the same for every policy, at a hundred times the cost), within its bounds.
    tau = min(max(planned_interval(estimate.mean_rate, estimate.saved_rate, costs), 60.0), 24 * HOUR)
    life = lifetime(env, p, float(world.units[p.name][k]), run.wall)
    saved = bool(world.saved[p.name][k])
    if p.strategy == "FLEX_START" and life > FLEX_START_MAX_RUN_SECONDS:
        life, saved = FLEX_START_MAX_RUN_SECONDS, True
    speed = env.speed[p.name]
    c, w, r = costs.checkpoint_stall, costs.checkpoint_write, costs.restart
    remaining = (work_total - run.units) / speed  # training seconds on this placement
    one = gs.run_attempts(remaining, tau, life, saved, c, w, r)  # goodput_sim's attempt model
    working = float(one.working)
    if bool(one.finishes):
        kind, trained = EndingKind.SUCCEEDED, float(one.finish)
    else:
        trained = working
        kind = (
            EndingKind.BEFORE_TRAINING
            if working <= 0.0
            else EndingKind.RECLAIM_SAVED
            if saved
            else EndingKind.RECLAIM_UNSAVED
        )
    held = float(one.on_machine)
    run.wall += held
    run.dollars += held / HOUR * p.nodes * p.price_per_node_hour
    run.units = work_total if kind is EndingKind.SUCCEEDED else run.units + float(one.gained) * speed
    run.region = p.region
    run.rates[p.name] = estimate.observe(kind, trained)
    run.last_end[p.name] = run.wall
    run.measured[p.name] = speed


def wait_for(world: World, name: str, t: float) -> float:
    """Seconds until a try at `name` succeeds, retrying on today's schedule."""
    end = stocked_out_until(world, name, t)
    if end is None:
        return 0.0
    period = TRY_SECONDS + BACKOFF_SECONDS
    return math.ceil((end - t) / period) * period


def run_fixed(env: Env, world: World, p: Placement, work: float) -> Run:
    run = Run()
    while run.units < work:
        run.wall += wait_for(world, p.name, run.wall)
        attempt(env, world, run, p, work)
    return run


def run_fixed_order(env: Env, world: World, work: float) -> Run:
    """SkyPilot's failover over the same alternatives: ordered by hourly price (FLEX_START
    included: its request queues, it is never refused), each attempt walks the list from the top."""
    order = sorted(env.placements, key=lambda p: p.nodes * p.price_per_node_hour)
    run = Run()
    while run.units < work:
        for p in order:
            if stocked_out_until(world, p.name, run.wall) is None:
                attempt(env, world, run, p, work)
                break
            run.wall += TRY_SECONDS
        else:
            run.wall += BACKOFF_SECONDS
    return run


def run_relaunch(env: Env, world: World, work: float, args: argparse.Namespace, premium: float) -> Run:
    run = Run(stockouts=Stockouts(half_life_seconds=args.stockout_half_life * HOUR))
    while run.units < work:
        refused: set[str] = set()
        while True:
            evidence = {}
            for p in env.placements:
                # A refused placement: the rest of its stockout, learned from the refusals the
                # shell watched (the controller's own estimate, `core.stockout_spells`).
                left = run.stockouts.remaining(p.name, run.wall, args.spell_prior * HOUR)
                wait = run.waits.get(p.name) if left is None else left
                idle = run.wall - run.last_end[p.name] if p.name in run.last_end else 0.0
                evidence[p.name] = Evidence(run.rates.get(p.name), wait, run.measured.get(p.name), idle)
            costs = JobCosts(
                env.costs.checkpoint_stall, env.costs.checkpoint_write, env.costs.restart, work - run.units
            )
            transfer = Transfer(run.region, env.copy.checkpoint_bytes)
            choice = choose(
                env.placements,
                evidence,
                costs,
                transfer,
                Objective.LOWEST_COST,
                refused=frozenset(refused),
                move_premium=premium,
            )
            p = next(q for q in env.placements if q.name == choice.chosen)
            if choice.wait:
                run.wall += BACKOFF_SECONDS
                refused.clear()
                continue
            if p.strategy == "SPOT" and stocked_out_until(world, p.name, run.wall) is not None:
                run.wall += TRY_SECONDS
                run.stockouts = run.stockouts.refused(p.name, run.wall)
                refused.add(p.name)
                if len(refused) == len(env.placements):
                    run.wall += BACKOFF_SECONDS
                    refused.clear()
                continue
            run.stockouts = run.stockouts.started(p.name, run.wall)
            attempt(env, world, run, p, work)
            break
    return run


POLICIES = ("single", "fixed-order", "relaunch", "relaunch-move")


def run_point(point: Point, args: argparse.Namespace, seed: int) -> dict[str, np.ndarray]:
    """Per policy (and per fixed placement, "fixed:NAME"): rows of (cost per unit, finish hours)."""
    env = build(point, args)
    work = args.work_hours * HOUR  # units: reference-speed seconds
    horizon = 60 * work
    out: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.replications):
        world = draw_world(env, point, seed * 1000 + rep, horizon)
        runs = {
            "single": run_fixed(
                env, world, next(p for p in env.placements if p.name == "A/large/SPOT"), work
            ),
            "fixed-order": run_fixed_order(env, world, work),
            "relaunch": run_relaunch(env, world, work, args, args.move_premium),
            "relaunch-move": run_relaunch(env, world, work, args, math.inf),
        }
        for p in env.placements:
            runs[f"fixed:{p.name}"] = run_fixed(env, world, p, work)
        for name, run in runs.items():
            out.setdefault(name, []).append((run.dollars / work * HOUR, run.wall / HOUR))
    return {name: np.array(rows) for name, rows in out.items()}


def summarise(point: Point, res: dict[str, np.ndarray]) -> dict[str, object]:
    fixed = {k: v for k, v in res.items() if k.startswith("fixed:")}
    best = min(fixed, key=lambda k: fixed[k][:, 0].mean())
    mean = {k: res[k].mean(axis=0) for k in POLICIES}
    mean["hindsight"] = fixed[best].mean(axis=0)
    paired = res["relaunch"][:, 0] / res["fixed-order"][:, 0]
    return {
        "point": point,
        "mean": mean,
        "best": best.removeprefix("fixed:"),
        "cost_ratio": mean["relaunch"][0] / mean["fixed-order"][0],
        "cost_ratio_se": paired.std(ddof=1) / math.sqrt(len(paired)),
        "finishes": mean["relaunch"][1] <= mean["fixed-order"][1],
        "reach": mean["hindsight"][0] / mean["relaunch"][0],
        "move_ratio": mean["relaunch-move"][0] / mean["fixed-order"][0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replications", type=int, default=40)
    parser.add_argument("--seed", type=int, default=5100)
    parser.add_argument("--work-hours", type=float, default=100.0)
    parser.add_argument("--change-at", type=float, default=40.0, help="hours of wall time")
    parser.add_argument("--stall", type=float, default=60.0, help="C, seconds (W = 2C)")
    parser.add_argument("--restart", type=float, default=300.0)
    parser.add_argument("--checkpoint-gb", type=float, default=200.0)
    parser.add_argument(
        "--spell-prior",
        type=float,
        default=PRIOR_STOCKOUT_SECONDS / HOUR,
        help="hours a refusal is taken to last (the controller's prior)",
    )
    parser.add_argument(
        "--stockout-half-life",
        type=float,
        default=DEFAULT_HALF_LIFE_SECONDS / HOUR,
        help="hours: watched stockouts weigh half as much per this (the controller's default; inf: never)",
    )
    parser.add_argument(
        "--move-premium",
        type=float,
        default=REFUSAL_MOVE_PREMIUM,
        help="relaunch: after a refusal, move if the best other costs at most this share more per unit "
        "(or if the wait is worth more, see placement.worth_moving; default the core's; the "
        "relaunch-move lane always moves, as fixed-order does)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (grid points in parallel)")
    parser.add_argument("--only", type=int, action="append", help="grid point indices to run")
    args = parser.parse_args()
    grid = [
        Point(spell, up, share, region_a, small_speed)
        for small_speed in (0.45, 0.25)
        for spell in (0.5, 4.0)
        for up, share in ((6.0, 0.35), (2.0, 0.45))
        for region_a in ("worse", "better")
    ]
    chosen = [(i, p) for i, p in enumerate(grid) if not args.only or i in args.only]
    print(
        f"{len(chosen)} points x {args.replications} replications, {args.work_hours:g} h of work, "
        f"C={args.stall:g}s, R={args.restart:g}s, checkpoint {args.checkpoint_gb:g} GB, seed {args.seed}, "
        f"relaunch move premium {args.move_premium:g}; cost: $ per hour of reference-speed training, "
        "finish: hours (means over replications)"
    )
    print(
        f"{'#':>2} {'spell':>5} {'up':>4} {'spot$':>5} {'A':>6} {'small':>5} | {'single':>13} {'fixed-order':>13} "
        f"{'relaunch':>13} {'rl-move':>13} {'hindsight':>13} | {'rl/fo cost':>11} {'finish<=fo':>10} "
        f"{'hs/rl':>6} {'move/fo':>7}  hindsight placement"
    )
    started = time.perf_counter()
    seeds = [args.seed + i for i, _ in chosen]
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as pool:
        mapper = pool.map if pool is not None else map  # type: ignore[union-attr]
        results = mapper(run_point, [p for _, p in chosen], [args] * len(chosen), seeds)
        rows = []
        for (i, point), res in zip(chosen, results):
            row = summarise(point, res)
            rows.append(row)
            mean = row["mean"]
            cells = " ".join(
                f"{mean[k][0]:6.1f}/{mean[k][1]:5.1f}h"  # type: ignore[index]
                for k in ("single", "fixed-order", "relaunch", "relaunch-move", "hindsight")
            )
            print(
                f"{i:>2} {point.label()} | {cells} | {100 * row['cost_ratio']:6.1f}%±{100 * row['cost_ratio_se']:.1f} "  # type: ignore[operator]
                f"{'yes' if row['finishes'] else 'NO':>10} {100 * row['reach']:5.1f}% {100 * row['move_ratio']:6.1f}%  "  # type: ignore[operator]
                f"{row['best']}",
                flush=True,
            )
    n = len(rows)
    no_costlier = sum(bool(r["cost_ratio"] <= 1.0) for r in rows)  # type: ignore[operator]
    cheaper = sum(bool(r["cost_ratio"] <= 0.85) for r in rows)  # type: ignore[operator]
    finish = sum(bool(r["finishes"]) for r in rows)
    reach = sum(bool(r["reach"] >= 0.95) for r in rows)  # type: ignore[operator]
    print(f"\nrelaunch (lowest cost, move premium {args.move_premium:g}) against fixed-order failover:")
    print(
        f"  no costlier at every point:        {no_costlier}/{n}  {'MET' if no_costlier == n else 'NOT MET'}"
    )
    print(f"  >= 15 % cheaper at half or more:   {cheaper}/{n}  {'MET' if 2 * cheaper >= n else 'NOT MET'}")
    print(f"  finishes no later at >= 90 %:      {finish}/{n}  {'MET' if finish >= 0.9 * n else 'NOT MET'}")
    print(f"  >= 95 % of hindsight-best cost:    {reach}/{n}  {'MET' if reach == n else 'NOT MET'}")
    print(f"{time.perf_counter() - started:.0f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
