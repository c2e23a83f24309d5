"""Subscription streams that are watched, not trusted: a StreamingPull that ended is noticed,
reported, and reopened with backoff.

The Pub/Sub client retries transient stream errors by itself; an error it will not retry
(the subscription is missing or was deleted, permission is denied, ...) completes the stream's
future with the exception and the stream stays dead. Left alone, the controller would look healthy
and hear nothing. Here each loop iteration calls `check()`: a finished future becomes a `problem`
(readiness says it), and the stream is reopened after 1, 2, 4, ... seconds (capped, with jitter),
so a subscription recreated later is picked up without a restart.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs

log = logs.get("relaunch.streams")


def describe_stream_error(subscription: str, error: BaseException | None) -> str:
    """One line an operator can act on."""
    if isinstance(error, gexc.NotFound):
        return f"subscription {subscription} not found"
    if isinstance(error, gexc.PermissionDenied):
        return f"permission denied on subscription {subscription}"
    if error is None:
        return f"stream on {subscription} ended"
    return f"stream on {subscription} failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"


class SupervisedStream:
    """One subscription's StreamingPull, reopened whenever it ends on its own."""

    def __init__(
        self,
        name: str,
        open_stream: Callable[[], object],
        subscription: str,
        *,
        max_backoff_seconds: float = 60.0,
        settle_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ):
        self.name = name
        self.subscription = subscription
        self._open_stream = open_stream  # returns a StreamingPullFuture
        self._max_backoff = max_backoff_seconds
        # A reopened stream to a missing subscription dies within milliseconds; it counts as
        # delivering again only once it has stayed open this long (no flapping readiness/alerts).
        self._settle = settle_seconds
        self._opened_at = 0.0
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._future: Any = None
        self._cancelled = False
        self._failures = 0  # consecutive ends without a healthy check in between
        self._retry_at: float | None = None
        self.problem: str | None = None

    def open(self) -> None:
        with self._lock:
            self._cancelled = False
            self._start()

    def _start(self) -> None:
        self._retry_at = None
        self._opened_at = self._clock()
        try:
            self._future = self._open_stream()
        except Exception as error:  # subscribe() itself refused (bad name, client closed)
            self._future = None
            self._failed(error)

    def check(self) -> str | None:
        """Notice an ended stream, reopen it when its backoff is over; returns the problem or None."""
        with self._lock:
            if self._cancelled:
                return self.problem
            future = self._future
            if future is not None and not future.done():
                if self.problem is None:
                    return None
                if self._clock() - self._opened_at < self._settle:
                    return self.problem  # reopened moments ago: not proven yet
                log.info("subscription stream delivering again", subscription=self.subscription)
                self.problem = None
                self._failures = 0
                return None
            if future is not None and self._retry_at is None:
                self._failed(future.exception(timeout=0))
            if self._retry_at is not None and self._clock() >= self._retry_at:
                log.info(
                    "reopening subscription stream", subscription=self.subscription, tries=self._failures
                )
                self._start()
            return self.problem

    def _failed(self, error: BaseException | None) -> None:
        self._failures += 1
        delay = min(self._max_backoff, 2.0 ** (self._failures - 1)) * self._rng.uniform(0.8, 1.0)
        self._retry_at = self._clock() + delay
        self.problem = describe_stream_error(self.subscription, error)
        log.error(
            "subscription stream is not delivering; will reopen",
            subscription=self.subscription,
            problem=self.problem,
            retry_in_seconds=round(delay, 1),
            failures_in_a_row=self._failures,
        )

    # The two calls the daemon's shutdown makes on a StreamingPullFuture.
    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            future = self._future
        if future is not None:
            future.cancel()

    def result(self, timeout: float | None = None) -> None:
        future = self._future
        if future is not None:
            future.result(timeout=timeout)
