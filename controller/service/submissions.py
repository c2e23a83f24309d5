"""Submissions that need a CustomJob create slot, served in order and never on a caller's thread.

After a zone-wide reclaim hundreds of jobs want a create at once, and the create quota (60 a
minute by default) lets them through a few at a time. Whoever decided a job needs a create (a
Pub/Sub callback, a timer, the reconcile pass) only queues it here and returns; so neither the
intake, the event path nor the lease ever waits for quota.

Order: the job that has waited longest goes first, i.e. the oldest preemption (or request) first:
a job is ranked by when it became ready to submit (the end of the attempt it replaces, or its
first attempt's intent), ties broken by arrival. One dispatcher thread takes a create slot
first, then hands the head of the queue to a worker; so the slot is held before the worker looks
the attempt up by its labels (a wait for quota never sits between the look-up and the create),
and a slow submission (Vertex retrying through an outage) holds one worker, not the queue.
When nothing waits and a slot is free, an offer goes straight to a worker.

Only an accelerator, like the timers: the job's state in the store says it is submitting, and
the reconcile pass queues it again after a restart.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller import logs
from controller.adapters.ratelimit import RateLimiter
from controller.service.workers import DaemonPool

log = logs.get("relaunch.submissions")


@dataclass(frozen=True, order=True)
class QueuedSubmission:
    ready_at: float  # when the job became ready to submit: older first
    sequence: int  # arrival order among equals
    job_id: str = field(compare=False)
    attempt: int = field(compare=False)
    action: Any = field(compare=False)  # the core's SubmitAttempt


class SubmissionQueue:
    def __init__(
        self,
        limiter: RateLimiter,
        submit: Callable[[QueuedSubmission], None],
        *,
        workers: int = 8,
    ):
        self._limiter = limiter
        self._submit = submit
        self._heap: list[QueuedSubmission] = []
        self._queued: dict[str, QueuedSubmission] = {}  # job -> its entry in the heap
        self._in_flight: dict[str, int] = {}  # job -> attempt a worker is submitting
        self._sequence = itertools.count()
        self._cond = threading.Condition()
        self._workers = DaemonPool(workers, "submit")
        self._stopped = False
        self._dispatcher = threading.Thread(target=self._dispatch, name="submit-dispatch", daemon=True)
        self._dispatcher.start()

    def offer(self, job_id: str, attempt: int, action: Any, ready_at: float) -> None:
        """Queue this attempt's create (a no-op if it is queued or being submitted already)."""
        with self._cond:
            if self._in_flight.get(job_id) == attempt:
                return  # the worker on it applies its outcome; the core retries a failure
            queued = self._queued.get(job_id)
            if queued is not None:
                if queued.attempt == attempt:
                    return
                ready_at = min(ready_at, queued.ready_at)  # a newer attempt keeps the job's place
            entry = QueuedSubmission(ready_at, next(self._sequence), job_id, attempt, action)
            if not self._queued and self._limiter.acquire(timeout=0):
                # Nobody waits and a slot is free: straight to a worker (one handoff less).
                self._in_flight[job_id] = attempt
                self._workers.submit(lambda entry=entry: self._run(entry))
                return
            self._queued[job_id] = entry  # a replaced entry is skipped when popped
            heapq.heappush(self._heap, entry)
            self._cond.notify_all()

    def position(self, job_id: str) -> int | None:
        """1 for the next job to get a create slot; None when the job is not waiting."""
        with self._cond:
            entry = self._queued.get(job_id)
            if entry is None:
                return None
            return 1 + sum(1 for other in self._queued.values() if other < entry)

    def waiting(self) -> int:
        with self._cond:
            return len(self._queued)

    def clear(self) -> None:
        """Forget everything queued (a controller that stops leading submits nothing)."""
        with self._cond:
            self._heap.clear()
            self._queued.clear()
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._workers.stop()

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._queued and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            # The slot first (outside the lock: offers keep coming while we wait for quota).
            if not self._limiter.acquire(timeout=1.0):
                continue
            entry = self._pop()
            if entry is None:
                self._limiter.give_back()  # cleared while we waited: nobody used this slot
                continue
            self._workers.submit(lambda entry=entry: self._run(entry))

    def _pop(self) -> QueuedSubmission | None:
        with self._cond:
            while self._heap:
                entry = heapq.heappop(self._heap)
                if self._queued.get(entry.job_id) is entry:
                    del self._queued[entry.job_id]
                    self._in_flight[entry.job_id] = entry.attempt
                    return entry
            return None

    def _run(self, entry: QueuedSubmission) -> None:
        try:
            self._submit(entry)
        except Exception:
            log.exception("queued submission failed", job_id=entry.job_id, attempt=entry.attempt)
        finally:
            with self._cond:
                if self._in_flight.get(entry.job_id) == entry.attempt:
                    del self._in_flight[entry.job_id]
