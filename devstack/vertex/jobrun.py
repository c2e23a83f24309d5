"""One CustomJob's life on its own thread: queue, provision, run the gang, end it.

The thread only decides *what* happens; every state change goes through the emulator
(``host``), which owns the lock, the job store and the event stream.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.cloud.aiplatform_v1 import CustomJob, JobState
from google.rpc import status_pb2

from devstack.vertex import replicas as replica_procs
from devstack.vertex.replicas import Replica

if TYPE_CHECKING:
    from devstack.vertex.emulator import VertexEmulator

log = logging.getLogger(__name__)

# google.rpc.Code values Vertex uses for job endings (docs/contracts.md).
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_RESOURCE_EXHAUSTED = 8
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14

TERMINAL_STATES = frozenset(
    {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
)


@dataclass(frozen=True)
class Stockout:
    queue_seconds: float = 0.0
    fail: bool = False


@dataclass
class JobRecord:
    """The emulator's bookkeeping for one job; guarded by the emulator's lock."""

    job: CustomJob
    job_id: str
    stockout: Stockout
    replicas: list[Replica] = field(default_factory=list)
    exit_order: list[Replica] = field(default_factory=list)
    cancel_requested: bool = False
    preempt_grace: float | None = None
    thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.job.state not in TERMINAL_STATES

    @property
    def interrupted(self) -> bool:
        return self.cancel_requested or self.preempt_grace is not None


def _status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message)


def _seconds_text(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:g}s"


class JobRunner:
    def __init__(self, host: VertexEmulator, record: JobRecord) -> None:
        self.host = host
        self.record = record

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("vertex job %s: runner crashed", self.record.job_id)
            replica_procs.terminate(self.record.replicas, 0.0)
            self.host.finish(
                self.record,
                JobState.JOB_STATE_FAILED,
                _status(CODE_INTERNAL, "Internal error occurred for the current attempt."),
            )

    def _wait(self, predicate, seconds: float | None) -> None:
        """Block until ``predicate()`` holds (re-checked on every change) or ``seconds`` pass."""
        with self.host.changed:
            self.host.changed.wait_for(predicate, timeout=seconds)

    def _stop_or_interrupt_seen(self) -> bool:
        return self.host.stopping or self.record.interrupted

    def _end_if_interrupted(self) -> bool:
        """Before replicas exist, a stop, preemption or cancel ends the job at once."""
        record = self.record
        if self.host.stopping:
            return True
        if record.preempt_grace is not None:
            self.host.finish(record, JobState.JOB_STATE_FAILED, self._preempted_error())
            return True
        if record.cancel_requested:
            self.host.finish(record, JobState.JOB_STATE_CANCELLED, _status(CODE_CANCELLED, "CANCELED"))
            return True
        return False

    def _run(self) -> None:
        record, host = self.record, self.host
        # Queued while a stockout holds new jobs back; clearing the stockout lets them through.
        self._wait(
            lambda: self._stop_or_interrupt_seen() or not host.stockout_queues_jobs(),
            record.stockout.queue_seconds,
        )
        if self._end_if_interrupted():
            return
        host.advance(record, JobState.JOB_STATE_PENDING)
        self._wait(self._stop_or_interrupt_seen, host.provisioning_seconds)
        if self._end_if_interrupted():
            return
        if record.stockout.fail:
            host.finish(
                record,
                JobState.JOB_STATE_FAILED,
                _status(CODE_RESOURCE_EXHAUSTED, f"Resources are insufficient in region: {host.region}."),
            )
            return
        self._launch()
        host.advance(record, JobState.JOB_STATE_RUNNING)  # an interruption is handled by _watch
        self._watch()

    def _launch(self) -> None:
        record, host = self.record, self.host
        plans = replica_procs.plan_replicas(record.job.job_spec, record.job_id, host.python_bin_dir)
        log_dir = Path(host.workdir) / record.job_id
        launched = [replica_procs.launch(plan, log_dir, self._on_replica_exit) for plan in plans]
        with host.changed:
            record.replicas = launched
            host.changed.notify_all()

    def _on_replica_exit(self, replica: Replica) -> None:
        with self.host.changed:
            self.record.exit_order.append(replica)
            self.host.changed.notify_all()

    def _first_failure(self) -> Replica | None:
        return next((r for r in self.record.exit_order if r.exit_status != 0), None)

    def _all_succeeded(self) -> bool:
        return len(self.record.exit_order) == len(self.record.replicas) and self._first_failure() is None

    def _watch(self) -> None:
        record, host = self.record, self.host
        timeout = record.job.job_spec.scheduling.timeout.total_seconds()
        self._wait(
            lambda: (
                self._stop_or_interrupt_seen() or self._first_failure() is not None or self._all_succeeded()
            ),
            timeout if timeout > 0 else None,
        )
        # Decide under the lock so a late cancel or preemption cannot slip between check and act.
        with host.changed:
            stopping = host.stopping
            preempt_grace = record.preempt_grace
            cancelled = record.cancel_requested
            failure = self._first_failure()
            succeeded = self._all_succeeded()

        if stopping:
            replica_procs.terminate(record.replicas, min(host.kill_grace_seconds, 1.0))
        elif preempt_grace is not None:
            replica_procs.terminate(record.replicas, preempt_grace)
            host.finish(record, JobState.JOB_STATE_FAILED, self._preempted_error())
        elif cancelled:
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            host.finish(record, JobState.JOB_STATE_CANCELLED, _status(CODE_CANCELLED, "CANCELED"))
        elif failure is not None:
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            message = (
                f"The replica {failure.plan.name} exited with a non-zero status of "
                f"{failure.exit_status}. Termination reason: Error."
            )
            host.finish(record, JobState.JOB_STATE_FAILED, _status(CODE_INVALID_ARGUMENT, message))
        elif succeeded:
            host.finish(record, JobState.JOB_STATE_SUCCEEDED)
        else:
            replica_procs.terminate(record.replicas, host.kill_grace_seconds)
            message = f"Job exceeded its timeout of {_seconds_text(timeout)}."
            host.finish(record, JobState.JOB_STATE_FAILED, _status(CODE_DEADLINE_EXCEEDED, message))

    def _preempted_error(self) -> status_pb2.Status:
        return _status(
            CODE_UNAVAILABLE,
            "The replica workerpool0-0 was preempted: the Spot VM was reclaimed. "
            "Termination reason: Preempted.",
        )
