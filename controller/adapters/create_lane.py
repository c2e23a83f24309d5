"""Which job may take the next CustomJob create slot: the one that has waited longest.

After a zone-wide reclaim hundreds of jobs want a create at once, and the create quota (60 a
minute by default) lets a few through at a time. A reconcile that wants a create asks the lane
(`take`); the lane answers at once, never blocking the worker: either a slot is the job's now,
or how long until its turn, which the reconcile returns as its requeue delay. A job's place is
when it became ready to submit (the end of the attempt it replaces, or its first attempt's
intent), ties broken by arrival.

A job never submitted asks with `turn_in` before it decides, taking no slot: until its turn it
has nothing to record (its first attempt's intent is written when the turn comes, just before
the create).

The lane holds no thread and calls nobody back. It is only an accelerator: the stored state says
a job is accepted or submitting, so after a restart every such job joins the lane again on its
next look. A place not asked about for `forget_after` seconds is dropped (its job went away).
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from controller.adapters.ratelimit import RateLimiter

# The shortest wait handed back: a reconcile looks again no sooner than this.
MIN_WAIT_SECONDS = 0.05


class CreateLane:
    def __init__(
        self,
        limiter: RateLimiter,
        *,
        clock: Callable[[], float] = time.monotonic,
        forget_after: float = 600.0,
    ):
        self._limiter = limiter
        self._clock = clock
        self._forget_after = forget_after
        self._places: dict[str, tuple[float, int]] = {}  # job -> (ready at, arrival)
        # The same places in order, so that "how many are ahead" is a bisection, not a count of
        # every waiting job (a backlog of thousands asks once each).
        self._order: list[tuple[float, int]] = []
        self._asked: OrderedDict[str, float] = OrderedDict()  # job -> when it last asked, oldest first
        self._arrival = itertools.count()
        # Stays: the lane orders every waiting job, so all queue workers (one job each) and the
        # HTTP status read this one map: an in-memory map shared across threads.
        self._lock = threading.Lock()

    def take(self, job_id: str, ready_at: float) -> float:
        """0.0: a create slot is taken for this job (use it, or `give_back`); otherwise the
        seconds until the job's turn, when it should ask again."""
        with self._lock:
            ahead = self._place(job_id, ready_at)
            if ahead < self._limiter.free_now() and self._limiter.acquire(timeout=0):
                self._unorder(self._places.pop(job_id))
                del self._asked[job_id]
                return 0.0
            return self._wait(ahead)

    def turn_in(self, job_id: str, ready_at: float) -> float:
        """The seconds until the job's turn, as `take` answers, but taking no slot: 0.0 when a
        slot would be the job's now (then it decides, and `take`s it with its create)."""
        with self._lock:
            ahead = self._place(job_id, ready_at)
            return 0.0 if ahead < self._limiter.free_now() else self._wait(ahead)

    def _place(self, job_id: str, ready_at: float) -> int:
        """Queue the job (or keep its place) and say how many are ahead of it."""
        now = self._clock()
        self._drop_forgotten(now)
        place = self._places.get(job_id)
        if place is None or place[0] > ready_at:
            if place is not None:
                self._unorder(place)
            place = (ready_at, place[1] if place else next(self._arrival))
            self._places[job_id] = place
            bisect.insort(self._order, place)
        self._asked[job_id] = now
        self._asked.move_to_end(job_id)
        return bisect.bisect_left(self._order, place)

    def _wait(self, ahead: int) -> float:
        rate = self._limiter.limit / self._limiter.window  # slots a second
        return max(MIN_WAIT_SECONDS, self._limiter.free_in() + ahead / rate)

    def give_back(self) -> None:
        self._limiter.give_back()

    def leave(self, job_id: str) -> None:
        """The job wants no create any more (it was cancelled, adopted, or ended)."""
        with self._lock:
            place = self._places.pop(job_id, None)
            if place is not None:
                self._unorder(place)
            self._asked.pop(job_id, None)

    def position(self, job_id: str) -> int | None:
        """1 for the next job to get a slot; None when the job is not waiting."""
        with self._lock:
            place = self._places.get(job_id)
            if place is None:
                return None
            return 1 + bisect.bisect_left(self._order, place)

    def waiting(self) -> int:
        with self._lock:
            return len(self._places)

    def clear(self) -> None:
        """A controller that stops leading submits nothing."""
        with self._lock:
            self._places.clear()
            self._order.clear()
            self._asked.clear()

    def _unorder(self, place: tuple[float, int]) -> None:
        del self._order[bisect.bisect_left(self._order, place)]  # places are unique (arrival)

    def _drop_forgotten(self, now: float) -> None:
        # Oldest asker first: stop at the first one asked about recently.
        while self._asked:
            job_id, at = next(iter(self._asked.items()))
            if now - at <= self._forget_after:
                return
            del self._asked[job_id]
            place = self._places.pop(job_id, None)
            if place is not None:
                self._unorder(place)
