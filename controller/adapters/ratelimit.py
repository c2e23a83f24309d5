"""A thread-safe sliding-window rate limiter for Vertex AI's per-minute quotas."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Allows at most `limit` acquisitions in any `window` seconds; `acquire` waits for room.

    Fairness across jobs does not come from here: the create lane (`adapters.create_lane`)
    decides which job may take the next slot, oldest job first.
    """

    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.window = window
        self._clock = clock
        self._granted: collections.deque[float] = collections.deque()
        self._cond = threading.Condition()

    def acquire(self, timeout: float | None = None) -> bool:
        """Take one slot; False if none freed up within `timeout` seconds."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                now = self._clock()
                while self._granted and self._granted[0] <= now - self.window:
                    self._granted.popleft()
                if len(self._granted) < self.limit:
                    self._granted.append(now)
                    return True
                wait = self._granted[0] + self.window - now
                if deadline is not None:
                    if now >= deadline:
                        return False
                    wait = min(wait, deadline - now)
                self._cond.wait(max(wait, 0.001))

    def free_in(self) -> float:
        """Seconds until a slot is free (0.0: one is free now)."""
        with self._cond:
            now = self._clock()
            while self._granted and self._granted[0] <= now - self.window:
                self._granted.popleft()
            if len(self._granted) < self.limit:
                return 0.0
            return max(0.0, self._granted[0] + self.window - now)

    def free_now(self) -> int:
        """How many slots could be taken at once right now."""
        with self._cond:
            now = self._clock()
            while self._granted and self._granted[0] <= now - self.window:
                self._granted.popleft()
            return max(0, self.limit - len(self._granted))

    def give_back(self) -> None:
        """Return the latest slot unused (it was taken for work that went away meanwhile)."""
        with self._cond:
            if self._granted:
                self._granted.pop()
                self._cond.notify_all()
