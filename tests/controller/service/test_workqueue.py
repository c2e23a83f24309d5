"""The keyed work queue: one look per key however often it is added, never two workers on one
key, wake-ups on a hand-driven clock, a bounded backlog, and what it reports of itself.

No sleeps: threads meet on events, and delays are measured on a clock the test moves."""

from __future__ import annotations

import threading

from controller.service.workqueue import SWEEP_YIELDS_SECONDS, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder(delays: dict[str, float | None] | None = None):
    seen: list[str] = []

    def handler(key: str) -> float | None:
        seen.append(key)
        return (delays or {}).get(key)

    return seen, handler


def test_a_key_added_many_times_while_it_waits_is_looked_at_once():
    queue = WorkQueue(clock=Clock())
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    seen, handler = recorder()

    assert queue.run_ready(handler) == 2
    assert seen == ["a", "b"]


def test_a_wake_up_is_served_when_its_time_comes_and_not_before():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 30)
    queue.add_after("a", 60)  # a later wake-up for a key that has an earlier one changes nothing
    seen, handler = recorder()

    clock.now += 29
    assert queue.run_ready(handler) == 0
    clock.now += 1
    assert queue.run_ready(handler) == 1
    clock.now += 60
    assert queue.run_ready(handler) == 0
    assert seen == ["a"]


def test_an_immediate_add_supersedes_the_wake_up_and_the_handler_sets_the_next():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 30)
    queue.add("a")
    seen, handler = recorder({"a": 10.0})

    assert queue.run_ready(handler) == 1  # now, not in 30 s
    clock.now += 10
    assert queue.run_ready(handler) == 1  # the handler's answer: 10 s later
    assert seen == ["a", "a"]


def test_a_key_added_while_a_worker_serves_it_runs_once_more_afterwards_never_beside_it():
    queue = WorkQueue(clock=Clock())
    inside, release, all_done = threading.Event(), threading.Event(), threading.Event()
    guard = threading.Lock()
    running: set[str] = set()
    concurrent: list[str] = []
    runs: list[str] = []

    def handler(key: str) -> None:
        with guard:
            if key in running:
                concurrent.append(key)
            running.add(key)
            runs.append(key)
            first = len(runs) == 1
        if first:
            inside.set()
            release.wait(30)
        with guard:
            running.discard(key)
            if len(runs) == 3:
                all_done.set()

    queue.add("a")
    queue.start(4, handler)
    assert inside.wait(30)
    for _ in range(5):
        queue.add("a")  # three idle workers, yet none may take "a" while the first serves it
    queue.add("b")
    stats = queue.stats()
    assert stats.serving >= 1 and "a" in running
    release.set()

    assert all_done.wait(30)
    queue.stop()
    assert sorted(runs) == ["a", "a", "b"]  # the five adds made one more run, after the first
    assert concurrent == []


def test_a_failing_handler_is_retried_later_with_growing_waits():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    calls = []

    def failing(key: str) -> None:
        calls.append(clock.now)
        raise RuntimeError("store down")

    queue.add("a")
    queue.run_ready(failing)
    clock.now += 0.5
    queue.run_ready(failing)
    clock.now += 0.5
    assert queue.run_ready(failing) == 0  # the second wait is twice the first
    clock.now += 0.5
    queue.run_ready(failing)
    assert [t - calls[0] for t in calls] == [0.0, 0.5, 1.5]


def test_the_backlog_is_bounded_and_refusals_are_counted():
    queue = WorkQueue(clock=Clock(), max_keys=2)
    assert queue.add("a") and queue.add_after("b", 5)
    assert not queue.add("c")
    assert not queue.add_after("d", 5)
    assert queue.add("a") and queue.add("b")  # keys it holds already are always taken
    assert queue.stats().refused == 2


def test_stats_report_depth_the_oldest_keys_age_and_time_in_queue():
    clock = Clock()
    waits: list[float] = []
    queue = WorkQueue(clock=clock, on_served=waits.append)
    queue.add("a")
    clock.now += 3
    queue.add("b")
    queue.add_after("c", 60)
    clock.now += 1

    stats = queue.stats()
    assert (stats.ready, stats.delayed, stats.oldest_ready_seconds) == (2, 1, 4.0)
    queue.run_ready(lambda key: None)
    assert waits == [4.0, 1.0]
    stats = queue.stats()
    assert (stats.served, stats.waited_seconds_total, stats.waited_seconds_max) == (2, 5.0, 4.0)


def test_workers_sleep_until_a_wake_up_is_due_on_the_clock():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    served = threading.Event()
    queue.start(1, lambda key: served.set())
    queue.add_after("a", 60)
    assert not served.wait(0.2)  # the clock has not moved: nothing is due
    clock.now += 60
    queue.wake()
    assert served.wait(30)
    queue.stop()


def test_clear_drops_waiting_keys_and_wake_ups():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add("a")
    queue.add_after("b", 1)
    queue.clear()
    clock.now += 5
    assert queue.run_ready(lambda key: None) == 0


def test_an_event_never_waits_behind_a_sweep_of_every_job():
    queue = WorkQueue(clock=Clock())
    for n in range(1000):
        queue.add(f"job-{n}", sweep=True)  # the periodic pass offers every live job
    queue.add("reclaimed")  # then a Vertex event
    queue.add("job-500")  # an event for a job the sweep also offered: it moves up, once
    seen, handler = recorder()

    assert queue.run_ready(handler) == 1001
    assert seen[:2] == ["reclaimed", "job-500"]
    assert seen.count("job-500") == 1


def test_a_sweep_waits_while_an_events_look_is_served_but_not_longer_than_its_bound():
    """While a recovery's look runs, the pass's looks (interpreter work all) do not start beside
    it; a look that takes longer than the bound (a call retrying through an outage) stops
    holding them."""
    clock = Clock()
    queue = WorkQueue(clock=clock)
    for n in range(3):
        queue.add(f"job-{n}", sweep=True)
    queue.add("reclaimed")
    seen: list[str] = []
    served_beside: list[int] = []

    def handler(key: str) -> None:
        seen.append(key)
        if key == "reclaimed":
            served_beside.append(queue.run_ready(seen.append))  # its look has just begun
            clock.now += SWEEP_YIELDS_SECONDS
            served_beside.append(queue.run_ready(seen.append))  # it has run as long as the bound

    queue.run_ready(handler)

    assert served_beside == [0, 3]
    assert seen == ["reclaimed", "job-0", "job-1", "job-2"]


def test_a_recovery_gets_a_worker_at_once_while_every_sweep_look_is_slow():
    """Real workers: the pass's looks hold their workers (each blocks until released), yet an
    event's key is served straight away, by a worker the sweep may not take; and the sweep's
    looks take one worker, so a recovery shares the interpreter with one of them at most."""
    queue = WorkQueue(clock=Clock())
    release = threading.Event()
    recovered = threading.Event()
    sweeping, most_sweeping = [0], [0]
    count = threading.Lock()  # the test's own tally across worker threads

    def handler(key: str) -> None:
        if key == "reclaimed":
            recovered.set()
            return
        with count:
            sweeping[0] += 1
            most_sweeping[0] = max(most_sweeping[0], sweeping[0])
        release.wait(30)
        with count:
            sweeping[0] -= 1

    for n in range(100):
        queue.add(f"job-{n}", sweep=True)  # the periodic pass offers every live job
    queue.start(16, handler)  # the default count; the sweep may take one of them
    try:
        queue.add("reclaimed")  # a Vertex event while the sweep's looks are all stuck
        assert recovered.wait(10), "the event's key waited behind the sweep"
        assert most_sweeping[0] == 1
        assert queue.stats().ready >= 98  # the sweep is still under way
    finally:
        release.set()
        queue.stop()


def test_the_pass_stops_its_own_work_while_an_events_look_is_served_and_goes_on_after_it():
    """The periodic pass (a long look) calls `yield_to_asked` between steps of its work: it waits
    while another key's look is under way (the clock does not move, so only that look's end can
    let it on), never for its own key, and never past the bound from that look's start."""
    clock = Clock()
    queue = WorkQueue(clock=clock)
    release = threading.Event()
    in_recovery = threading.Event()
    went_on: list[str] = []
    done = threading.Event()

    def handler(key: str) -> None:
        if key.startswith("reclaimed"):
            in_recovery.set()
            release.wait(30)
            return
        in_recovery.wait(30)
        queue.yield_to_asked("~pass")
        went_on.append(f"after {'released' if release.is_set() else 'the bound'}")
        done.set()

    queue.add("reclaimed-1")
    queue.add("~pass")
    queue.start(2, handler)
    in_recovery.wait(30)
    assert went_on == []  # the recovery's look is under way: the pass cannot go on
    release.set()
    assert done.wait(30) and went_on == ["after released"]

    # A look that outlasts the bound (a call retrying through an outage) stops holding the pass.
    release.clear()
    in_recovery.clear()
    done.clear()
    queue.add("reclaimed-2")
    in_recovery.wait(30)
    queue.add("~pass")
    assert not done.is_set()
    clock.now += SWEEP_YIELDS_SECONDS
    queue.wake()
    assert done.wait(30) and went_on == ["after released", "after the bound"]
    release.set()
    queue.stop()
