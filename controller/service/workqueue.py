"""The one door: a keyed, de-duplicating, delaying work queue, served by N workers.

Everything that happens to a job (a request recorded, a Vertex event, a cancel, a backoff that
ran out, the periodic pass) becomes the job's id in this queue; a worker then runs the one
handler, `reconcile(job_id)`, which returns the delay before the job's next look (or None).
The model is Kubernetes controller-runtime's workqueue:

  - a key waits in the queue at most once: adding it again while it waits changes nothing;
  - a key is never served by two workers at once: added while a worker serves it, it is marked
    and queued again when that worker is done (so the last change is always looked at);
  - `add_after` keeps one wake-up per key, the earliest; an immediate `add` supersedes it, since
    every reconcile derives the next wake-up again from the stored state;
  - the backlog is bounded: a new key is refused when `max_keys` keys wait. Safe because every
    source is level-triggered: the periodic pass offers every live job again.

Delays are measured on an injectable clock. The workers wait on a condition (never a sleep), so a
test with a hand-driven clock calls `wake()` after moving it, or serves keys on its own thread
with `run_ready()`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from controller import logs

log = logs.get("relaunch.workqueue")

Handler = Callable[[str], float | None]  # reconcile(key) -> seconds until the next look, or None

# After a handler raised: wait this long, doubling per failure in a row, up to the cap.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 60.0

# A sweep's next look waits while another key's look is being served, for at most this long
# from that look's start: a recovery's look (tens of milliseconds) then has the interpreter to
# itself, and a look held up in a slow call (a Vertex outage) holds the sweep up no longer. Under
# a steady stream of events (a flood of requests, a mass reclaim) the sweep goes on in the gaps,
# or when the stream ends: it is the safety net for lost events, and every event is being served.
SWEEP_YIELDS_SECONDS = 0.25


@dataclass(frozen=True)
class QueueStats:
    ready: int  # keys waiting for a worker now
    delayed: int  # keys waiting for their wake-up
    serving: int  # keys a worker is serving
    oldest_ready_seconds: float  # how long the oldest ready key has waited (0 when none)
    served: int  # keys handed to workers so far
    waited_seconds_total: float  # time in queue of every key served, summed (ready -> served)
    waited_seconds_max: float
    refused: int  # adds refused because the backlog was full


class WorkQueue:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
        on_served: Callable[[float], None] | None = None,
        max_sweeping: int | None = None,
    ):
        """`max_sweeping`: at most this many workers serve keys only a sweep asked for at once
        (None: one), so that the other workers are free the moment an event's key comes. One,
        because a pass's looks read nothing but what the pass listed: they are interpreter work,
        which the interpreter lock runs one thread at a time however many serve them, and each
        thread that serves them side by side takes another share of it from a recovery's look
        (with four, a recovery during a pass took 3 to 6 times its usual time)."""
        self._clock = clock
        self._max_keys = max_keys
        self._max_sweeping = max_sweeping
        self._on_served = on_served or (lambda waited: None)
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._sweep_lane: deque[str] = deque()  # ready keys only a sweep asked for, served last
        self._swept: set[str] = set()  # the keys in the sweep lane (others there are stale)
        self._sweeping: set[str] = set()  # keys served that only a sweep asked for
        self._ready_since: dict[str, float] = {}  # key -> when it became ready (waiting or marked)
        self._serving: set[str] = set()
        self._taken: dict[str, tuple[float, int]] = {}  # key served -> (its wait, sweep keys waiting)
        self._asked_since: dict[str, float] = {}  # key served that something asked for -> since when
        self._yielding = 0  # long looks waiting in `yield_to_asked`
        self._delayed: list[tuple[float, int, str]] = []  # heap; stale entries skipped
        self._due: dict[str, float] = {}  # key -> its one wake-up
        self._sequence = itertools.count()
        self._failures: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._served = 0
        self._waited_total = 0.0
        self._waited_max = 0.0
        self._refused = 0

    # --- adding ------------------------------------------------------------------------------
    def add(self, key: str, *, sweep: bool = False) -> bool:
        """Look at `key` as soon as a worker is free. False: refused, the backlog is full.

        `sweep`: a look that nothing in particular asked for (the periodic pass offering every
        live job). Such keys are served after every other ready key, so that an event or a
        wake-up never waits behind a pass's thousand jobs; a key swept and then asked for by an
        event moves to the front lane."""
        with self._cond:
            if key in self._ready_since:
                if not sweep and key in self._swept:
                    self._swept.discard(key)  # promoted; its place in the sweep lane is skipped
                    if key not in self._serving:
                        self._ready.append(key)
                        self._cond.notify()
                return True  # waiting (or marked to run again) already
            if self._full(key):
                self._refused += 1
                return False
            self._due.pop(key, None)
            self._ready_since[key] = self._clock()
            if key not in self._serving:
                if sweep:
                    self._swept.add(key)
                    self._sweep_lane.append(key)
                else:
                    self._ready.append(key)
                self._cond.notify()
            return True

    def add_after(self, key: str, delay: float) -> bool:
        """Look at `key` in `delay` seconds (an earlier wake-up it has already stays)."""
        if delay <= 0:
            return self.add(key)
        with self._cond:
            if key in self._ready_since:
                return True  # it will be looked at sooner; that look sets the next wake-up
            at = self._clock() + delay
            known = self._due.get(key)
            if known is not None and known <= at:
                return True
            if known is None and self._full(key):
                self._refused += 1
                return False
            self._due[key] = at
            heapq.heappush(self._delayed, (at, next(self._sequence), key))
            self._cond.notify()
            return True

    def _full(self, key: str) -> bool:
        return key not in self._due and len(self._ready_since) + len(self._due) >= self._max_keys

    def clear(self) -> None:
        """Forget every waiting key and wake-up (a controller that stops leading acts on none);
        keys being served finish their turn."""
        with self._cond:
            self._ready.clear()
            self._sweep_lane.clear()
            self._swept.clear()
            self._ready_since.clear()
            self._delayed.clear()
            self._due.clear()
            self._failures.clear()

    # --- serving -----------------------------------------------------------------------------
    def start(self, workers: int, handler: Handler, *, name: str = "reconcile") -> None:
        """Serve keys with `workers` daemon threads (daemon: a call stuck in a retrying RPC must
        not hold the process past its shutdown budget)."""
        if self._max_sweeping is None:
            self._max_sweeping = 1
        for index in range(workers):
            thread = threading.Thread(
                target=self._serve, args=(handler,), name=f"{name}-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Workers end after the key they are serving; waiting keys are dropped."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Re-check wake-ups now (the clock was moved by hand)."""
        with self._cond:
            self._cond.notify_all()

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a key is ready (or its wake-up is due), at most `timeout` seconds; True
        when one is. For a driver that serves keys on its own thread with `run_ready`."""
        with self._cond:
            self._promote_due()
            if not self._ready and not self._swept:
                wait = timeout
                if self._delayed:
                    wait = min(wait, max(0.0, self._delayed[0][0] - self._clock()))
                if wait > 0:
                    self._cond.wait(wait)
                self._promote_due()
            return bool(self._ready or self._swept)

    def run_ready(self, handler: Handler) -> int:
        """Serve every key due now on the caller's thread (tests and single-threaded drivers)."""
        served = 0
        while True:
            key = self._take(block=False)
            if key is None:
                return served
            self._run(handler, key)
            served += 1

    def _serve(self, handler: Handler) -> None:
        while True:
            key = self._take(block=True)
            if key is None:
                return
            self._run(handler, key)

    def _run(self, handler: Handler, key: str) -> None:
        try:
            delay = handler(key)
        except Exception:
            log.exception("reconcile failed; will look again", job_id=key)
            self._done(key, failed=True)
            return
        self._done(key, failed=False, delay=delay)

    def _take(self, *, block: bool) -> str | None:
        with self._cond:
            while not self._stopped:
                self._promote_due()
                key = self._next_ready()
                if key is not None:
                    self._serving.add(key)
                    now = self._clock()
                    if key not in self._sweeping:
                        self._asked_since[key] = now
                    waited = max(0.0, now - self._ready_since.pop(key))
                    self._taken[key] = (waited, len(self._swept))
                    self._served += 1
                    self._waited_total += waited
                    self._waited_max = max(self._waited_max, waited)
                    break
                if not block:
                    return None
                timeout = None
                if self._delayed:
                    timeout = max(0.001, self._delayed[0][0] - self._clock())
                if self._swept and (held := self._sweep_held_until()) is not None:
                    resume = max(0.001, held - self._clock())
                    timeout = resume if timeout is None else min(timeout, resume)
                self._cond.wait(timeout)
            else:
                return None
        self._on_served(waited)
        return key

    def _next_ready(self) -> str | None:
        if self._ready:
            return self._ready.popleft()
        if self._max_sweeping is not None and len(self._sweeping) >= self._max_sweeping:
            return None  # the rest of the workers stay free for events
        if self._sweep_held_until() is not None:
            return None  # another key's look goes first
        while self._sweep_lane:
            key = self._sweep_lane.popleft()
            if key in self._swept:
                self._swept.discard(key)
                self._sweeping.add(key)
                return key
        return None

    def yield_to_asked(self, own: str) -> None:
        """For a long look's interpreter-bound steps (the periodic pass, served under key `own`):
        wait while a look that something asked for is under way, at most SWEEP_YIELDS_SECONDS
        from its start, the rule the sweep's looks follow; called between steps of a few
        milliseconds, so that a recovery's look has the interpreter nearly to itself."""
        with self._cond:
            self._yielding += 1
            try:
                while not self._stopped:
                    starts = [at for key, at in self._asked_since.items() if key != own]
                    wait = (max(starts) + SWEEP_YIELDS_SECONDS - self._clock()) if starts else 0.0
                    if wait <= 0:
                        return
                    self._cond.wait(wait)
            finally:
                self._yielding -= 1

    def _sweep_held_until(self) -> float | None:
        """While a look that something asked for began less than SWEEP_YIELDS_SECONDS ago, the
        clock time at which the last such hold ends; None when the sweep may go on."""
        if not self._asked_since:
            return None
        until = max(self._asked_since.values()) + SWEEP_YIELDS_SECONDS
        return until if until > self._clock() else None

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            at, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) != at:
                continue  # superseded by an earlier wake-up or an immediate add
            del self._due[key]
            if key in self._ready_since:
                continue
            self._ready_since[key] = at
            if key not in self._serving:
                self._ready.append(key)

    def _done(self, key: str, *, failed: bool, delay: float | None = None) -> None:
        with self._cond:
            self._serving.discard(key)
            self._taken.pop(key, None)
            if self._asked_since.pop(key, None) is not None:
                if self._yielding:
                    self._cond.notify_all()  # a long look waiting in `yield_to_asked` may go on
                elif self._swept:
                    self._cond.notify()  # the sweep may go on
            if key in self._sweeping:
                self._sweeping.discard(key)
                self._cond.notify()  # a worker may wait for the sweep's share
            if failed:
                streak = self._failures.get(key, 0) + 1
                self._failures[key] = streak
                delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (streak - 1))
            else:
                self._failures.pop(key, None)
            if key in self._ready_since:  # added while it was served: once more, now
                self._ready.append(key)
                self._cond.notify()
                return
        if delay is not None:
            self.add_after(key, delay)

    # --- what it holds -------------------------------------------------------------------------
    def stats(self) -> QueueStats:
        with self._cond:
            now = self._clock()
            oldest = max((now - at for at in self._ready_since.values()), default=0.0)
            return QueueStats(
                ready=len(self._ready_since),
                delayed=len(self._due),
                serving=len(self._serving),
                oldest_ready_seconds=max(0.0, oldest),
                served=self._served,
                waited_seconds_total=self._waited_total,
                waited_seconds_max=self._waited_max,
                refused=self._refused,
            )

    def taken(self, key: str) -> tuple[float, int]:
        """For a key a worker serves now: how long it waited in the queue, and how many keys only
        a sweep asked for were still waiting when it was taken ((0.0, 0) for a key not served)."""
        with self._cond:
            return self._taken.get(key, (0.0, 0))

    def is_waiting(self, key: str) -> bool:
        with self._cond:
            return key in self._ready_since or key in self._due or key in self._serving
