"""The Vertex read budget is spent evenly: a burst never stalls reads for the rest of the minute,
and no window ever holds more grants than the budget. Pure: a hand-moved clock, no waiting."""

from controller.adapters.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def take_all(limiter: RateLimiter) -> int:
    taken = 0
    while limiter.free_in() == 0.0:
        assert limiter.acquire(timeout=0)
        taken += 1
    return taken


def most_in_a_minute(grants: list[float]) -> int:
    """The most grants any 60-second window holds."""
    most, start = 0, 0
    for end, at in enumerate(grants):
        while grants[start] <= at - 60.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_after_a_burst_the_next_read_waits_a_fraction_of_a_second_not_the_rest_of_the_minute():
    clock = Clock()
    reads = RateLimiter(300, clock=clock, burst=30)
    assert take_all(reads) == 30
    # 270 more a minute, evenly: the next one is free in 60/270 s.
    assert 0.2 < reads.free_in() < 0.25
    clock.now += 0.25
    assert reads.acquire(timeout=0)


def test_a_sliding_window_stalls_for_the_rest_of_the_minute_after_its_budget_is_spent():
    # The create quota keeps the plain window (its lane plans with it); shown for contrast.
    clock = Clock()
    creates = RateLimiter(60, clock=clock)
    assert take_all(creates) == 60
    clock.now += 5
    assert creates.free_in() == 55.0


def test_the_even_budget_never_grants_more_than_the_limit_in_any_window():
    clock = Clock()
    reads = RateLimiter(300, clock=clock, burst=30)
    grants: list[float] = []
    for _ in range(3000):  # take every read the moment it is free, for several minutes
        clock.now += reads.free_in()
        assert reads.acquire(timeout=0)
        grants.append(clock.now)
    assert most_in_a_minute(grants) <= 300


def test_a_read_given_back_is_free_again():
    clock = Clock()
    reads = RateLimiter(10, clock=clock, burst=2)
    assert take_all(reads) == 2
    reads.give_back()
    assert reads.free_now() == 1 and reads.acquire(timeout=0)


def test_routine_reads_leave_the_reserve_to_urgent_ones():
    clock = Clock()
    reads = RateLimiter(300, clock=clock, burst=30, reserve=10)
    assert take_all(reads) == 20  # routine reads stop where the reserve begins
    assert not reads.acquire(timeout=0)
    assert 0.2 < reads.free_in() < 0.25  # and wait for the refill, as without a reserve
    for _ in range(10):  # a recovery's read takes a reserved token at once
        assert reads.acquire(timeout=0, urgent=True)
    assert not reads.acquire(timeout=0, urgent=True)  # the bucket is empty: urgent ones wait too


def test_urgent_and_routine_reads_together_never_exceed_the_limit_in_any_window():
    clock = Clock()
    reads = RateLimiter(300, clock=clock, burst=30, reserve=10)
    grants: list[float] = []
    for i in range(3000):  # every third read urgent, each taken the moment it may be
        urgent = i % 3 == 0
        while not reads.acquire(timeout=0, urgent=urgent):
            clock.now += 0.01
        grants.append(clock.now)
    assert most_in_a_minute(grants) <= 300
