"""One CustomJob's life on its own thread: queue, provision, run the gang, restart it in place
where Vertex does, end it.

The thread only decides *what* happens; every state change goes through the host (the emulator,
seen through `JobHost` below, the runner's own view of it), which owns the lock, the job store and the log.
Behaviours and their sources: `devstack.vertex.behaviour`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from google.cloud.aiplatform_v1 import CustomJob, JobState, Scheduling
from google.rpc import code_pb2, status_pb2

from devstack.vertex import replicas as replica_procs
from devstack.vertex.behaviour import INTERNAL_TEXT, OUT_OF_MEMORY_TEXT, STOCKOUT_TEXT, VertexBehaviour
from devstack.vertex.replicas import Replica
from devstack.vertex.simulated import Alarms, SimulatedReplica, Simulation, launch_simulated

log = logging.getLogger(__name__)

TERMINAL_STATES = frozenset(
    {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
)
PRIMARY = "workerpool0-0"


# The emulator as one job's runner sees it; the runner never imports the emulator.
class JobHost(Protocol):
    """The emulator as one job's runner sees it: its lock, its settings, its state changes."""

    changed: threading.Condition
    stopping: bool
    region: str
    workdir: str
    python_bin_dir: str
    provisioning_seconds: float
    kill_grace_seconds: float
    behaviour: VertexBehaviour

    def advance(self, record: JobRecord, state: JobState) -> None: ...

    def finish(self, record: JobRecord, state: JobState, error: status_pb2.Status | None = None) -> None: ...

    def set_error(self, record: JobRecord, error: status_pb2.Status) -> None: ...

    def service_log(self, record: JobRecord, text: str) -> None: ...

    def stockout_queues_jobs(self) -> bool: ...

    def stockout_fails(self) -> bool: ...

    def quota_holds_new_jobs(self) -> bool: ...

    def capacity_mode(self, record: JobRecord | None = None) -> str | None: ...

    def take_capacity(self, record: JobRecord) -> bool: ...

    def wake(self, record: JobRecord | None = None) -> None: ...

    @property
    def alarms(self) -> Alarms: ...


@dataclass(frozen=True)
class Stockout:
    queue_seconds: float = 0.0
    fail: bool = False


CAPACITY_MODES = ("queue", "fail")


@dataclass(frozen=True)
class Capacity:
    """How many replicas of one machine type (None: of any) are to be had right now."""

    replicas: int
    machine_type: str | None = None
    mode: str = "queue"  # "queue": wait for machines; "fail": a stockout ending

    def gang(self, job: CustomJob) -> int:
        """Replicas of the limited machine type the job needs, all at once."""
        return sum(
            pool.replica_count
            for pool in job.job_spec.worker_pool_specs
            if self.machine_type is None or pool.machine_spec.machine_type == self.machine_type
        )


@dataclass(frozen=True)
class Reclaim:
    """A reclaim of the job's Spot VMs, as asked for by `preempt`."""

    grace_seconds: float
    end_job: bool
    # The FAILED job's error when this reclaim ends it; None: the behaviour's knobs. Google
    # documents neither the code nor the text of a reclaim, so a test can pick any per call.
    error_code: int | None = None
    error_text: str | None = None
    # `restart_in_place`: restart in place even where the (unknown) `disableRetries` knob would
    # stop reclaim restarts; still at most the documented six times.
    in_place: bool = False


@dataclass
class JobRecord:
    """The emulator's bookkeeping for one job; guarded by the host's lock."""

    job: CustomJob
    job_id: str
    stockout: Stockout
    # Notified on this job's own changes; it shares the host's lock, so that a transition wakes
    # this job's runner only, not every runner of thousands (the host's changes wake them all).
    wakeup: threading.Condition
    replicas: list[Replica | SimulatedReplica] = field(default_factory=list)
    # (generation, replica) in the order replicas exited; a restart starts a new generation.
    exit_order: list[tuple[int, Replica | SimulatedReplica]] = field(default_factory=list)
    generation: int = 0
    cancel_requested: bool = False
    reclaim: Reclaim | None = None
    reclaim_restarts: int = 0
    crash_restarts: int = 0
    thread: threading.Thread | None = None
    # Simulated replicas (devstack.vertex.simulated), fixed when the job is created; None: processes.
    simulation: Simulation | None = None
    # Replicas of a limited machine type this job holds (`VertexEmulator.set_capacity`), from
    # provisioning to its end; 0 when it holds none.
    capacity_held: int = 0

    @property
    def active(self) -> bool:
        return self.job.state not in TERMINAL_STATES

    @property
    def interrupted(self) -> bool:
        return self.cancel_requested or self.reclaim is not None

    @property
    def scheduling(self) -> Scheduling:
        return self.job.job_spec.scheduling


def status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message)


def _seconds_text(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:g}s"


class JobRunner:
    def __init__(self, host: JobHost, record: JobRecord) -> None:
        self.host = host
        self.record = record
        self._deadline: float | None = None  # scheduling.timeout, counted from the first start

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("vertex job %s: runner crashed", self.record.job_id)
            replica_procs.terminate(self.record.replicas, 0.0)
            self.host.finish(self.record, JobState.JOB_STATE_FAILED, status(code_pb2.INTERNAL, INTERNAL_TEXT))

    # ----- waiting ---------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], seconds: float | None) -> bool:
        """Block until ``predicate()`` holds (re-checked on every change) or ``seconds`` pass."""
        with self.record.wakeup:
            return self.record.wakeup.wait_for(predicate, timeout=seconds)

    def _stop_or_interrupt_seen(self) -> bool:
        return self.host.stopping or self.record.interrupted

    def _end_if_interrupted(self) -> bool:
        """Before replicas run, a stop, reclaim or cancel ends the job at once."""
        record, host = self.record, self.host
        if host.stopping:
            return True
        if record.reclaim is not None:
            self._fail(self._reclaim_error())
            return True
        if record.cancel_requested:
            host.finish(record, JobState.JOB_STATE_CANCELLED, status(code_pb2.CANCELLED, "CANCELED"))
            return True
        return False

    # ----- the life of the job ---------------------------------------------------------------

    def _run(self) -> None:
        if not self._wait_in_queue():
            return
        if not self._wait_for_capacity(JobState.JOB_STATE_QUEUED):
            return
        self.host.advance(self.record, JobState.JOB_STATE_PENDING)
        if not self._wait_for_capacity(JobState.JOB_STATE_PENDING):
            return
        if not self._provision():
            return
        self.host.service_log(self.record, "Job is preparing.")
        self._run_gang()

    def _wait_in_queue(self) -> bool:
        """QUEUED while a stockout or a quota shortfall holds new jobs back [training-service];
        a FLEX_START job waits at most its max_wait_duration [types]. False if the job ended."""
        record, host = self.record, self.host
        queued_at = time.monotonic()
        stockout_until = queued_at + record.stockout.queue_seconds
        max_wait = self._flex_start_max_wait()
        give_up_at = queued_at + max_wait if max_wait else None

        def held() -> bool:
            return host.quota_holds_new_jobs() or (
                host.stockout_queues_jobs() and time.monotonic() < stockout_until
            )

        while held():
            if give_up_at is not None and time.monotonic() >= give_up_at:
                self._fail(status(code_pb2.RESOURCE_EXHAUSTED, STOCKOUT_TEXT.format(region=host.region)))
                return False
            wakes = [t for t in (stockout_until, give_up_at) if t is not None and t > time.monotonic()]
            timeout = min(wakes) - time.monotonic() if wakes else None
            self._wait(lambda: self._stop_or_interrupt_seen() or not held(), timeout)
            if self._stop_or_interrupt_seen():
                break
        return not self._end_if_interrupted()

    def _wait_for_capacity(self, shown: JobState) -> bool:
        """A gang larger than the free replicas of its machine type waits, shown as ``shown``
        (QUEUED or PENDING: which one Vertex shows is *unknown*, the `capacity_wait_state` knob),
        until finished jobs free enough; the whole gang or nothing, as Vertex starts a job.
        False if the job ended meanwhile."""
        host = self.host
        if host.capacity_mode(
            self.record
        ) != "queue" or host.behaviour.capacity_wait_state != shown.name.removeprefix("JOB_STATE_"):
            return True
        self._wait(lambda: self._stop_or_interrupt_seen() or self.host.take_capacity(self.record), None)
        return not self._end_if_interrupted()

    def _flex_start_max_wait(self) -> float:
        scheduling = self.record.scheduling
        if scheduling.strategy != Scheduling.Strategy.FLEX_START:
            return 0.0
        if "max_wait_duration" in scheduling:
            return scheduling.max_wait_duration.total_seconds()  # 0 = wait for ever
        return self.host.behaviour.flex_start_default_max_wait_seconds

    def _provision(self) -> bool:
        """PENDING while VMs are found; a stockout is retried [training-service] and then fails the
        job with the documented text. False if the job ended."""
        host = self.host
        tries = 1 + (0 if self._retries_disabled() else host.behaviour.stockout_restarts)
        for _ in range(tries):
            self._wait(self._stop_or_interrupt_seen, host.provisioning_seconds)
            if self._end_if_interrupted():
                return False
            if not host.stockout_fails() and host.take_capacity(self.record):
                return True
        self._fail(status(code_pb2.RESOURCE_EXHAUSTED, STOCKOUT_TEXT.format(region=host.region)))
        return False

    def _retries_disabled(self) -> bool:
        return bool(self.record.scheduling.disable_retries)

    def _run_gang(self) -> None:
        record, host = self.record, self.host
        while True:
            self._launch()
            if self._deadline is None:
                timeout = record.scheduling.timeout.total_seconds()
                self._deadline = time.monotonic() + timeout if timeout > 0 else None
            host.advance(record, JobState.JOB_STATE_RUNNING)  # an interruption is handled below
            if not self._watch_once():
                return
            # Restarted in place: the same job, the same environment, new replica processes.
            if host.behaviour.pending_during_restart:
                host.advance(record, JobState.JOB_STATE_PENDING)
                self._wait(self._stop_or_interrupt_seen, host.provisioning_seconds)
            if self._end_if_interrupted():
                return

    def _launch(self) -> None:
        record, host = self.record, self.host
        plans = replica_procs.plan_replicas(record.job.job_spec, record.job_id, host.python_bin_dir)
        log_dir = Path(host.workdir) / record.job_id
        with host.changed:
            record.generation += 1
            generation = record.generation

        def on_exit(replica: Replica | SimulatedReplica) -> None:
            with host.changed:
                record.exit_order.append((generation, replica))
                host.wake(record)

        simulation = record.simulation
        launched: list[Replica | SimulatedReplica]
        if simulation is None:
            launched = [replica_procs.launch(plan, log_dir, on_exit) for plan in plans]
        else:
            launched = [launch_simulated(plan, log_dir, simulation, host.alarms, on_exit) for plan in plans]
        with host.changed:
            record.replicas = launched
            host.wake(record)

    def _exits(self) -> list[Replica | SimulatedReplica]:
        """This generation's replicas, in the order they exited."""
        return [r for g, r in self.record.exit_order if g == self.record.generation]

    def _first_failure(self) -> Replica | SimulatedReplica | None:
        return next((r for r in self._exits() if r.exit_status != 0), None)

    def _primary_succeeded(self) -> bool:
        return any(r.plan.name == PRIMARY and r.exit_status == 0 for r in self._exits())

    def _timed_out(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _watch_once(self) -> bool:
        """Wait for the gang's next event and act on it. True: restart the gang in place."""
        record, host = self.record, self.host
        behaviour = host.behaviour
        remaining = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
        self._wait(
            lambda: (
                self._stop_or_interrupt_seen()
                or self._first_failure() is not None
                or self._primary_succeeded()
                or self._timed_out()
            ),
            remaining,
        )
        # Decide under the lock so a late cancel or reclaim cannot slip between check and act.
        with host.changed:
            stopping = host.stopping
            reclaim = record.reclaim
            cancelled = record.cancel_requested
            failure = self._first_failure()
            succeeded = self._primary_succeeded()

        if stopping:
            replica_procs.terminate(record.replicas, min(host.kill_grace_seconds, 1.0))
            return False
        if reclaim is not None:
            # SIGTERM, the grace, SIGKILL; a grace of 0 is a SIGKILL with no warning at all.
            replica_procs.terminate(record.replicas, reclaim.grace_seconds, sigterm=reclaim.grace_seconds > 0)
            restarts_allowed = reclaim.in_place or not (
                self._retries_disabled() and behaviour.disable_retries_stops_reclaim_restarts
            )
            with host.changed:
                restart = (
                    not reclaim.end_job
                    and restarts_allowed
                    and record.reclaim_restarts < behaviour.reclaim_restarts
                    and not record.cancel_requested
                )
                if restart:
                    record.reclaim_restarts += 1
                    record.reclaim = None
            if restart:
                return True
            self._fail(self._reclaim_error(reclaim))
            return False
        if cancelled:
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            host.finish(record, JobState.JOB_STATE_CANCELLED, status(code_pb2.CANCELLED, "CANCELED"))
            return False
        if failure is not None:
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            if failure.out_of_memory:  # a common error: the whole job ends, no restart
                text = OUT_OF_MEMORY_TEXT.format(replica=failure.plan.name, status=failure.exit_status)
                self._fail(status(behaviour.out_of_memory_error_code, text))
                return False
            if (
                failure.exit_status in behaviour.crash_restart_exit_codes
                and record.crash_restarts < behaviour.crash_restarts
                and not self._retries_disabled()
            ):
                record.crash_restarts += 1
                return True
            message = (
                f"The replica {failure.plan.name} exited with a non-zero status of "
                f"{failure.exit_status}. Termination reason: Error."
            )
            self._fail(status(code_pb2.INVALID_ARGUMENT, message))
            return False
        if succeeded:
            # "A training job completes successfully when its primary replica exits with exit
            # code 0. At that point, Vertex AI shuts down all the other running workers."
            host.service_log(record, "Tearing down training program.")
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            host.finish(record, JobState.JOB_STATE_SUCCEEDED)
            return False
        replica_procs.terminate(record.replicas, host.kill_grace_seconds)
        timeout = record.scheduling.timeout.total_seconds()
        self._fail(
            status(code_pb2.DEADLINE_EXCEEDED, f"Job exceeded its timeout of {_seconds_text(timeout)}.")
        )
        return False

    # ----- endings ---------------------------------------------------------------------------

    def _reclaim_error(self, reclaim: Reclaim) -> status_pb2.Status:
        behaviour = self.host.behaviour
        code = behaviour.reclaim_error_code if reclaim.error_code is None else reclaim.error_code
        if reclaim.error_text is not None:
            return status(code, reclaim.error_text)  # verbatim: the caller's own wording
        return status(code, behaviour.reclaim_error_text.format(region=self.host.region))

    def _fail(self, error: status_pb2.Status) -> None:
        """End FAILED; `error` follows after the documented delay (a reader may see none)."""
        host, record = self.host, self.record
        if record.replicas:
            host.service_log(record, "Tearing down training program.")
        if host.behaviour.failed_error_delay_seconds <= 0:
            host.finish(record, JobState.JOB_STATE_FAILED, error)
            return
        host.finish(record, JobState.JOB_STATE_FAILED)
        with host.changed:  # the delay is re-read on each change: a knob changed meanwhile applies
            ended_at = time.monotonic()
            while not host.stopping:
                remaining = ended_at + host.behaviour.failed_error_delay_seconds - time.monotonic()
                if remaining <= 0:
                    break
                record.wakeup.wait(remaining)
        host.set_error(record, error)
