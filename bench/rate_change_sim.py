"""Does the adaptive interval follow a reclaim rate that changes? (a benchmark script, not a test)

bench/goodput_sim.py's job and models, with the "phased" reclaim process: Poisson reclaims with
one mean time between reclaims until `--change-at` hours of wall time, another from then on
(default: one per 30 h, then one per hour at 100 h; `--mirror` swaps them: busy, then calm).
Common random numbers: every policy sees the same draws per (replication, attempt).

Policies:
  oracle      knows the phase each attempt starts in and its true rates: the model's optimum for
              them (`best_interval` on an estimate concentrated at the true rates)
  best fixed  the best fixed interval on goodput_sim's grid, chosen on the same replications
  adaptive    `choose_interval` on the estimate the lane learned, forgetting old evidence with the
              priors' half-life (controller/core/checkpoint_interval.py, "Forgetting")
  never       the same, never forgetting (the estimator before it forgot)
The paired standard error is that of adaptive minus oracle, per replication, over the oracle's mean.

    python bench/rate_change_sim.py --replications 160 --seed 9100 --jobs 2
    python bench/rate_change_sim.py --replications 160 --seed 9100 --mirror
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import goodput_sim as gs

from controller.core.checkpoint_interval import (
    HOUR,
    SPOT_PRIOR,
    RateEstimate,
    best_interval,
)


def oracle_policy(setting: gs.Setting) -> gs.Policy:
    """The interval the model picks when it knows the phase's rates exactly."""
    memo: dict[float, float] = {}

    def policy(_estimate: RateEstimate, wall: float) -> float:
        mtbf = setting.mtbf_at(wall)
        if mtbf not in memo:
            weight = 1e6  # endings: a posterior this narrow is the true rate
            lost = 1.0 - setting.save_success
            known = RateEstimate(
                alpha=weight * lost,
                beta=weight * mtbf,
                weighted_endings=0.0,
                weighted_exposure=0.0,
                weighted_saved=weight * setting.save_success,
            )
            tau = best_interval(
                known,
                setting.checkpoint_cost,
                restart_cost=setting.restart_cost,
                write_seconds=setting.write_seconds,
                nodes=1,
            )
            memo[mtbf] = min(max(tau, gs.ADAPTIVE_MIN), gs.ADAPTIVE_MAX)
        return memo[mtbf]

    return policy


def run(
    setting: gs.Setting, replications: int, seed: int, prior: RateEstimate, never: bool = True
) -> dict[str, object]:
    centre = gs.closed_form_interval(setting)
    grid = centre * 2.0 ** (np.arange(-24, 25) / 8.0)  # a factor 8 either side of the centre
    n_fixed = len(grid)
    reps = np.arange(replications)
    # Lanes are independent: leaving the never-forgetting ones out changes no other figure.
    names = ("oracle", "adaptive", "never") if never else ("oracle", "adaptive")
    lane_rep = np.concatenate([np.repeat(reps, n_fixed), *([reps] * len(names))])
    fixed_tau = np.concatenate([np.tile(grid, replications), np.full(len(names) * replications, np.nan)])
    first = n_fixed * replications
    adaptive = gs.adaptive_policy(setting)
    makers = {"oracle": oracle_policy(setting), "adaptive": adaptive, "never": adaptive}
    policies: dict[int, gs.Policy] = {}
    for k, name in enumerate(names):
        policies |= {first + k * replications + i: makers[name] for i in range(replications)}
    never_prior = replace(prior, half_life_seconds=math.inf)
    never_priors = {first + 2 * replications + i: never_prior for i in range(replications) if never}
    attempts = int(3 * setting.work_seconds / min(setting.mtbf, setting.mtbf_after)) + 100
    while True:
        env = gs.make_environment(setting, replications, seed, attempts)
        try:
            out = gs.simulate(setting, env, lane_rep, fixed_tau, policies, prior, never_priors)
            break
        except gs.OutOfAttempts:
            attempts *= 2
    per_fixed = out.goodput[:first].reshape(replications, n_fixed)
    best_index = int(np.argmax(per_fixed.mean(axis=0)))
    lanes = {
        name: out.goodput[first + k * replications : first + (k + 1) * replications]
        for k, name in enumerate(names)
    }
    oracle = lanes["oracle"]
    result: dict[str, object] = {
        "best_fixed": float(per_fixed[:, best_index].mean()),
        "best_tau": float(grid[best_index]),
        "best_at_edge": best_index in (0, n_fixed - 1),
    }
    for name, runs in lanes.items():
        result[name] = float(runs.mean())
        diff = runs - oracle
        result[f"{name}_se_vs_oracle"] = float(diff.std(ddof=1) / math.sqrt(replications)) / float(
            oracle.mean()
        )
        diff_best = runs - per_fixed[:, best_index]
        result[f"{name}_se_vs_best"] = float(diff_best.std(ddof=1) / math.sqrt(replications)) / float(
            per_fixed[:, best_index].mean()
        )
    # Median interval of the adaptive lanes' last attempts (where the second phase's rate is right).
    taus = [out.taus[first + replications + i] for i in range(replications)]
    result["adaptive_last_tau"] = float(np.median([t[-1] for t in taus]))
    result["oracle_taus"] = sorted({round(t) for t in out.taus[first][:1] + out.taus[first][-1:]})
    return result


def _run_star(args: tuple[gs.Setting, int, int, RateEstimate, bool]) -> dict[str, object]:
    return run(*args)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replications", type=int, default=40)
    parser.add_argument("--seed", type=int, default=9100, help="fresh seeds: not goodput_sim's 20261123")
    parser.add_argument("--mirror", action="store_true", help="busy (1 h) first, then calm (30 h)")
    parser.add_argument("--calm-hours", type=float, default=30.0)
    parser.add_argument("--busy-hours", type=float, default=1.0)
    parser.add_argument("--change-at", type=float, default=100.0, help="hours of wall time")
    parser.add_argument("--work-hours", type=float, default=200.0)
    parser.add_argument("--costs", default="60,300,900", help="C values, seconds")
    parser.add_argument("--saves", default="0,0.5", help="emergency save success probabilities")
    parser.add_argument("--half-life-hours", type=float, default=SPOT_PRIOR.half_life_seconds / HOUR)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (rows run in parallel)")
    parser.add_argument(
        "--without-never",
        action="store_true",
        help="leave out the never-forgetting lanes (a third of the work)",
    )
    args = parser.parse_args()
    before, after = (args.busy_hours, args.calm_hours) if args.mirror else (args.calm_hours, args.busy_hours)
    prior = replace(SPOT_PRIOR, half_life_seconds=args.half_life_hours * HOUR)
    print(
        f"rate change: M {before:g} h -> {after:g} h at {args.change_at:g} h wall, {args.work_hours:g} h of work, "
        f"{args.replications} replications, seed {args.seed}, half-life {args.half_life_hours:g} h"
    )
    print(
        f"{'C':>5} {'save':>4} | {'oracle':>6} {'best':>6} {'@tau':>6} {'adapt':>6} {'never':>6} | "
        f"{'ad/orc':>7} {'±se':>5} {'ad/best':>7} {'±se':>5} {'nv/orc':>7} | last tau adapt / oracle"
    )
    started = time.perf_counter()
    worst_oracle, worst_best = math.inf, math.inf
    rows = [(float(c), float(s)) for c in args.costs.split(",") for s in args.saves.split(",")]
    work = [
        (
            gs.Setting(
                process="phased",
                mtbf=before * HOUR,
                mtbf_after=after * HOUR,
                change_at=args.change_at * HOUR,
                checkpoint_cost=cost,
                save_success=save,
                write_seconds=2.0 * cost,
                restart_cost=300.0,
                stockout_prob=0.3,
                stockout_mean=900.0,
                work_seconds=args.work_hours * HOUR,
            ),
            args.replications,
            args.seed + i,  # each row its own seed, whatever the number of workers
            prior,
            not args.without_never,
        )
        for i, (cost, save) in enumerate(rows)
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as pool:
        results = pool.map(_run_star, work) if pool else map(_run_star, work)
        for (cost, save), r in zip(rows, results):
            o, b, a, n = (float(r.get(k, math.nan)) for k in ("oracle", "best_fixed", "adaptive", "never"))  # type: ignore[arg-type]
            worst_oracle, worst_best = min(worst_oracle, a / o), min(worst_best, a / b)
            print(
                f"{cost:>5.0f} {save:>4.1f} | {o:6.4f} {b:6.4f} {gs._fmt_tau(float(r['best_tau'])):>5}{'*' if r['best_at_edge'] else ' '}"  # type: ignore[arg-type]
                f"{a:6.4f} {n:6.4f} | {100 * a / o:6.2f}% {100 * float(r['adaptive_se_vs_oracle']):4.2f} "  # type: ignore[arg-type]
                f"{100 * a / b:6.2f}% {100 * float(r['adaptive_se_vs_best']):4.2f} {100 * n / o:6.2f}% | "  # type: ignore[arg-type]
                f"{gs._fmt_tau(float(r['adaptive_last_tau']))} / {r['oracle_taus']}",  # type: ignore[arg-type]
                flush=True,
            )
    print(
        f"worst adaptive/oracle {100 * worst_oracle:.2f}%, worst adaptive/best fixed {100 * worst_best:.2f}%; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
