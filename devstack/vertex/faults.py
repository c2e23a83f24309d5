"""Injected API failures and Vertex's per-minute request quotas, applied before an RPC is served."""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import grpc


def status_code(code: grpc.StatusCode | str | int) -> grpc.StatusCode:
    """Accept a StatusCode, its name ("UNAVAILABLE") or its number (14): HTTP callers send text."""
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, str):
        try:
            return grpc.StatusCode[code.strip().upper()]
        except KeyError as exc:
            raise ValueError(f"unknown gRPC status code {code!r}") from exc
    for candidate in grpc.StatusCode:
        if candidate.value[0] == code:
            return candidate
    raise ValueError(f"unknown gRPC status code {code!r}")


class ApiFaults:
    """Answer a random fraction of RPCs with an error code instead of serving them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rate = 0.0
        self._codes: tuple[grpc.StatusCode, ...] = ()
        self._random = random.Random()

    def configure(self, rate: float, codes: Iterable[grpc.StatusCode | str | int], seed: int | None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rate}")
        parsed = tuple(status_code(code) for code in codes)
        if rate > 0 and not parsed:
            raise ValueError("a non-zero fault rate needs at least one status code")
        if grpc.StatusCode.OK in parsed:
            raise ValueError("OK is not a fault")
        with self._lock:
            self._rate = rate
            self._codes = parsed if rate > 0 else ()
            self._random = random.Random(seed)

    def draw(self) -> grpc.StatusCode | None:
        """The code this call must fail with, or None to serve it."""
        with self._lock:
            if self._rate <= 0 or self._random.random() >= self._rate:
                return None
            return self._random.choice(self._codes)


class ApiDelays:
    """Serve chosen RPCs late (a slow ListCustomJobs, say): no documented latency is modelled;
    this is fault injection, e.g. to make a controller's reconcile pass slow. A delay is a fixed
    time, or a gate (`until`): the call is held until the gate is set (at most `HOLD_LIMIT`
    seconds, so a forgotten gate cannot wedge the stand-in). `only_if` picks the requests."""

    HOLD_LIMIT = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, tuple[float, threading.Event | None, Callable[[Any], bool] | None]] = {}
        self._held: dict[str, int] = {}  # method -> calls being held right now

    def configure(
        self,
        method: str,
        seconds: float = 0.0,
        *,
        until: threading.Event | None = None,
        only_if: Callable[[Any], bool] | None = None,
    ) -> None:
        if seconds < 0:
            raise ValueError(f"a delay must not be negative, got {seconds}")
        with self._lock:
            if seconds or until is not None:
                self._rules[method] = (seconds, until, only_if)
            else:
                self._rules.pop(method, None)

    def held(self, method: str) -> int:
        with self._lock:
            return self._held.get(method, 0)

    def apply(self, method: str, request: Any) -> None:
        """Called before serving `request`: wait as configured (on the serving thread)."""
        with self._lock:
            rule = self._rules.get(method)
            if rule is None or (rule[2] is not None and not rule[2](request)):
                return
            self._held[method] = self._held.get(method, 0) + 1
        seconds, gate, _ = rule
        try:
            if gate is not None:
                gate.wait(self.HOLD_LIMIT)
            else:
                time.sleep(seconds)  # injected latency, not synchronisation
        finally:
            with self._lock:
                self._held[method] -= 1


class SlidingWindowQuota:
    """At most ``limit`` accepted calls in any trailing 60 seconds (Vertex counts per minute)."""

    WINDOW_SECONDS = 60.0

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"quota limit must be >= 0, got {limit}")
        self.limit = limit
        self._accepted: deque[float] = deque()
        self._lock = threading.Lock()

    def try_acquire(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._accepted and now - self._accepted[0] >= self.WINDOW_SECONDS:
                self._accepted.popleft()
            if len(self._accepted) >= self.limit:
                return False
            self._accepted.append(now)
            return True


class Quotas:
    """Vertex's two limits that matter to Relaunch: job creations and other job-management calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creates: SlidingWindowQuota | None = None
        self._others: SlidingWindowQuota | None = None

    def configure(self, enabled: bool, creates_per_minute: int, other_per_minute: int) -> None:
        # Fresh windows on every change, so a test's limit is not eaten by earlier traffic.
        with self._lock:
            if enabled:
                self._creates = SlidingWindowQuota(creates_per_minute)
                self._others = SlidingWindowQuota(other_per_minute)
            else:
                self._creates = self._others = None

    def admit(self, is_create: bool) -> str | None:
        """None when the call may proceed, else the RESOURCE_EXHAUSTED message to answer with."""
        with self._lock:
            window = self._creates if is_create else self._others
        if window is None or window.try_acquire():
            return None
        metric = "custom_job_creation_requests" if is_create else "resource_management_requests"
        return (
            f"Quota exceeded for quota metric 'aiplatform.googleapis.com/{metric}' and limit "
            f"'{metric} per minute per region' ({window.limit}) of service 'aiplatform.googleapis.com'."
        )
