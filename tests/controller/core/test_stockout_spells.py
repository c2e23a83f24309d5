"""How long a refused placement is expected to stay out, from the refusals the job watched: only
watched time counts as stockout, the mean is the censored-exponential one with the prior as one
spell, old spells fade on the stated half-life, and a refusal long ago predicts no wait."""

import math

import pytest

from controller.core.checkpoint_interval import HOUR
from controller.core.stockout_spells import PRIOR_STOCKOUT_SECONDS, Stockouts

POLL = 240.0  # a refused try and the capacity backoff
NEVER = math.inf  # no fading: the lengths alone


def refused_every_poll(seen: Stockouts, name: str, start: float, polls: int) -> Stockouts:
    for k in range(polls):
        seen = seen.refused(name, start + k * POLL)
    return seen


def test_a_stockout_watched_to_its_end_counts_its_length():
    seen = refused_every_poll(Stockouts(half_life_seconds=NEVER), "A", 0.0, 30)  # 2 hours
    seen = seen.started("A", 30 * POLL)
    assert seen.ended == 1
    assert seen.watched == pytest.approx(29 * POLL + POLL / 2)
    # With the prior (one stockout of 6 h seen to its end): the mean of the two.
    assert seen.mean(30 * POLL, 6 * HOUR) == pytest.approx((6 * HOUR + 29.5 * POLL) / 2)


def test_time_spent_elsewhere_is_not_counted_as_stockout():
    seen = Stockouts(half_life_seconds=NEVER).refused("A", 0.0).refused("A", POLL)
    # The job ran 20 h elsewhere; A refused again, then took the next attempt at once.
    seen = seen.refused("A", 20 * HOUR).started("A", 20 * HOUR + POLL)
    # The first streak ends unseen after one poll; the second is seen to end half a poll later.
    assert seen.ended == 1
    assert seen.watched == pytest.approx(POLL + POLL / 2)
    assert seen.mean(20 * HOUR, 2 * HOUR) < 2 * HOUR


def test_a_start_long_after_the_last_refusal_does_not_say_when_the_stockout_ended():
    seen = Stockouts(half_life_seconds=NEVER).refused("A", 0.0).refused("A", POLL)
    seen = seen.started("A", 10 * HOUR)
    assert seen.ended == 0
    assert seen.watched == pytest.approx(POLL)
    # A start with no refusal before it says nothing.
    seen = seen.started("B", 11 * HOUR)
    assert (seen.ended, seen.watched) == (0, pytest.approx(POLL))


def test_a_refusal_that_vertex_watched_for_an_hour_counts_from_its_request():
    seen = Stockouts(half_life_seconds=NEVER).refused("A", HOUR, asked_at=0.0)
    seen = seen.started("A", HOUR + POLL)
    assert seen.watched == pytest.approx(HOUR + POLL / 2)


def test_the_wait_left_is_the_mean_now_and_fades_as_the_refusal_ages():
    seen = Stockouts().refused("A", 0.0)
    assert seen.remaining("B", 0.0) is None  # never refused: the other evidence decides
    assert seen.remaining("A", 0.0) == pytest.approx(PRIOR_STOCKOUT_SECONDS)
    # Memoryless: still out with probability exp(-s/mean), then a whole mean more.
    assert seen.remaining("A", HOUR) == pytest.approx(2 * HOUR * math.exp(-0.5))
    assert seen.remaining("A", 2 * 24 * HOUR) < 1.0  # two days on, a refusal predicts nothing
    assert seen.started("A", POLL).remaining("A", POLL) is None


def test_long_stockouts_seen_long_ago_fade_back_to_the_prior_on_the_half_life():
    seen = refused_every_poll(Stockouts(half_life_seconds=12 * HOUR), "A", 0.0, 90)  # 6 h
    seen = seen.started("A", 90 * POLL)
    fresh = seen.mean(90 * POLL)
    assert fresh == pytest.approx((2 * HOUR + 89.5 * POLL) / 2)  # just learned: about 4 h
    # Twelve hours on, the spell weighs half; three days on, next to nothing.
    half = (2 * HOUR + 0.5 * 89.5 * POLL) / 1.5
    assert seen.mean(90 * POLL + 12 * HOUR) == pytest.approx(half)
    assert seen.mean(90 * POLL + 72 * HOUR) < 2.1 * HOUR
    # Without fading the same history says 4 h for ever.
    unfaded = refused_every_poll(Stockouts(half_life_seconds=NEVER), "A", 0.0, 90).started("A", 90 * POLL)
    assert unfaded.mean(90 * POLL + 72 * HOUR) == pytest.approx(fresh)
