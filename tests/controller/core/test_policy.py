import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.policy import Backoff


def test_delays_grow_exponentially_without_jitter_and_cap():
    backoff = Backoff(initial_seconds=10, multiplier=2, max_seconds=50, jitter=0)
    rng = random.Random(0)
    assert [backoff.delay(k, rng) for k in range(1, 6)] == [10, 20, 40, 50, 50]


def test_same_seed_same_delays():
    backoff = Backoff()
    assert [backoff.delay(k, random.Random(7)) for k in range(1, 8)] == [
        backoff.delay(k, random.Random(7)) for k in range(1, 8)
    ]


def test_retry_count_starts_at_one():
    with pytest.raises(ValueError):
        Backoff().delay(0, random.Random(0))


@given(
    initial=st.floats(0.1, 1000),
    multiplier=st.floats(1.0, 10.0),
    extra=st.floats(0, 10000),
    jitter=st.floats(0, 0.99),
    retry=st.integers(1, 10_000),
    seed=st.integers(0, 2**32),
)
def test_every_delay_within_initial_and_max(initial, multiplier, extra, jitter, retry, seed):
    backoff = Backoff(initial, multiplier, initial + extra, jitter)
    delay = backoff.delay(retry, random.Random(seed))
    assert initial <= delay <= initial + extra
