"""Events the decision core reacts to. Each says what was observed, never what to do."""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.classify import ReplicaExit
from controller.core.restarts import InPlaceRestart


@dataclass(frozen=True)
class RequestAccepted:
    """The request is stored; start the first attempt."""


@dataclass(frozen=True)
class AttemptSubmitted:
    """Vertex has (or already had: adoption) a CustomJob for this attempt."""

    attempt: int
    vertex_name: str


@dataclass(frozen=True)
class AttemptNotFound:
    """A label lookup found no Vertex job for this attempt and none was created."""

    attempt: int


@dataclass(frozen=True)
class SubmitFailed:
    """CreateCustomJob failed after the adapter's own retries.

    `permanent` is True when Vertex rejected the job itself (INVALID_ARGUMENT and the like):
    submitting it again cannot succeed. `capacity` is True for a 429 RESOURCE_EXHAUSTED (quota
    metrics exceed their limits): no failure, but nothing will change within seconds either.
    """

    attempt: int
    message: str
    permanent: bool
    capacity: bool = False  # 429 RESOURCE_EXHAUSTED: a quota or capacity shortfall, wait minutes


@dataclass(frozen=True)
class VertexObserved:
    """The authoritative state of one attempt's Vertex job (from Get or List, never from a hint).

    `exit_reason` is the trainer's exit record reason for that attempt when the job has ended and
    a record was found. `spot` says whether the CustomJob was scheduled on Spot VMs (read from
    the job itself), since only those are reclaimed.
    """

    attempt: int
    vertex_name: str
    vertex_state: str  # JobState name without the JOB_STATE_ prefix
    error_code: int = 0
    error_message: str = ""
    start_time: float | None = None
    end_time: float | None = None
    exit_reason: str | None = None
    spot: bool = False
    # With exit_reason no_usable_checkpoint: the root the trainer searched and the steps lost.
    checkpoint_root: str | None = None
    steps_lost: int | None = None
    # The controller could not read the checkpoint root (403 and the like): neither the latest
    # checkpoint nor the exit record is known, so whether the attempt made progress is unknown.
    progress_unknown: bool = False
    # The chief's exit record, beyond its reason: the step it stopped at, the last step it saw
    # committed, and the step training ends at (None: not recorded).
    exit_step: int | None = None
    exit_committed_step: int | None = None
    final_step: int | None = None
    # Every replica's own exit record for this CustomJob (`trainer.layout.ReplicaExit`, as facts).
    replica_exits: tuple[ReplicaExit, ...] = ()
    # Restarts of this CustomJob in place that the trainer's run records tell (read at an ending).
    restarts: tuple[InPlaceRestart, ...] = ()


@dataclass(frozen=True)
class RestartsObserved:
    """The trainer's run records of a running attempt's CustomJob: Vertex restarted it in place
    this many times (`controller.core.restarts`), read by a progress probe."""

    attempt: int
    vertex_name: str
    restarts: tuple[InPlaceRestart, ...]


@dataclass(frozen=True)
class VertexJobMissing:
    """GetCustomJob answered NOT_FOUND for an attempt we had submitted (deleted outside Relaunch)."""

    attempt: int
    vertex_name: str


@dataclass(frozen=True)
class CheckpointObserved:
    """The latest *committed* checkpoint under the job's checkpoint URI."""

    step: int
    uri: str


@dataclass(frozen=True)
class TimerFired:
    """A periodic reconcile pass or a scheduled wake-up: re-derive what should happen now."""


@dataclass(frozen=True)
class CancelRequested:
    """The user asked to cancel the job."""


@dataclass(frozen=True)
class AlertDelivered:
    """The alert with this outbox id was published: it leaves the job's outbox."""

    outbox_id: str


Event = (
    RequestAccepted
    | AttemptSubmitted
    | AttemptNotFound
    | SubmitFailed
    | VertexObserved
    | VertexJobMissing
    | CheckpointObserved
    | RestartsObserved
    | TimerFired
    | CancelRequested
    | AlertDelivered
)
