"""Goodput of checkpoint-interval policies under simulated reclaims (a benchmark script, not a test).

A discrete-event simulation of one long job (200 h of training by default) on capacity that gets
reclaimed. Every attempt starts with a restart cost R (start-up, restore) and then alternates
tau seconds of training with a checkpoint: a C-second blocking stall, then an asynchronous write
that commits W seconds after the stall ends (training goes on meanwhile). When the attempt is
reclaimed, the emergency save commits with probability `save_success` (then nothing is lost);
otherwise everything since the newest *committed* checkpoint is lost. Before each new attempt
there may be a stockout wait. Goodput = work / total wall time (waits, restarts, stalls and lost
work all count against it).

Reclaim processes (how long an attempt holds its machines before it is reclaimed, with mean M):
  poisson     exponential lifetimes (memoryless)
  weibull0.7  Weibull shape 0.7: young machines are reclaimed more often (decreasing hazard)
  weibull1.5  Weibull shape 1.5: old machines are reclaimed more often (increasing hazard)
  bursty      zone-wide bursts: a two-state Markov chain over attempts; in a burst (half of the
              attempts, runs of 5 on average) lifetimes have mean M/10, in calm periods 1.9 M, so
              reclaims arrive in clusters of quick successive hits.
Random numbers are drawn per (replication, attempt number) and shared by every policy (common
random numbers), so differences between policies are not drowned by the noise of the reclaims.

Policies compared at each grid point:
  default     a fixed 30 min of training between checkpoints (what a user typically writes:
              `--checkpoint-every-seconds 1800`, or the steps that take about that long)
  best fixed  the best fixed interval on a grid in steps of 2^(1/8) (9 %) from 1/4 to 4 times
              Daly's interval for the true rate, widened on a side (up to 1/64 .. 64 times) while
              the best sits on that edge; chosen on the same replications
  closed      Daly's interval with the true long-run rate of work-losing endings
  adaptive    `controller.core.checkpoint_interval.choose_interval`: starts from the Spot prior,
              updates the estimate after every ending (work-losing, saved reclaim or the final
              success, each with its training time as exposure; an ending during the restart
              teaches nothing) and picks the interval of each new attempt from the rates and the
              replay of the last 128 attempt lifetimes it saw (what a controller observes: never
              the process or its parameters); knows C, W and R as the controller would measure
              them; min 60 s, max 24 h
  const-haz   the same estimate with its lifetimes dropped: the constant-hazard choice from the
              rates alone (what the adaptive policy was before it kept lifetimes), to show what the
              lifetimes buy

    python bench/goodput_sim.py --quick --jobs 2   # 32 settings
    python bench/goodput_sim.py --jobs 2           # 192 settings: the M = 1 h points dominate
    python bench/goodput_sim.py --only "bursty 30h 900s" --only "weibull1.5 1h"   # selected rows

Measured figures are in bench/README.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.core.checkpoint_interval import (
    DEFAULT_HALF_LIFE_SECONDS,
    HOUR,
    SPOT_PRIOR,
    EndingKind,
    RateEstimate,
    choose_interval,
    daly_interval,
)

DEFAULT_INTERVAL = 1800.0
ADAPTIVE_MIN, ADAPTIVE_MAX = 60.0, 24 * HOUR
PROCESSES = ("poisson", "weibull0.7", "weibull1.5", "bursty", "none")
BURST_SHARE, BURST_RUN, BURST_SPEEDUP = 0.5, 5.0, 10.0


@dataclass(frozen=True)
class Setting:
    process: str
    mtbf: float  # mean on-machine time between reclaims, seconds
    checkpoint_cost: float  # C: blocking stall, seconds
    save_success: float  # probability that the emergency save on a reclaim commits
    write_seconds: float  # W: from the end of the stall to the commit
    restart_cost: float  # R: start-up and restore at the start of every attempt
    stockout_prob: float  # chance that a new attempt first waits for capacity
    stockout_mean: float  # mean of that wait (exponential), seconds
    work_seconds: float = 200 * HOUR
    # process "phased": Poisson reclaims with mean `mtbf` until `change_at` seconds of wall time,
    # with mean `mtbf_after` from then on (the rate a controller's estimate has to follow).
    change_at: float = math.inf
    mtbf_after: float = 0.0

    @property
    def work_losing_rate(self) -> float:
        """Long-run work-losing endings per on-machine second (renewal-reward: (1 - s) / M)."""
        if self.process == "none":
            return 0.0
        if self.process == "phased":  # between the phases (the centre of the fixed grid)
            return (1.0 - self.save_success) / math.sqrt(self.mtbf * self.mtbf_after)
        return (1.0 - self.save_success) / self.mtbf

    def mtbf_at(self, wall: float) -> float:
        """The mean time to a reclaim for an attempt starting at `wall` (a phase's, for the oracle)."""
        return self.mtbf_after if self.process == "phased" and wall >= self.change_at else self.mtbf


@dataclass(frozen=True)
class Environment:
    """Per (replication, attempt): reclaim lifetime, whether the emergency save commits, stockout wait.

    The arrays hold the first attempts of every replication: all of them, unless `attempts` says
    more were drawn; then `rows` gives a replication's whole row, drawn again from the generator's
    state at its start (a few fixed intervals far from the best need millions of attempts where
    reclaims are frequent, more than fit in memory for every replication at once)."""

    lifetimes: np.ndarray
    saved: np.ndarray
    waits: np.ndarray
    attempts: int = 0  # attempts drawn per replication; 0: the arrays' width
    rows: Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def drawn(self) -> int:
        return self.attempts or self.lifetimes.shape[1]

    def row(self, replication: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lifetimes, saves and waits of every attempt drawn for one replication."""
        if self.rows is None:
            return self.lifetimes[replication], self.saved[replication], self.waits[replication]
        return self.rows(replication)


# Above this many (replication, attempt) cells an environment keeps only its first HEAD_ATTEMPTS
# attempts per replication in memory. The draws are the same either way: numpy's generator fills
# an array element by element, so drawing a (replications, attempts) array row by row, from the
# state each row starts at, gives the same numbers.
STREAM_CELLS = 1 << 24
HEAD_ATTEMPTS = 1 << 14


def make_environment(setting: Setting, replications: int, seed: int, attempts: int) -> Environment:
    if replications * attempts > STREAM_CELLS and setting.process != "bursty":
        return _streamed_environment(setting, replications, seed, attempts)
    rng = np.random.default_rng(seed)
    shape = (replications, attempts)
    m = setting.mtbf
    if setting.process == "none":
        lifetimes = np.full(shape, 1e18)  # never reclaimed (finite, to keep the arithmetic clean)
    elif setting.process == "poisson":
        lifetimes = rng.exponential(m, shape)
    elif setting.process == "phased":
        # Unit exponentials: `simulate` turns each into a lifetime from the attempt's start time.
        lifetimes = rng.exponential(1.0, shape)
    elif setting.process.startswith("weibull"):
        k = float(setting.process.removeprefix("weibull"))
        lifetimes = rng.weibull(k, shape) * (m / math.gamma(1.0 + 1.0 / k))
    elif setting.process == "bursty":
        leave = 1.0 / BURST_RUN  # burst -> calm
        enter = leave * BURST_SHARE / (1.0 - BURST_SHARE)  # calm -> burst, so bursts hold BURST_SHARE
        switch = rng.random(shape)
        in_burst = np.empty(shape, dtype=bool)
        state = rng.random(replications) < BURST_SHARE
        for i in range(attempts):
            state = np.where(state, switch[:, i] >= leave, switch[:, i] < enter)
            in_burst[:, i] = state
        burst_mean = m / BURST_SPEEDUP
        calm_mean = (m - BURST_SHARE * burst_mean) / (1.0 - BURST_SHARE)
        lifetimes = rng.exponential(1.0, shape) * np.where(in_burst, burst_mean, calm_mean)
    else:
        raise ValueError(f"unknown process {setting.process}")
    saved = rng.random(shape) < setting.save_success
    waits = np.where(
        rng.random(shape) < setting.stockout_prob, rng.exponential(setting.stockout_mean, shape), 0.0
    )
    waits[:, 0] = 0.0  # the first attempt is submitted onto capacity that is there
    return Environment(lifetimes=lifetimes, saved=saved, waits=waits)


Draw = Callable[[np.random.Generator, int], np.ndarray]


def _streamed_environment(setting: Setting, replications: int, seed: int, attempts: int) -> Environment:
    """`make_environment`'s draws, in its order, a row at a time: the first HEAD_ATTEMPTS of each
    row kept, and the generator's state at each row's start, to draw the whole row again."""
    m = setting.mtbf
    if setting.process not in ("none", "poisson", "phased") and not setting.process.startswith("weibull"):
        raise ValueError(f"no streamed draws for process {setting.process}")

    def life(g: np.random.Generator, n: int) -> np.ndarray:
        if setting.process == "poisson":
            return g.exponential(m, n)
        if setting.process == "phased":
            return g.exponential(1.0, n)
        k = float(setting.process.removeprefix("weibull"))
        return g.weibull(k, n) * (m / math.gamma(1.0 + 1.0 / k))

    def uniform(g: np.random.Generator, n: int) -> np.ndarray:
        return g.random(n)

    def wait(g: np.random.Generator, n: int) -> np.ndarray:
        return g.exponential(setting.stockout_mean, n)

    # In make_environment's order: lifetimes (none drawn for "none"), saves, stockout or not, waits.
    draws: list[Draw | None] = [None if setting.process == "none" else life, uniform, uniform, wait]
    rng = np.random.default_rng(seed)
    head = min(attempts, HEAD_ATTEMPTS)
    states: list[list[dict[str, Any]]] = []
    heads: list[np.ndarray | None] = []
    for draw in draws:
        starts, kept = [], np.empty((replications, head))
        if draw is not None:
            for i in range(replications):
                starts.append(rng.bit_generator.state)
                kept[i] = draw(rng, attempts)[:head]
        states.append(starts)
        heads.append(kept if draw is not None else None)

    def compose(
        life_row: np.ndarray | None, saved_u: np.ndarray, stockout_u: np.ndarray, wait_s: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lifetimes = np.full(saved_u.shape, 1e18) if life_row is None else life_row
        waits = np.where(stockout_u < setting.stockout_prob, wait_s, 0.0)
        waits[..., 0] = 0.0
        return lifetimes, saved_u < setting.save_success, waits

    def rows(replication: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        drawn: list[np.ndarray | None] = []
        for draw, starts in zip(draws, states):
            if draw is None:
                drawn.append(None)
                continue
            g = np.random.Generator(np.random.PCG64())
            g.bit_generator.state = starts[replication]
            drawn.append(draw(g, attempts))
        return compose(*drawn)  # type: ignore[arg-type]

    lifetimes, saved, waits = compose(*heads)  # type: ignore[arg-type]
    return Environment(lifetimes=lifetimes, saved=saved, waits=waits, attempts=attempts, rows=rows)


# (the lane's estimate, the wall-clock seconds since the job began) -> the next attempt's interval
Policy = Callable[[RateEstimate, float], float]


def phased_lifetimes(setting: Setting, unit: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Lifetimes of attempts starting at `start` under a reclaim rate that changes at `change_at`:
    the unit exponential is the integrated hazard at which the reclaim comes."""
    before = np.maximum(setting.change_at - start, 0.0)  # seconds of the first phase still ahead
    hazard_before = before / setting.mtbf
    return np.where(
        unit <= hazard_before,
        unit * setting.mtbf,
        before + (unit - hazard_before) * setting.mtbf_after,
    )


@dataclass(frozen=True)
class AttemptResult:
    """What attempts made of their machines (arrays, or numpy scalars for one attempt)."""

    finish: Any  # seconds after the restart the job would take to finish, uninterrupted
    working: Any  # seconds of the attempt after the restart
    finishes: Any  # the job finished within the attempt
    full: Any  # checkpoint cycles completed
    checkpoints_to_finish: Any
    gained: Any  # seconds of work kept (committed, or saved by the emergency save)
    on_machine: Any  # seconds the attempt held its machines


def kept_work(tau: Any, life: Any, saved: Any, c: float, w_commit: float, r: float) -> tuple[Any, Any, Any]:
    """What an attempt that does not finish the job keeps: (seconds of training after the restart,
    checkpoint cycles completed, seconds of work kept). `run_attempts`' arithmetic, which does not
    depend on the work remaining."""
    working = np.maximum(life - r, 0.0)
    cycle = tau + c
    full = np.floor(working / cycle)
    computed = full * tau + np.minimum(working - full * cycle, tau)
    committed_cycles = np.where(working >= w_commit, np.floor((working - w_commit) / cycle), 0.0)
    gained = np.where(saved, computed, committed_cycles * tau)
    return working, full, gained


def run_attempts(
    remaining: Any, tau: Any, life: Any, saved: Any, c: float, w_commit: float, r: float
) -> AttemptResult:
    """The attempt model: a restart r, then tau seconds of training and a c-second stall per
    checkpoint, each committed w_commit after its stall; an ending after `life` seconds on the
    machines keeps everything when its emergency save commits (`saved`), else back to the newest
    commit. Shared by goodput_sim and capacity_sim."""
    # Time from the end of the restart to the end of the job, if nothing interrupts it: the
    # remaining work plus a stall after every full interval except at the very end.
    ckpts_to_finish = np.ceil(remaining / tau) - 1.0
    finish = remaining + c * ckpts_to_finish
    working, full, gained = kept_work(tau, life, saved, c, w_commit, r)
    finishes = finish <= working
    on_machine = np.where(finishes, r + finish, life)
    return AttemptResult(finish, working, finishes, full, ckpts_to_finish, gained, on_machine)


class OutOfAttempts(Exception):
    """A lane needed more attempts than the environment drew."""


@dataclass
class Outcome:
    goodput: np.ndarray  # per lane
    wall: np.ndarray
    attempts: np.ndarray
    checkpoints: np.ndarray
    taus: list[list[float]]  # per policy lane, the interval of each attempt (empty for fixed lanes)


@dataclass
class _Lanes:
    """Where every lane stands: committed work, wall-clock seconds, attempts made, checkpoints."""

    progress: np.ndarray
    wall: np.ndarray
    attempt: np.ndarray
    checkpoints: np.ndarray


def simulate(
    setting: Setting,
    env: Environment,
    lane_rep: np.ndarray,
    fixed_tau: np.ndarray,
    policies: dict[int, Policy] | None = None,
    prior: RateEstimate = SPOT_PRIOR,
    lane_priors: dict[int, RateEstimate] | None = None,
) -> Outcome:
    """Run every lane (one replication under one policy) to the end of the job.

    `fixed_tau[lane]` is the lane's interval; lanes listed in `policies` instead ask their policy
    for it before each attempt, passing the estimate built from the endings that lane has seen
    (from `prior`, or the lane's own in `lane_priors`). Lanes are independent of each other: the
    fixed ones run first, many attempts at a time (`_run_fixed`), so that one needing more
    attempts than were drawn raises OutOfAttempts before the policies' choices are made; the
    policy lanes then advance one attempt at a time, all together.
    """
    policies = policies or {}
    lanes = len(lane_rep)
    state = _Lanes(
        progress=np.zeros(lanes),  # committed work, seconds
        wall=np.zeros(lanes),
        attempt=np.zeros(lanes, dtype=np.int64),
        checkpoints=np.zeros(lanes, dtype=np.int64),
    )
    tau = fixed_tau.astype(float).copy()
    is_policy = np.zeros(lanes, dtype=bool)
    is_policy[list(policies)] = True
    _run_fixed(setting, env, lane_rep, tau, np.flatnonzero(~is_policy), state)
    taus = _run_policies(setting, env, lane_rep, tau, policies, prior, lane_priors or {}, state)
    return Outcome(
        goodput=setting.work_seconds / state.wall,
        wall=state.wall,
        attempts=state.attempt,
        checkpoints=state.checkpoints,
        taus=[taus.get(lane, []) for lane in range(lanes)],
    )


def _run_policies(
    setting: Setting,
    env: Environment,
    lane_rep: np.ndarray,
    tau: np.ndarray,
    policies: dict[int, Policy],
    prior: RateEstimate,
    lane_priors: dict[int, RateEstimate],
    state: _Lanes,
) -> dict[int, list[float]]:
    """The policy lanes, one attempt at a time, all together (each asks its policy first)."""
    c, w_commit, r = setting.checkpoint_cost, setting.write_seconds, setting.restart_cost
    work = setting.work_seconds
    progress, wall, attempt, checkpoints = state.progress, state.wall, state.attempt, state.checkpoints
    done = np.ones(len(lane_rep), dtype=bool)
    done[list(policies)] = False
    estimates = {lane: lane_priors.get(lane, prior) for lane in policies}
    taus: dict[int, list[float]] = {lane: [] for lane in policies}
    max_attempts, kept = env.drawn, env.lifetimes.shape[1]
    policy_lanes = np.array(sorted(policies), dtype=np.int64)
    position = np.full(len(lane_rep), -1, dtype=np.int64)  # of each lane within `active`
    while not done.all():
        active = np.flatnonzero(~done)
        if attempt[active].max() >= max_attempts:
            raise OutOfAttempts(max_attempts)
        if attempt[active].max() >= kept:
            raise RuntimeError(f"a policy lane needs more than the {kept} attempts an environment keeps")
        asking = policy_lanes[~done[policy_lanes]]
        chosen = [policies[lane](estimates[lane], float(wall[lane])) for lane in asking.tolist()]
        tau[asking] = chosen
        for lane, value in zip(asking.tolist(), chosen):
            taus[lane].append(value)
        reps, idx = lane_rep[active], attempt[active]
        life = env.lifetimes[reps, idx]
        saved = env.saved[reps, idx]
        wall[active] += env.waits[reps, idx]
        if setting.process == "phased":
            life = phased_lifetimes(setting, life, wall[active])
        one = run_attempts(work - progress[active], tau[active], life, saved, c, w_commit, r)
        finish, working, finishes, full = one.finish, one.working, one.finishes, one.full
        ckpts_to_finish, gained, on_machine = one.checkpoints_to_finish, one.gained, one.on_machine
        wall[active] += on_machine
        checkpoints[active] += np.where(finishes, ckpts_to_finish, full).astype(np.int64)
        progress[active] = np.where(finishes, work, progress[active] + gained)
        attempt[active] += 1
        done[active[finishes]] = True
        # As the controller sees it: exposure is training time (after the restart), an ending
        # before training resumed loses nothing and teaches nothing.
        position[active] = np.arange(len(active))
        at = position[asking]
        rows = zip(
            asking.tolist(),
            finishes[at].tolist(),
            finish[at].tolist(),
            working[at].tolist(),
            saved[at].tolist(),
        )
        for lane, finished, finish_s, working_s, was_saved in rows:
            if finished:
                kind, trained = EndingKind.SUCCEEDED, finish_s
            elif working_s <= 0.0:
                kind, trained = EndingKind.BEFORE_TRAINING, 0.0
            elif was_saved:
                kind, trained = EndingKind.RECLAIM_SAVED, working_s
            else:
                kind, trained = EndingKind.RECLAIM_UNSAVED, working_s
            estimates[lane] = estimates[lane].observe(kind, trained)
    return taus


# Cells (lanes x attempts) a step of the fixed lanes works on at most.
_FIXED_CELLS = 1 << 20


def _run_fixed(
    setting: Setting,
    env: Environment,
    lane_rep: np.ndarray,
    tau: np.ndarray,
    lanes: np.ndarray,
    state: _Lanes,
) -> None:
    """The fixed-interval lanes to the end of the job, on the attempts kept in memory, then each
    replication's remaining lanes on its whole row; OutOfAttempts if one needs more than were drawn."""
    source = (env.lifetimes, env.saved, env.waits)
    left = _advance(setting, source, lanes, lane_rep[lanes], env.lifetimes.shape[1], tau, state)
    if not len(left):
        return
    if env.lifetimes.shape[1] >= env.drawn:
        raise OutOfAttempts(env.drawn)
    for rep in np.unique(lane_rep[left]).tolist():
        these = left[lane_rep[left] == rep]
        row = tuple(part[None, :] for part in env.row(rep))
        rest = _advance(setting, row, these, np.zeros(len(these), dtype=np.int64), env.drawn, tau, state)  # type: ignore[arg-type]
        if len(rest):
            raise OutOfAttempts(env.drawn)


def _advance(
    setting: Setting,
    source: tuple[np.ndarray, np.ndarray, np.ndarray],
    lanes: np.ndarray,
    rows: np.ndarray,
    limit: int,
    tau: np.ndarray,
    state: _Lanes,
) -> np.ndarray:
    """Advance fixed lanes (reading row `rows[i]` of `source` for `lanes[i]`) until each finishes
    or has made `limit` attempts; returns those left unfinished at the limit.

    A lane's attempts depend on each other only through the work committed before each (whether
    it finishes) and the wall clock at its start (the phased process's lifetimes): the work each
    keeps, if it does not finish, does not depend on either. So while a lane's lifetimes do not
    depend on its start (any process but "phased"; "phased" once its wall clock is past the
    change), a chunk of its attempts is computed at once: the work kept by each, the running sums
    of committed work and wall clock (np.cumsum adds in order, the same additions as one attempt at
    a time), and the first attempt that finishes. Every figure is the one the attempt-at-a-time
    loop computes, bit for bit."""
    phased = setting.process == "phased"
    done = np.zeros(len(lanes), dtype=bool)
    left = []
    chunk = 8
    while True:
        at_limit = ~done & (state.attempt[lanes] >= limit)
        if at_limit.any():
            left.append(lanes[at_limit])
            done |= at_limit
        going = np.flatnonzero(~done)
        if not len(going):
            break
        # A phased lane whose next attempt may start before the change: one attempt at a time.
        steady = state.wall[lanes[going]] >= setting.change_at if phased else np.ones(len(going), dtype=bool)
        for group, size in ((going[steady], chunk), (going[~steady], 1)):
            if len(group):
                done[group] = _attempts(setting, source, lanes[group], rows[group], size, limit, tau, state)
        chunk = min(2 * chunk, max(8, _FIXED_CELLS // len(going)))
    return np.concatenate(left) if left else np.zeros(0, dtype=np.int64)


def _attempts(
    setting: Setting,
    source: tuple[np.ndarray, np.ndarray, np.ndarray],
    lanes: np.ndarray,
    rows: np.ndarray,
    size: int,
    limit: int,
    tau: np.ndarray,
    state: _Lanes,
) -> np.ndarray:
    """Up to `size` attempts of each lane (fewer at `limit` or when it finishes); which finished."""
    c, w_commit, r = setting.checkpoint_cost, setting.write_seconds, setting.restart_cost
    work = setting.work_seconds
    first = state.attempt[lanes]
    size = int(min(size, limit - first.min()))
    cols = first[:, None] + np.arange(size)
    available = cols < limit
    cols = np.minimum(cols, limit - 1)
    at = rows[:, None]
    unit, saved, waits = source[0][at, cols], source[1][at, cols], source[2][at, cols]
    t = tau[lanes][:, None]
    wall, progress = state.wall[lanes], state.progress[lanes]
    # The first attempt's start exactly; the later ones start later, which changes nothing once
    # past the change (only steady lanes take more than one attempt here).
    life = (
        phased_lifetimes(setting, unit, (wall + waits[:, 0])[:, None])
        if setting.process == "phased"
        else unit
    )
    working, full, gained = kept_work(t, life, saved, c, w_commit, r)
    # Committed work before each attempt (and after the last).
    before = np.cumsum(np.concatenate([progress[:, None], gained], axis=1), axis=1)
    remaining = work - before[:, :size]
    ckpts_to_finish = np.ceil(remaining / t) - 1.0
    finish = remaining + c * ckpts_to_finish
    finishes = (finish <= working) & available
    finished = finishes.any(axis=1)
    taken = np.where(finished, finishes.argmax(axis=1) + 1, available.sum(axis=1))
    on_machine = np.where(finishes, r + finish, life)
    # Wall clock: the wait, then the time on the machines, attempt after attempt.
    clock = np.empty((len(lanes), 2 * size + 1))
    clock[:, 0] = wall
    clock[:, 1::2] = waits
    clock[:, 2::2] = on_machine
    clock = np.cumsum(clock, axis=1)
    index = np.arange(len(lanes))
    counted = np.arange(size) < taken[:, None]
    stalls = np.where(counted, np.where(finishes, ckpts_to_finish, full), 0.0)
    state.checkpoints[lanes] += stalls.astype(np.int64).sum(axis=1)
    state.wall[lanes] = clock[index, 2 * taken]
    state.progress[lanes] = np.where(finished, work, before[index, taken])
    state.attempt[lanes] += taken
    return finished


def adaptive_policy(setting: Setting) -> Policy:
    # choose_interval is pure, so a choice already made for the same estimate is reused: a grid
    # point that is run again on a widened grid (or on more attempts) replays the same adaptive
    # lanes, and the first attempts of every lane start from the same prior.
    memo: dict[RateEstimate, float] = {}

    def policy(estimate: RateEstimate, _wall: float = 0.0) -> float:
        chosen = memo.get(estimate)
        if chosen is None:
            chosen = memo[estimate] = choose_interval(
                estimate,
                setting.checkpoint_cost,
                ADAPTIVE_MIN,
                ADAPTIVE_MAX,
                restart_cost=setting.restart_cost,
                write_seconds=setting.write_seconds,
            )
        return chosen

    return policy


def constant_hazard_policy(setting: Setting) -> Policy:
    """The adaptive policy blind to the lifetimes' shape: rates only (the choice before lifetimes were kept)."""
    adaptive = adaptive_policy(setting)

    def policy(estimate: RateEstimate, _wall: float = 0.0) -> float:
        return adaptive(replace(estimate, lifetimes=()))

    return policy


def closed_form_interval(setting: Setting) -> float:
    rate = setting.work_losing_rate
    if rate <= 0.0:
        return ADAPTIVE_MAX
    return daly_interval(setting.checkpoint_cost, 1.0 / rate)


@dataclass(frozen=True)
class PointResult:
    setting: Setting
    default: float
    best: float
    best_tau: float
    best_at_edge: bool
    closed: float
    closed_tau: float
    adaptive: float
    constant_hazard: float
    adaptive_taus: tuple[float, float]  # median interval of the first and of the last attempts
    diff_se: float  # standard error of the paired (adaptive - best) goodput difference


def run_point(
    setting: Setting, replications: int, seed: int, prior: RateEstimate = SPOT_PRIOR
) -> PointResult:
    centre = closed_form_interval(setting)
    low, high = -16, 16  # the grid spans centre * 2^(k/8): a quarter to four times Daly's interval
    # Made once per point: their memos carry over when the point runs again on a widened grid.
    adaptive, blind = adaptive_policy(setting), constant_hazard_policy(setting)
    while True:
        grid = centre * 2.0 ** (np.arange(low, high + 1) / 8.0)
        res = _run_point_on_grid(setting, replications, seed, grid, centre, prior, adaptive, blind)
        # An optimum on the edge of the grid may lie beyond it: widen that side and run again.
        if res.best_tau == grid[0] and low > -48:
            low -= 16
        elif res.best_tau == grid[-1] and high < 48:
            high += 16
        else:
            return res


def _run_point_on_grid(
    setting: Setting,
    replications: int,
    seed: int,
    grid: np.ndarray,
    centre: float,
    prior: RateEstimate,
    adaptive: Policy,
    blind_policy: Policy,
) -> PointResult:
    expected_attempts = setting.work_seconds / setting.mtbf if setting.process != "none" else 1.0
    attempts = int(3 * expected_attempts) + 100
    fixed = np.concatenate([grid, [DEFAULT_INTERVAL, centre]])
    n_fixed = len(fixed)
    # Lanes: every (replication, fixed interval), then the adaptive lanes, then the const-haz lanes.
    reps = np.arange(replications)
    lane_rep = np.concatenate([np.repeat(reps, n_fixed), reps, reps])
    fixed_tau = np.concatenate([np.tile(fixed, replications), np.full(2 * replications, np.nan)])
    first_policy = n_fixed * replications
    policies: dict[int, Policy] = {first_policy + i: adaptive for i in range(replications)}
    policies |= {first_policy + replications + i: blind_policy for i in range(replications)}
    while True:
        # Every policy runs on the same environment; if a poor one needs more attempts than were
        # drawn, all of them run again on a longer one.
        env = make_environment(setting, replications, seed, attempts)
        try:
            out = simulate(setting, env, lane_rep, fixed_tau, policies, prior)
            break
        except OutOfAttempts:
            attempts *= 2
    per_fixed = out.goodput[:first_policy].reshape(replications, n_fixed)
    means = per_fixed.mean(axis=0)
    best_index = int(np.argmax(means[: len(grid)]))
    adaptive_runs = out.goodput[first_policy : first_policy + replications]
    blind_runs = out.goodput[first_policy + replications :]
    diff = adaptive_runs - per_fixed[:, best_index]
    first_taus = [out.taus[first_policy + i][0] for i in range(replications)]
    last_taus = [out.taus[first_policy + i][-1] for i in range(replications)]
    return PointResult(
        setting=setting,
        default=float(means[len(grid)]),
        best=float(means[best_index]),
        best_tau=float(grid[best_index]),
        best_at_edge=best_index in (0, len(grid) - 1),
        closed=float(means[len(grid) + 1]),
        closed_tau=centre,
        adaptive=float(adaptive_runs.mean()),
        constant_hazard=float(blind_runs.mean()),
        adaptive_taus=(float(np.median(first_taus)), float(np.median(last_taus))),
        diff_se=float(diff.std(ddof=1) / math.sqrt(replications)) if replications > 1 else float("nan"),
    )


def grid_settings(quick: bool, args: argparse.Namespace) -> list[Setting]:
    if quick:
        processes = ["poisson", "weibull0.7", "weibull1.5", "bursty"]
        mtbfs = [1.0, 8.0]
        costs = [30.0, 300.0]
        successes = [0.0, 0.9]
    else:
        processes = ["poisson", "weibull0.7", "weibull1.5", "bursty"]
        mtbfs = [1.0, 3.0, 10.0, 30.0]
        costs = [10.0, 60.0, 300.0, 900.0]
        successes = [0.0, 0.5, 0.9]
    return [
        Setting(
            process=p,
            mtbf=m * HOUR,
            checkpoint_cost=c,
            save_success=s,
            write_seconds=args.write_factor * c,
            restart_cost=args.restart,
            stockout_prob=args.stockout_prob,
            stockout_mean=args.stockout_mean,
            work_seconds=args.work_hours * HOUR,
        )
        for p in processes
        for m in mtbfs
        for c in costs
        for s in successes
    ]


def _row_key(s: Setting) -> str:
    return f"{s.process} {s.mtbf / HOUR:g}h {s.checkpoint_cost:.0f}s {s.save_success:.1f}"


def _fmt_tau(seconds: float) -> str:
    if seconds >= 2 * HOUR:
        return f"{seconds / HOUR:.1f}h"
    if seconds >= 120:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def _print_row(res: PointResult) -> None:
    s = res.setting
    print(
        f"{s.process:<11}{s.mtbf / HOUR:>4g}h{s.checkpoint_cost:>4.0f}s{s.save_success:>5.1f} | "
        f"{res.default:7.4f} {res.best:6.4f}{_fmt_tau(res.best_tau):>6}{'*' if res.best_at_edge else ' '}"
        f"{res.closed:6.4f}{_fmt_tau(res.closed_tau):>6} {res.adaptive:6.4f} {res.constant_hazard:9.4f} | "
        f"{100 * res.adaptive / res.best:6.2f}% {100 * res.diff_se / res.best:4.2f} "
        f"{100 * res.default / res.best:7.2f}% | "
        f"{_fmt_tau(res.adaptive_taus[0]):>9} -> {_fmt_tau(res.adaptive_taus[1]):<9}",
        flush=True,
    )


def _run_point_star(args: tuple[Setting, int, int, RateEstimate]) -> PointResult:
    return run_point(*args)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small grid with fewer replications")
    parser.add_argument("--replications", type=int, default=None, help="default 24 quick, 40 full")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--work-hours", type=float, default=200.0)
    parser.add_argument("--restart", type=float, default=300.0, help="R, seconds (start-up + restore)")
    parser.add_argument("--write-factor", type=float, default=2.0, help="W = this x C")
    parser.add_argument("--stockout-prob", type=float, default=0.3)
    parser.add_argument("--stockout-mean", type=float, default=900.0)
    parser.add_argument("--prior-alpha", type=float, default=SPOT_PRIOR.alpha, help="adaptive prior weight")
    parser.add_argument(
        "--prior-mtbf-hours", type=float, default=SPOT_PRIOR.mtbf / HOUR, help="adaptive prior mean MTBF"
    )
    parser.add_argument(
        "--half-life-hours",
        type=float,
        default=DEFAULT_HALF_LIFE_SECONDS / HOUR,
        help="how fast the adaptive estimate forgets (0: never)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (grid points run in parallel)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only the settings whose row starts with this (repeat for several)",
    )
    args = parser.parse_args()
    prior = RateEstimate(
        alpha=args.prior_alpha,
        beta=args.prior_alpha * args.prior_mtbf_hours * HOUR,
        half_life_seconds=args.half_life_hours * HOUR if args.half_life_hours > 0 else math.inf,
    )
    replications = args.replications or (24 if args.quick else 40)
    # Each setting keeps its seed (its place in the whole grid) when --only picks a few.
    settings = [
        (i, s)
        for i, s in enumerate(grid_settings(args.quick, args))
        if not args.only or _row_key(s).startswith(tuple(args.only))
    ]
    print(
        f"{len(settings)} settings, {replications} replications each, {args.work_hours:.0f} h of work, "
        f"R={args.restart:.0f}s, W={args.write_factor:g}xC, stockout p={args.stockout_prob} "
        f"mean={args.stockout_mean:.0f}s, default interval {_fmt_tau(DEFAULT_INTERVAL)}, seed {args.seed}, "
        f"prior Gamma({prior.alpha:g}, {prior.beta / HOUR:g} h) (mean MTBF {prior.mtbf / HOUR:g} h), "
        f"half-life {prior.half_life_seconds / HOUR:g} h"
    )
    header = (
        f"{'process':<11}{'M':>5}{'C':>5}{'save':>5} | {'default':>7} {'best':>6}{'@tau':>6} "
        f"{'closed':>6}{'@tau':>6} {'adapt':>6} {'const-haz':>9} | {'ad/best':>7} {'±se':>5} "
        f"{'def/best':>8} | {'adapt tau first->last':>21}"
    )
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    results: list[PointResult] = []
    work = [(setting, replications, args.seed + index, prior) for index, setting in settings]
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as pool:
        # In grid order whatever the number of workers; every point has its own seed.
        points = pool.map(_run_point_star, work) if pool else map(_run_point_star, work)
        for res in points:
            results.append(res)
            _print_row(res)
    elapsed = time.perf_counter() - started
    worst = min(results, key=lambda r: r.adaptive / r.best)
    worst_blind = min(results, key=lambda r: r.constant_hazard / r.best)
    worst_default = min(results, key=lambda r: r.default / r.best)
    worst_closed = min(results, key=lambda r: r.closed / r.best)

    def where(r: PointResult) -> str:
        s = r.setting
        return f"{s.process} M={s.mtbf / HOUR:g}h C={s.checkpoint_cost:.0f}s save={s.save_success:.1f}"

    print()
    print(
        f"worst adaptive/best: {100 * worst.adaptive / worst.best:.2f}% at {where(worst)} "
        f"(paired se {100 * worst.diff_se / worst.best:.2f} points)"
    )
    print(
        f"worst const-haz/best: {100 * worst_blind.constant_hazard / worst_blind.best:.2f}% "
        f"at {where(worst_blind)}"
    )
    print(f"worst closed/best: {100 * worst_closed.closed / worst_closed.best:.2f}% at {where(worst_closed)}")
    print(
        f"worst default(30m)/best: {100 * worst_default.default / worst_default.best:.2f}% at {where(worst_default)}"
    )
    below = [r for r in results if r.default / r.best < 0.98]
    print(f"default below 98% of best at {len(below)} of {len(results)} points:")
    for r in sorted(below, key=lambda r: r.default / r.best)[:12]:
        print(f"  {100 * r.default / r.best:6.2f}%  {where(r)} (best interval {_fmt_tau(r.best_tau)})")
    met = all(r.adaptive >= 0.98 * r.best for r in results)
    print(f"goal adaptive >= 98% of best on every point: {'MET' if met else 'NOT MET'}; {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
