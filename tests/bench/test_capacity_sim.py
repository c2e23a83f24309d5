"""capacity_sim's relaunch shell: how long it takes a stockout to last, from what it watched."""

import importlib.util
import sys
from pathlib import Path

import pytest

from controller.core.checkpoint_interval import HOUR

_BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("capacity_sim", _BENCH / "capacity_sim.py")
assert _spec is not None and _spec.loader is not None
sim = importlib.util.module_from_spec(_spec)
sys.modules["capacity_sim"] = sim  # dataclasses look their module up there
_spec.loader.exec_module(sim)

POLL = 240.0  # a refused try and the capacity backoff


def test_a_stockout_watched_to_its_end_counts_its_length():
    seen = sim.Stockouts()
    for k in range(30):  # refused every 4 minutes for 2 hours
        seen.refused("A", k * POLL)
    seen.started("A", 30 * POLL)
    assert seen.ended == 1
    assert seen.watched == pytest.approx(29 * POLL + POLL / 2)
    # With the prior (one stockout of 6 h seen to its end): the mean of the two.
    assert seen.mean(6 * HOUR) == pytest.approx((6 * HOUR + 29.5 * POLL) / 2)


def test_time_spent_elsewhere_is_not_counted_as_stockout():
    seen = sim.Stockouts()
    seen.refused("A", 0.0)
    seen.refused("A", POLL)
    # The job ran 20 h elsewhere; A refused again, then took the next attempt at once.
    seen.refused("A", 20 * HOUR)
    seen.started("A", 20 * HOUR + POLL)
    # The first streak ends unseen after one poll; the second is seen to end half a poll later.
    assert seen.ended == 1
    assert seen.watched == pytest.approx(POLL + POLL / 2)
    assert seen.mean(2 * HOUR) < 2 * HOUR


def test_a_start_long_after_the_last_refusal_does_not_say_when_the_stockout_ended():
    seen = sim.Stockouts()
    seen.refused("A", 0.0)
    seen.refused("A", POLL)
    seen.started("A", 10 * HOUR)
    assert seen.ended == 0
    assert seen.watched == pytest.approx(POLL)
    # A start with no refusal before it says nothing.
    seen.started("B", 11 * HOUR)
    assert (seen.ended, seen.watched) == (0, pytest.approx(POLL))
