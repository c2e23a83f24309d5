"""A thread-safe rate limiter for Vertex AI's per-minute quotas."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

_ROUNDING = 1e-9  # a token refilled to 0.9999999999 by float arithmetic is a token


class RateLimiter:
    """Allows at most `limit` acquisitions in any `window` seconds; `acquire` waits for room.

    Without `burst` (the create quota): a sliding window; a burst of `limit` at once, then one
    more each time the oldest grant leaves the window.

    With `burst` (the read budget): the budget is spent evenly: a bucket of `burst` tokens refilled
    at (limit - burst) / window per second. Still never more than `limit` in any window (the
    bucket, plus what refills over one window), but once the bucket is empty each grant waits
    1/rate seconds, never for the whole window to slide by. With a sliding window, a burst of
    reads (a pass, a flood of events, a test polling hard) spent the minute's budget in seconds
    and then stalled every read, a recovery's included, for the rest of the minute.

    With `reserve` (only with `burst`): the last `reserve` tokens of the bucket are kept for
    urgent acquisitions (`acquire(urgent=True)`): a routine one waits until the bucket holds more
    than the reserve, an urgent one takes any whole token. So a stream of routine reads that keeps
    the budget spent (the Gets that a burst of starting jobs' events asks for, a pass) never makes
    the read that can start a recovery wait for the refill; every window's bound stays as above,
    as no grant takes the bucket below empty.

    Fairness across jobs does not come from here: the create lane (`adapters.create_lane`)
    decides which job may take the next slot, oldest job first.
    """

    def __init__(
        self,
        limit: int,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        burst: int | None = None,
        reserve: int = 0,
    ):
        self.limit = limit
        self.window = window
        self._clock = clock
        self._granted: collections.deque[float] = collections.deque()
        self._cond = threading.Condition()
        # A budget of one a window has nothing to spread: a plain window.
        self._burst = None if burst is None or limit < 2 else max(1, min(burst, limit - 1))
        if self._burst is not None:
            self._rate = (limit - self._burst) / window  # tokens a second
            self._tokens = float(self._burst)
            self._filled_at = clock()
        # At least one token stays takeable by routine acquisitions.
        self._reserve = 0 if self._burst is None else max(0, min(reserve, self._burst - 1))

    def acquire(self, timeout: float | None = None, *, urgent: bool = False) -> bool:
        """Take one slot; False if none freed up within `timeout` seconds. `urgent`: may take
        the reserve's tokens too."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                now = self._clock()
                wait = self._take(now, urgent)
                if wait <= 0:
                    return True
                if deadline is not None:
                    if now >= deadline:
                        return False
                    wait = min(wait, deadline - now)
                self._cond.wait(max(wait, 0.001))

    def _take(self, now: float, urgent: bool = False) -> float:
        """Take a slot now (0.0), or say how long until one frees up."""
        if self._burst is not None:
            self._refill(now)
            needed = 1.0 + (0 if urgent else self._reserve)
            if self._tokens >= needed - _ROUNDING:
                self._tokens = max(0.0, self._tokens - 1.0)
                return 0.0
            return (needed - self._tokens) / self._rate
        self._slide(now)
        if len(self._granted) < self.limit:
            self._granted.append(now)
            return 0.0
        return self._granted[0] + self.window - now

    def _refill(self, now: float) -> None:
        assert self._burst is not None
        self._tokens = min(float(self._burst), self._tokens + (now - self._filled_at) * self._rate)
        self._filled_at = now

    def _slide(self, now: float) -> None:
        while self._granted and self._granted[0] <= now - self.window:
            self._granted.popleft()

    def free_in(self) -> float:
        """Seconds until a slot is free for a routine acquisition (0.0: one is free now)."""
        with self._cond:
            now = self._clock()
            if self._burst is not None:
                self._refill(now)
                needed = 1.0 + self._reserve
                return 0.0 if self._tokens >= needed - _ROUNDING else (needed - self._tokens) / self._rate
            self._slide(now)
            if len(self._granted) < self.limit:
                return 0.0
            return max(0.0, self._granted[0] + self.window - now)

    def free_now(self) -> int:
        """How many slots routine acquisitions could take at once right now."""
        with self._cond:
            now = self._clock()
            if self._burst is not None:
                self._refill(now)
                return max(0, int(self._tokens - self._reserve + _ROUNDING))
            self._slide(now)
            return max(0, self.limit - len(self._granted))

    def give_back(self) -> None:
        """Return the latest slot unused (it was taken for work that went away meanwhile)."""
        with self._cond:
            if self._burst is not None:
                self._tokens = min(float(self._burst), self._tokens + 1.0)
                self._cond.notify_all()
            elif self._granted:
                self._granted.pop()
                self._cond.notify_all()
