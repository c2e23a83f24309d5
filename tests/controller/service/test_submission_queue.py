"""The submission queue: creates wait for their quota slot in order, oldest ready job first."""

from __future__ import annotations

import threading

from controller.adapters.ratelimit import RateLimiter
from controller.service.submissions import QueuedSubmission, SubmissionQueue


class Recorder:
    """The queue's submit callback: records the order, and can hold a job's worker."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.cond = threading.Condition()
        self.hold: dict[str, threading.Event] = {}

    def __call__(self, entry: QueuedSubmission) -> None:
        gate = self.hold.get(entry.job_id)
        if gate is not None:
            gate.wait(30)
        with self.cond:
            self.order.append(entry.job_id)
            self.cond.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.order) >= count, timeout=30), self.order
            return list(self.order)


def test_under_a_quota_the_oldest_ready_job_goes_first_whatever_the_arrival_order():
    limiter = RateLimiter(4, window=600)
    for _ in range(4):
        assert limiter.acquire()  # the quota is used up: everything below queues
    recorder = Recorder()
    queue = SubmissionQueue(limiter, recorder, workers=1)
    try:
        arrivals = [("late-reclaim", 50.0), ("first-reclaim", 10.0), ("new-job", 70.0), ("second", 20.0)]
        for job_id, ready_at in arrivals:
            queue.offer(job_id, 2, action=None, ready_at=ready_at)
        assert [queue.position(j) for j, _ in arrivals] == [3, 1, 4, 2]
        assert queue.waiting() == 4
        for _ in range(4):
            limiter.give_back()  # the quota frees up
        assert recorder.wait_for(4) == ["first-reclaim", "second", "late-reclaim", "new-job"]
        assert queue.position("new-job") is None and queue.waiting() == 0
    finally:
        queue.stop()


def test_an_offer_repeated_while_queued_or_being_submitted_creates_once():
    limiter = RateLimiter(100, window=60)
    recorder = Recorder()
    recorder.hold["a"] = threading.Event()
    queue = SubmissionQueue(limiter, recorder, workers=2)
    try:
        queue.offer("a", 1, action=None, ready_at=1.0)
        # The worker holds "a" now (in flight): offers of the same attempt change nothing.
        for _ in range(3):
            queue.offer("a", 1, action=None, ready_at=1.0)
        queue.offer("b", 1, action=None, ready_at=2.0)
        assert recorder.wait_for(1) == ["b"]  # a slow job does not hold up another
        recorder.hold["a"].set()
        assert recorder.wait_for(2) == ["b", "a"]
        assert queue.waiting() == 0
        assert len(limiter._granted) == 2  # one slot per created job, none for the repeats
    finally:
        queue.stop()


def test_a_newer_attempt_keeps_the_jobs_place_and_a_cleared_queue_gives_its_slot_back():
    limiter = RateLimiter(1, window=600)
    assert limiter.acquire()
    recorder = Recorder()
    queue = SubmissionQueue(limiter, recorder, workers=1)
    try:
        queue.offer("x", 1, action=None, ready_at=5.0)
        queue.offer("y", 1, action=None, ready_at=6.0)
        queue.offer("x", 2, action=None, ready_at=9.0)  # x moved on: its new attempt stays first
        assert queue.position("x") == 1 and queue.position("y") == 2
        queue.clear()
        assert queue.waiting() == 0 and queue.position("x") is None
        queue.offer("z", 1, action=None, ready_at=1.0)
        limiter.give_back()
        assert recorder.wait_for(1) == ["z"]
    finally:
        queue.stop()
