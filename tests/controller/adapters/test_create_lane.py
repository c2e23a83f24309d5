"""The create lane: under a create quota the job that has waited longest takes the next slot,
whatever order the reconciles ask in; nobody blocks, each is told when its turn comes."""

from __future__ import annotations

from controller.adapters.create_lane import CreateLane
from controller.adapters.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_under_a_quota_the_oldest_ready_jobs_go_first_whatever_the_asking_order():
    clock = Clock()
    limiter = RateLimiter(4, window=60, clock=clock)
    for _ in range(4):
        assert limiter.acquire(timeout=0)  # the quota is used up: everybody below waits
    lane = CreateLane(limiter, clock=clock)
    arrivals = [("late-reclaim", 50.0), ("first-reclaim", 10.0), ("new-job", 70.0), ("second", 20.0)]
    for job_id, ready_at in arrivals:
        assert lane.take(job_id, ready_at) > 0

    assert [lane.position(j) for j, _ in arrivals] == [3, 1, 4, 2]
    assert lane.waiting() == 4
    # Asked again, each is told to come back at its turn: one slot every 15 s under 4 a minute.
    waits = {job_id: lane.take(job_id, ready_at) for job_id, ready_at in arrivals}
    assert waits["first-reclaim"] < waits["second"] < waits["late-reclaim"] < waits["new-job"]

    clock.now += 45
    limiter.give_back()
    limiter.give_back()  # two slots free up; the youngest asks first and is refused
    granted = [job_id for job_id, ready_at in reversed(arrivals) if lane.take(job_id, ready_at) == 0.0]
    assert granted == ["second", "first-reclaim"]
    assert lane.waiting() == 2 and lane.position("late-reclaim") == 1


def test_a_younger_job_never_takes_the_slot_an_older_one_waits_for():
    clock = Clock()
    limiter = RateLimiter(1, window=60, clock=clock)
    assert limiter.acquire(timeout=0)
    lane = CreateLane(limiter, clock=clock)
    assert lane.take("old", 1.0) > 0
    clock.now += 60  # one slot is free now
    assert lane.take("young", 5.0) > 0  # the old job waits ahead of it
    assert lane.take("old", 1.0) == 0.0


def test_a_job_that_leaves_or_is_not_heard_of_again_gives_up_its_place():
    clock = Clock()
    limiter = RateLimiter(1, window=60, clock=clock)
    assert limiter.acquire(timeout=0)
    lane = CreateLane(limiter, clock=clock, forget_after=120)
    lane.take("cancelled", 1.0)
    lane.take("vanished", 2.0)
    lane.take("waiting", 3.0)
    lane.leave("cancelled")
    clock.now += 100
    lane.take("waiting", 3.0)
    clock.now += 60  # "vanished" has not asked for 160 s
    assert lane.take("waiting", 3.0) == 0.0
    assert lane.waiting() == 0


def test_a_slot_taken_and_not_used_goes_back():
    clock = Clock()
    limiter = RateLimiter(1, window=60, clock=clock)
    lane = CreateLane(limiter, clock=clock)
    assert lane.take("a", 1.0) == 0.0
    lane.give_back()
    assert lane.take("b", 2.0) == 0.0


def test_asking_for_a_turn_keeps_the_place_and_takes_no_slot():
    clock = Clock()
    limiter = RateLimiter(1, window=60, clock=clock)
    assert limiter.acquire(timeout=0)
    lane = CreateLane(limiter, clock=clock)
    assert lane.turn_in("new-a", 1.0) > 0  # no slot: told when to come back, and queued
    assert lane.take("new-b", 2.0) > 0
    assert lane.position("new-a") == 1 and lane.position("new-b") == 2

    clock.now += 60  # one slot is free now
    assert lane.turn_in("new-a", 1.0) == 0.0  # it would be new-a's, but is not taken by asking
    assert limiter.free_now() == 1
    assert lane.take("new-b", 2.0) > 0  # still new-a's place in front
    assert lane.take("new-a", 1.0) == 0.0
