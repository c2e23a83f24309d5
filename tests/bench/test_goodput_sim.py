"""The goodput simulator's accounting, on cases small enough to work out by hand."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.core.checkpoint_interval import HOUR

_PATH = Path(__file__).resolve().parents[2] / "bench" / "goodput_sim.py"
_spec = importlib.util.spec_from_file_location("goodput_sim", _PATH)
assert _spec is not None and _spec.loader is not None
sim = importlib.util.module_from_spec(_spec)
sys.modules["goodput_sim"] = sim  # dataclasses look their module up there
_spec.loader.exec_module(sim)


def setting(**overrides):
    values = dict(
        process="none",
        mtbf=HOUR,
        checkpoint_cost=60.0,
        save_success=0.0,
        write_seconds=0.0,
        restart_cost=0.0,
        stockout_prob=0.0,
        stockout_mean=0.0,
        work_seconds=10 * HOUR,
    )
    values.update(overrides)
    return sim.Setting(**values)


def run_fixed(s, env, taus):
    taus = np.asarray(taus, dtype=float)
    return sim.simulate(s, env, np.zeros(len(taus), dtype=np.int64), taus)


@pytest.mark.parametrize("tau", [HOUR, 0.75 * HOUR, 7 * HOUR, 20 * HOUR])
def test_without_failures_goodput_is_work_over_work_plus_the_stalls(tau):
    s = setting()
    env = sim.make_environment(s, replications=1, seed=1, attempts=4)
    out = run_fixed(s, env, [tau])
    stalls = math.ceil(s.work_seconds / tau) - 1  # a checkpoint after every full interval but the last
    assert out.checkpoints[0] == stalls
    assert out.attempts[0] == 1
    assert out.goodput[0] == pytest.approx(s.work_seconds / (s.work_seconds + stalls * s.checkpoint_cost))


def constant_environment(lifetime, saved, attempts=10, wait=0.0):
    shape = (1, attempts)
    return sim.Environment(
        lifetimes=np.full(shape, lifetime), saved=np.full(shape, saved), waits=np.full(shape, wait)
    )


def test_an_unsaved_reclaim_loses_everything_since_the_last_committed_checkpoint():
    # Each attempt runs 3.5 h: three 1 h intervals (each followed by a 60 s stall, committed 60 s
    # later), then 1620 s of work that the reclaim throws away. Three attempts keep 3 h each; the
    # fourth finishes the last hour. Wall time: 3 x 12600 + 3600.
    s = setting(write_seconds=60.0)
    out = run_fixed(s, constant_environment(3.5 * HOUR, saved=False), [HOUR])
    assert out.attempts[0] == 4
    assert out.wall[0] == pytest.approx(3 * 3.5 * HOUR + HOUR)
    assert out.goodput[0] == pytest.approx(10 * HOUR / (3 * 3.5 * HOUR + HOUR))


def test_a_checkpoint_still_uploading_when_the_reclaim_comes_is_lost_too():
    # Reclaimed 30 s after the third stall ended, before its commit (W = 60 s): only two intervals
    # are kept per attempt.
    life = 3 * (HOUR + 60.0) + 30.0
    s = setting(write_seconds=60.0)
    out = run_fixed(s, constant_environment(life, saved=False, attempts=8), [HOUR])
    assert out.attempts[0] == 5  # 2 h kept by each of four attempts, the fifth does the last 2 h
    assert out.wall[0] == pytest.approx(4 * life + 2 * HOUR + 60.0)


def test_a_saved_reclaim_keeps_everything_and_restarts_and_waits_are_paid_each_time():
    # Saved reclaims after 2 h 30 min each, a 300 s restart and a 600 s stockout wait before every
    # attempt but the first: work kept per attempt = 2.5 h minus the restart minus two stalls.
    life = 2.5 * HOUR
    s = setting(restart_cost=300.0)
    out = run_fixed(s, constant_environment(life, saved=True, wait=600.0), [HOUR])
    kept = life - 300.0 - 2 * 60.0
    attempts = math.ceil(s.work_seconds / kept)
    assert out.attempts[0] == attempts
    # (This hand-made environment makes the first attempt wait too.)
    last = s.work_seconds - (attempts - 1) * kept
    last_wall = 300.0 + last + 60.0 * (math.ceil(last / HOUR) - 1)
    assert out.wall[0] == pytest.approx(attempts * 600.0 + (attempts - 1) * life + last_wall)


def _one_at_a_time(interval):
    """A policy that always answers `interval`: its lanes run the attempt-at-a-time loop."""
    return lambda _estimate, _wall: interval


@pytest.mark.parametrize(
    "overrides",
    [
        dict(process="poisson", mtbf=2 * HOUR, save_success=0.5, write_seconds=120.0),
        dict(process="weibull1.5", mtbf=3 * HOUR, restart_cost=300.0, stockout_prob=0.3, stockout_mean=900.0),
        # Calm, then reclaimed every 30 min from 5 h of wall time: the fixed lanes cross the change.
        dict(process="phased", mtbf=10 * HOUR, mtbf_after=HOUR / 2, change_at=5 * HOUR, restart_cost=120.0),
        dict(process="phased", mtbf=HOUR / 2, mtbf_after=10 * HOUR, change_at=5 * HOUR, stockout_prob=0.5),
    ],
)
def test_fixed_lanes_taken_many_attempts_at_a_time_end_exactly_as_one_attempt_at_a_time(overrides):
    # The same intervals, once as fixed lanes (chunks of attempts) and once as policy lanes that
    # always answer them (one attempt at a time): every figure equal, not just close. Intervals
    # from far too short to far too long, so some lanes need many attempts.
    s = setting(work_seconds=40 * HOUR, **overrides)
    taus = [60.0, 600.0, 1800.0, HOUR, 2 * HOUR]
    env = sim.make_environment(s, replications=3, seed=5, attempts=20000)
    lane_rep = np.repeat(np.arange(3), 2 * len(taus))
    fixed_tau = np.tile(np.concatenate([taus, np.full(len(taus), np.nan)]), 3)
    policies = {
        rep * 2 * len(taus) + len(taus) + k: _one_at_a_time(tau)
        for rep in range(3)
        for k, tau in enumerate(taus)
    }
    out = sim.simulate(s, env, lane_rep, fixed_tau, policies)
    fixed = np.flatnonzero(~np.isnan(fixed_tau))
    stepped = np.flatnonzero(np.isnan(fixed_tau))
    assert out.attempts[fixed].max() > 16  # chunks of 8, then of 16
    for name in ("goodput", "wall", "attempts", "checkpoints"):
        assert np.array_equal(getattr(out, name)[fixed], getattr(out, name)[stepped]), name


def test_an_environment_too_large_to_keep_draws_the_same_numbers_row_by_row(monkeypatch):
    s = setting(
        process="phased",
        mtbf=10 * HOUR,
        mtbf_after=HOUR,
        change_at=5 * HOUR,
        save_success=0.5,
        stockout_prob=0.3,
        stockout_mean=900.0,
    )
    whole = sim.make_environment(s, replications=4, seed=11, attempts=500)
    monkeypatch.setattr(sim, "STREAM_CELLS", 100)
    monkeypatch.setattr(sim, "HEAD_ATTEMPTS", 16)
    streamed = sim.make_environment(s, replications=4, seed=11, attempts=500)
    assert streamed.lifetimes.shape == (4, 16) and streamed.drawn == 500
    for rep in range(4):
        for kept, full in zip(streamed.row(rep), whole.row(rep)):
            assert np.array_equal(kept, full)
    assert np.array_equal(streamed.lifetimes, whole.lifetimes[:, :16])
    assert np.array_equal(streamed.waits, whole.waits[:, :16])
    # And a simulation on it runs its fixed lanes past the kept attempts to the same ends.
    taus = np.array([300.0, 3 * HOUR, 9 * HOUR])
    lane_rep = np.repeat(np.arange(4), len(taus))
    a = sim.simulate(s, whole, lane_rep, np.tile(taus, 4))
    b = sim.simulate(s, streamed, lane_rep, np.tile(taus, 4))
    assert a.attempts.max() > 16
    assert np.array_equal(a.wall, b.wall) and np.array_equal(a.attempts, b.attempts)


def test_a_lane_that_needs_more_attempts_than_were_drawn_says_so():
    s = setting(process="poisson", mtbf=HOUR / 4)
    env = sim.make_environment(s, replications=1, seed=3, attempts=20)
    with pytest.raises(sim.OutOfAttempts):
        sim.simulate(s, env, np.zeros(1, dtype=np.int64), np.array([6 * HOUR]))
