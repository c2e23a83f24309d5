"""The wait after a stockout before start (controller/core/stockout.py): pure, no I/O."""

from __future__ import annotations

import random
from dataclasses import dataclass

from controller.core import stockout
from controller.core.classify import Ending


@dataclass(frozen=True)
class _A:
    ending: Ending | None
    started_at: float | None = None


def test_the_first_stockout_in_a_row_is_retried_at_once():
    assert stockout.wait_seconds(1, 120.0, random.Random(0)) == 0.0


def test_repeated_stockouts_double_the_wait_up_to_the_capacity_retry_with_jitter():
    rng = random.Random(7)
    for stockouts, base in [(2, 15.0), (3, 30.0), (4, 60.0), (5, 120.0), (9, 120.0), (500, 120.0)]:
        waits = [stockout.wait_seconds(stockouts, 120.0, rng) for _ in range(200)]
        assert all(base <= w <= base * 1.2 for w in waits)
        assert len(set(waits)) > 100  # jittered: jobs refused together do not ask again together


def test_only_the_newest_stockouts_before_start_count():
    ran = _A(Ending.CAPACITY, started_at=5.0)  # reclaimed after it ran: not a stockout before start
    refused = _A(Ending.CAPACITY)
    assert stockout.in_a_row([]) == 0
    assert stockout.in_a_row([refused]) == 1
    assert stockout.in_a_row([refused, refused, refused]) == 3
    assert stockout.in_a_row([refused, _A(Ending.PREEMPTED, 1.0), refused, refused]) == 2
    assert stockout.in_a_row([refused, ran]) == 0
    assert stockout.in_a_row([refused, _A(None)]) == 0  # the current attempt has not ended
