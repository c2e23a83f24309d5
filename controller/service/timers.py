"""In-memory wake-ups for jobs, earliest first.

Only an accelerator: every due time is also stored in the job's state (`next_attempt_at`), and
the reconcile pass ticks every live job, so a restart that loses this queue delays a wake-up by
at most one reconcile period.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable


class TimerQueue:
    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}  # job -> earliest pending wake-up
        self._cond = threading.Condition()

    def schedule(self, job_id: str, at: float) -> None:
        with self._cond:
            if job_id in self._due and self._due[job_id] <= at:
                return
            self._due[job_id] = at
            heapq.heappush(self._heap, (at, job_id))
            self._cond.notify_all()

    def cancel(self, job_id: str) -> None:
        with self._cond:
            self._due.pop(job_id, None)  # its heap entries are skipped when popped

    def clear(self) -> None:
        """Drop every pending wake-up (a controller that stops leading acts on none of them)."""
        with self._cond:
            self._heap.clear()
            self._due.clear()
            self._cond.notify_all()

    def pop_due(self) -> list[str]:
        now = self._clock()
        due = []
        with self._cond:
            while self._heap and self._heap[0][0] <= now:
                at, job_id = heapq.heappop(self._heap)
                if self._due.get(job_id) == at:
                    del self._due[job_id]
                    due.append(job_id)
        return due

    def wait(self, timeout: float) -> None:
        """Block until the earliest wake-up is due, something new is scheduled, or `timeout`."""
        with self._cond:
            wait = timeout
            if self._heap:
                wait = min(wait, max(0.0, self._heap[0][0] - self._clock()))
            if wait > 0:
                self._cond.wait(wait)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
