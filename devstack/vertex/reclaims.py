"""Spot reclaims at random, at a set rate: what a region's Spot capacity does to running jobs.

Compute Engine may preempt a Spot VM at any time; how often depends on the zone, the machine
type and the time, and Google publishes no rate (https://cloud.google.com/compute/docs/instances/spot).
A devstack region is given one (`VertexEmulator.set_reclaim_rate`): every running Spot job is
reclaimed, as `preempt` does it, after an exponentially distributed time at `per_hour`. A
thread of the emulator draws them; jobs on FLEX_START or STANDARD are never touched.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any

# How often the running Spot jobs are looked at: reclaims land within this much of their draw.
TICK_SECONDS = 0.2


class ReclaimProcess:
    def __init__(self, emulator: Any):
        self._emulator = emulator
        self._per_hour = 0.0
        self._rng = random.Random()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def configure(self, per_hour: float, seed: int | None = None) -> None:
        if not (per_hour >= 0.0 and math.isfinite(per_hour)):
            raise ValueError(f"per_hour must be a finite rate, not negative (got {per_hour!r})")
        with self._lock:
            self._per_hour = float(per_hour)
            if seed is not None:
                self._rng = random.Random(seed)
            if self._per_hour > 0.0 and self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="devstack-reclaims", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        while not self._wake.wait(TICK_SECONDS):
            with self._lock:
                rate = self._per_hour / 3600.0
                chance = -math.expm1(-rate * TICK_SECONDS)
                picked = [n for n in self._emulator.spot_running() if self._rng.random() < chance]
            for name in picked:
                try:
                    self._emulator.preempt(name)
                except KeyError:
                    pass  # deleted meanwhile
