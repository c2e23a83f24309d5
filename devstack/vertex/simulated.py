"""Simulated replicas: a CustomJob whose replicas are not processes, so that one small machine can
host thousands of jobs (the scale benchmarks).

A simulated job goes through the same JobService RPCs, the same runner (`devstack.vertex.jobrun`),
the same state transitions, timestamps, service log lines and Cloud Logging events as a job with
real replicas; only the replica itself is a stand-in object. Its primary replica "exits" with
``exit_code`` after ``run_seconds`` (never, when None); the others run until the job ends, as
workers do. A SIGTERM (a reclaim, a cancel, the primary's success) ends a simulated replica at
once with status 143, as a trainer that saves and exits promptly would; a SIGKILL with 137.

What is NOT simulated: the replica's own work (no process, no CLUSTER_SPEC consumer, no torch),
its log output beyond one line, checkpoints, and the exit record a real trainer writes to GCS.

A job is simulated when the stack is (``simulation=`` on `start_vertex` / `DevStack`, or
``VertexEmulator.simulate``), or when any of its worker pools' container ``env`` sets
``DEVSTACK_SIMULATED_RUN_SECONDS`` (a number of seconds, or ``forever``); the pool env may also
set ``DEVSTACK_SIMULATED_EXIT_CODE``. A job's own variables win over the stack's setting.
"""

from __future__ import annotations

import heapq
import itertools
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1 import CustomJobSpec

from devstack.vertex.replicas import ReplicaPlan

RUN_SECONDS_ENV = "DEVSTACK_SIMULATED_RUN_SECONDS"
EXIT_CODE_ENV = "DEVSTACK_SIMULATED_EXIT_CODE"
FOREVER = "forever"


@dataclass(frozen=True)
class Simulation:
    """How a simulated job's primary replica ends: ``exit_code`` after ``run_seconds`` (None: it
    runs until the job is reclaimed, cancelled or times out)."""

    run_seconds: float | None = None
    exit_code: int = 0

    def __post_init__(self) -> None:
        if self.run_seconds is not None and (math.isnan(self.run_seconds) or self.run_seconds < 0):
            raise ValueError("run_seconds must be a non-negative number or None")


def _pool_env(spec: CustomJobSpec) -> dict[str, str]:
    env: dict[str, str] = {}
    for pool in spec.worker_pool_specs:
        env.update({var.name: var.value for var in pool.container_spec.env})
    return env


def simulation_for(spec: CustomJobSpec, stack_default: Simulation | None) -> Simulation | None:
    """The job's own simulation (from its pools' env), else the stack's; None runs real processes.
    ValueError for a malformed variable (the create is refused with it)."""
    env = _pool_env(spec)
    if RUN_SECONDS_ENV not in env:
        return stack_default
    raw = env[RUN_SECONDS_ENV].strip().lower()
    try:
        run_seconds = None if raw == FOREVER else float(raw)
        exit_code = int(env.get(EXIT_CODE_ENV, "0"))
        return Simulation(run_seconds, exit_code)
    except ValueError as exc:
        raise ValueError(
            f"{RUN_SECONDS_ENV} must be a number of seconds or {FOREVER!r} and {EXIT_CODE_ENV} an "
            f"integer: {exc}"
        ) from exc


class Alarms:
    """One thread that runs callbacks at their time: thousands of simulated replicas, one thread."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def at(self, delay_seconds: float, callback: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_seconds, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="vertex-sim-alarms", daemon=True)
                self._thread.start()
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
            callback()  # outside our lock: it takes the emulator's


@dataclass(eq=False)
class SimulatedReplica:
    """Looks like `devstack.vertex.replicas.Replica` to the runner and to `terminate`."""

    plan: ReplicaPlan
    log_path: Path
    on_exit: Callable[[SimulatedReplica], None]
    process: None = None
    launch_error: str | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    out_of_memory: bool = False
    _status: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def returncode(self) -> int | None:
        return self._status

    @property
    def exit_status(self) -> int | None:
        return self._status

    def exit(self, status: int) -> None:
        """End the replica with ``status`` unless it has ended already."""
        with self._lock:
            if self._status is not None:
                return
            self._status = status
        self.exited.set()
        self.on_exit(self)

    def group_alive(self) -> bool:
        return self._status is None

    def signal_group(self, signum: int) -> None:
        if signum in (signal.SIGTERM, signal.SIGKILL):
            self.exit(128 + signum)


def launch_simulated(
    plan: ReplicaPlan,
    log_dir: Path,
    simulation: Simulation,
    alarms: Alarms,
    on_exit: Callable[[SimulatedReplica], None],
) -> SimulatedReplica:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{plan.name}.log"
    with open(log_path, "a") as log_file:
        log_file.write(f"devstack: simulated replica (no process), run_seconds={simulation.run_seconds}\n")
    replica = SimulatedReplica(plan, log_path, on_exit)
    if plan.pool == 0 and plan.index == 0 and simulation.run_seconds is not None:
        code = simulation.exit_code
        alarms.at(simulation.run_seconds, lambda: replica.exit(code))
    return replica
