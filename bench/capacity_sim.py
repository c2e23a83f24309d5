"""Cost and finish time of a long job whose attempts may run in several places (a benchmark script).

One job (`--work-hours` of training at the reference speed) over 3 regions x 2 machine shapes x
3 strategies (18 placements). The attempt model is bench/goodput_sim.py's (a restart R, then tau
seconds of training and a C-second stall per checkpoint, committed W later; a reclaim whose
emergency save commits loses nothing, otherwise back to the newest commit), with the interval
each attempt uses from `choose_interval` on what the policy learned of that placement's class.

Each placement has its own:
  reclaims    Spot: Poisson, mean M per region and shape; region A's changes at `--change-at`
              hours of wall time (to M/30 by default: one per hour; `--calmer` reverses it).
              FLEX_START and STANDARD: only crashes, one per 7 days on average.
  stockouts   Spot: alternating spells, capacity there (exponential, mean `up`) and gone (mean
              `--spell-hours`, hours). A try during a spell is refused (60 s).
  queueing    FLEX_START: a wait per attempt (exponential, mean per region), then the whole gang;
              its capacity is held at most 7 days.
  price       dollars per node hour (Spot and FLEX_START as a share of on-demand).
Moving to another region than the latest checkpoint's costs a copy (seconds and dollars).
Common random numbers: per replication, each placement's spells, lifetimes, emergency saves and
queue waits are drawn once and shared by every policy.

Policies:
  single      today: Spot in region A on the large shape, waiting out stockouts (a retry every
              60 s + 120 s capacity backoff)
  fixed-order SkyPilot's failover: the placements in order of hourly price (Spot ones, then
              on-demand), each attempt walks the list from the top; a refusal costs 60 s
  relaunch    `controller.core.placement.choose` (lowest cost) on what it observed: per
              placement the discounted rate book, waits, speed; a refusal moves it on at once
  hindsight   the single placement (waiting out its stockouts) with the lowest mean cost per
              unit at that grid point, known only after the fact

    python bench/capacity_sim.py --replications 40 --seed 5100
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.core.checkpoint_interval import (
    HOUR,
    EndingKind,
    RateEstimate,
    choose_interval,
    prior_for,
)
from controller.core.placement import (
    FLEX_START_MAX_RUN_SECONDS,
    Evidence,
    JobCosts,
    Objective,
    Placement,
    Pool,
    Transfer,
    choose,
)

REGIONS = ("A", "B", "C")
# (machine type, accelerator, per node, nodes, units per second, on-demand $ per node hour)
SHAPES = {
    "large": ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 2, 1.0, 88.0),
    "small": ("a2-highgpu-8g", "NVIDIA_A100_40GB", 8, 2, 0.45, 29.4),
}
TRY_SECONDS, BACKOFF_SECONDS = 60.0, 120.0
CRASH_MTBF = 7 * 24 * HOUR
DRAWS = 4000


@dataclass(frozen=True)
class Point:
    spell_hours: float  # mean stockout spell
    up_hours: float  # mean spell with capacity
    spot_share: float  # Spot price / on-demand
    calmer: bool  # region A's change: False = gets worse, True = gets better


@dataclass
class World:
    """One replication's draws, per placement (shared by every policy)."""

    spells: dict[str, list[tuple[float, float]]]  # stockout intervals (start, end), wall seconds
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
        for shape, (machine, acc, per, nodes, units, od_price) in SHAPES.items():
            for strategy, share in (("SPOT", point.spot_share), ("FLEX_START", 0.6), ("STANDARD", 1.0)):
                name = f"{region}/{shape}/{strategy}"
                # Regions differ a little in price (B the cheapest) and in Spot reclaims.
                price = od_price * share * (1.0, 0.93, 1.05)[r_index]
                placements.append(Placement(name, region, (Pool(machine, acc, per, nodes),), strategy, price))
                speed[name] = units
                base = (20.0, 6.0, 12.0)[r_index] * HOUR * (1.0 if shape == "large" else 1.5)
                after = (
                    base * 30 if (region == "A" and point.calmer) else base / 30 if region == "A" else base
                )
                if region == "A" and point.calmer:
                    base, after = base / 30, base
                mtbf[name] = (base, after)
                queue_mean[name] = (2.0, 4.0, 1.0)[r_index] * HOUR
    costs = JobCosts(args.stall, 2 * args.stall, args.restart, args.work_hours * HOUR)
    copy = Transfer(checkpoint_region=None, checkpoint_bytes=args.checkpoint_gb * 1e9)
    return Env(tuple(placements), speed, mtbf, queue_mean, args.change_at * HOUR, 0.5, costs, copy)


def draw_world(env: Env, point: Point, seed: int, horizon: float) -> World:
    spells, units, saved, queue = {}, {}, {}, {}
    for index, p in enumerate(env.placements):
        rng = np.random.default_rng([seed, index])
        out, t = [], rng.exponential(point.up_hours * HOUR)
        while t < horizon and p.strategy == "SPOT":
            end = t + rng.exponential(point.spell_hours * HOUR)
            out.append((t, end))
            t = end + rng.exponential(point.up_hours * HOUR)
        spells[p.name] = out
        units[p.name] = rng.exponential(1.0, DRAWS)
        saved[p.name] = rng.random(DRAWS) < env.save_success
        queue[p.name] = rng.exponential(env.queue_mean[p.name], DRAWS)
    return World(spells, units, saved, queue)


def stocked_out_until(world: World, name: str, t: float) -> float | None:
    for start, end in world.spells[name]:
        if start <= t < end:
            return end
        if start > t:
            return None
    return None


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
    refused_at: dict[str, float] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)


def attempt(env: Env, world: World, run: Run, p: Placement, work_total: float) -> None:
    """Run one attempt on `p` from `run.wall` (capacity is there); update the run."""
    costs = env.costs
    if run.region is not None and run.region != p.region:
        run.wall += env.copy.seconds(p.region) if env.copy.checkpoint_region is None else 0.0
        run.wall += env.copy.checkpoint_bytes / env.copy.bytes_per_second
        run.dollars += env.copy.checkpoint_bytes / 2**30 * env.copy.dollars_per_gib
    k = run.used.get(p.name, 0)
    run.used[p.name] = k + 1
    if p.strategy == "FLEX_START":
        wait = float(world.queue[p.name][k])
        run.wall += wait
        run.waits[p.name] = 0.5 * run.waits.get(p.name, wait) + 0.5 * wait
    estimate = run.rates.get(p.name) or prior_for(p.capacity_class())
    tau = choose_interval(
        estimate,
        costs.checkpoint_stall,
        60.0,
        24 * HOUR,
        restart_cost=costs.restart,
        write_seconds=costs.checkpoint_write,
    )
    life = lifetime(env, p, float(world.units[p.name][k]), run.wall)
    saved = bool(world.saved[p.name][k])
    if p.strategy == "FLEX_START" and life > FLEX_START_MAX_RUN_SECONDS:
        life, saved = FLEX_START_MAX_RUN_SECONDS, True
    speed = env.speed[p.name]
    c, w, r = costs.checkpoint_stall, costs.checkpoint_write, costs.restart
    remaining = (work_total - run.units) / speed  # training seconds on this placement
    finish = remaining + c * (math.ceil(remaining / tau) - 1.0)
    working = max(life - r, 0.0)
    if finish <= working:
        held, gained, kind, trained = r + finish, remaining, EndingKind.SUCCEEDED, finish
    else:
        cycle = tau + c
        full = math.floor(working / cycle)
        computed = full * tau + min(working - full * cycle, tau)
        committed = math.floor((working - w) / cycle) if working >= w else 0
        gained, held, trained = (computed if saved else committed * tau), life, working
        kind = (
            EndingKind.BEFORE_TRAINING
            if working <= 0.0
            else EndingKind.RECLAIM_SAVED
            if saved
            else EndingKind.RECLAIM_UNSAVED
        )
    run.wall += held
    run.dollars += held / HOUR * p.nodes * p.price_per_node_hour
    run.units = work_total if kind is EndingKind.SUCCEEDED else run.units + gained * speed
    run.region = p.region
    run.rates[p.name] = estimate.observe(kind, trained)
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
    order = sorted(
        (p for p in env.placements if p.strategy != "FLEX_START"),
        key=lambda p: (p.strategy != "SPOT", p.nodes * p.price_per_node_hour),
    )
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


def run_relaunch(env: Env, world: World, work: float, spell_prior: float) -> Run:
    run = Run()
    while run.units < work:
        refused: set[str] = set()
        while True:
            evidence = {}
            for p in env.placements:
                wait = run.waits.get(p.name)
                if p.name in run.refused_at:
                    # Spells are memoryless: a refusal says "gone for about a spell", fading with time.
                    since = run.wall - run.refused_at[p.name]
                    wait = spell_prior * math.exp(-since / spell_prior)
                evidence[p.name] = Evidence(run.rates.get(p.name), wait, run.measured.get(p.name))
            costs = JobCosts(
                env.costs.checkpoint_stall, env.costs.checkpoint_write, env.costs.restart, work - run.units
            )
            transfer = Transfer(run.region, env.copy.checkpoint_bytes)
            choice = choose(
                env.placements, evidence, costs, transfer, Objective.LOWEST_COST, refused=frozenset(refused)
            )
            p = next(q for q in env.placements if q.name == choice.chosen)
            if choice.wait:
                run.wall += BACKOFF_SECONDS
                refused.clear()
                continue
            if p.strategy == "SPOT" and stocked_out_until(world, p.name, run.wall) is not None:
                run.wall += TRY_SECONDS
                run.refused_at[p.name] = run.wall
                refused.add(p.name)
                if len(refused) == len(env.placements):
                    run.wall += BACKOFF_SECONDS
                    refused.clear()
                continue
            run.refused_at.pop(p.name, None)
            attempt(env, world, run, p, work)
            break
    return run


def run_point(point: Point, args: argparse.Namespace, seed: int) -> dict[str, np.ndarray]:
    env = build(point, args)
    work = args.work_hours * HOUR  # units: reference-speed seconds
    horizon = 60 * work
    out: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.replications):
        world = draw_world(env, point, seed * 1000 + rep, horizon)
        runs = {
            "single": run_fixed(env, world, env.placements[0], work),
            "fixed-order": run_fixed_order(env, world, work),
            "relaunch": run_relaunch(env, world, work, args.spell_prior * HOUR),
        }
        for p in env.placements:
            runs[f"fixed:{p.name}"] = run_fixed(env, world, p, work)
        for name, run in runs.items():
            out.setdefault(name, []).append((run.dollars / work * HOUR, run.wall / HOUR))
    return {name: np.array(rows) for name, rows in out.items()}


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
    parser.add_argument("--spell-prior", type=float, default=2.0, help="hours a refusal is taken to last")
    args = parser.parse_args()
    grid = [
        Point(spell, up, share, calmer)
        for spell in (0.5, 4.0)
        for up, share in ((6.0, 0.35), (2.0, 0.45))
        for calmer in (False, True)
    ]
    print(
        f"{len(grid)} points x {args.replications} replications, {args.work_hours:g} h of work, C={args.stall:g}s, "
        f"R={args.restart:g}s, checkpoint {args.checkpoint_gb:g} GB, seed {args.seed}; cost $ per hour of "
        "reference-speed training, finish in hours (means)"
    )
    print(
        f"{'spell':>5} {'up':>4} {'spot$':>5} {'A':>6} | {'single':>13} {'fixed-order':>13} {'relaunch':>13} "
        f"{'hindsight':>13} | {'rl/fo cost':>10} {'rl finish<=fo':>13} {'hs/rl cost':>10}"
    )
    started = time.perf_counter()
    cheaper_15 = no_costlier = finish_ok = reach_95 = 0
    for i, point in enumerate(grid):
        res = run_point(point, args, args.seed + i)
        fixed = {k: v for k, v in res.items() if k.startswith("fixed:")}
        best = min(fixed, key=lambda k: fixed[k][:, 0].mean())
        mean = {k: res[k].mean(axis=0) for k in ("single", "fixed-order", "relaunch")}
        mean["hindsight"] = fixed[best].mean(axis=0)
        ratio = mean["relaunch"][0] / mean["fixed-order"][0]
        diff = res["relaunch"][:, 0] / res["fixed-order"][:, 0]
        se = diff.std(ddof=1) / math.sqrt(len(diff))
        finishes = mean["relaunch"][1] <= mean["fixed-order"][1]
        reach = mean["hindsight"][0] / mean["relaunch"][0]
        no_costlier += ratio <= 1.0
        cheaper_15 += ratio <= 0.85
        finish_ok += finishes
        reach_95 += reach >= 0.95
        cells = " ".join(
            f"{mean[k][0]:6.1f}/{mean[k][1]:5.1f}h"
            for k in ("single", "fixed-order", "relaunch", "hindsight")
        )
        print(
            f"{point.spell_hours:>5g} {point.up_hours:>4g} {point.spot_share:>5.2f} {'better' if point.calmer else 'worse':>6} | "
            f"{cells} | {100 * ratio:6.1f}%±{100 * se:.1f} {'yes' if finishes else 'NO':>13} {100 * reach:9.1f}%  ({best})",
            flush=True,
        )
    n = len(grid)
    print(
        f"\nrelaunch no costlier than fixed-order at {no_costlier}/{n} points; >=15% cheaper at {cheaper_15}/{n}; "
        f"finishes no later at {finish_ok}/{n}; >=95% of hindsight-best cost at {reach_95}/{n}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
