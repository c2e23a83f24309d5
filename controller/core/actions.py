"""Actions the decision core asks the adapters to carry out.

The shell persists the new state first and only then executes the actions, so every action is
backed by a durable intent and may be executed more than once: each must be idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SubmitAttempt:
    """Make sure a Vertex job exists for this attempt.

    The adapter first looks the attempt up by its labels and adopts a job it finds (a crash may
    have hit between CreateCustomJob and recording its name). Only when none exists and
    `create_if_missing` is set does it create one; otherwise it reports AttemptNotFound.

    `new_attempt`: the attempt is born in the decision that asks for it, so its intent is written
    in the same write as this action and no CustomJob of it can exist yet (every create follows a
    stored intent, and attempt numbers only grow): the look-up before the first create is
    skipped. A retry after an ambiguous create, or any later submission, looks up first.
    """

    attempt: int
    resume_from_uri: str | None
    resume_from_step: int | None
    on_demand: bool
    create_if_missing: bool = True
    # Replicas per worker pool (an elastic job's chosen size); None: as the request says.
    replicas: tuple[int, ...] | None = None
    # RELAUNCH_CHECKPOINT_INTERVAL_SECONDS for an `auto` job, as recorded on the attempt
    # (`controller.core.interval_choice`); None: the request's fixed value or the trainer's flags.
    checkpoint_interval_seconds: float | None = None
    # The scheduling strategy after a stockout fallback (`core.fallback`): STANDARD or
    # FLEX_START; None: the request's (or STANDARD with `on_demand`).
    strategy: str | None = None
    # The placement this attempt runs on (a name in the request's `placements`), as recorded on
    # the attempt (`controller.core.placement_choice`); None: as the jobSpec says.
    placement: str | None = None
    # A new attempt's first submission: its intent was written in the same write that started
    # it, so no CustomJob of it can exist yet and the create skips the look-up.
    new_attempt: bool = False


@dataclass(frozen=True)
class CancelVertexJob:
    vertex_name: str
    attempt: int


@dataclass(frozen=True)
class ReadVertexJob:
    """Read this attempt's Vertex job again (Get) and report what is seen as a VertexObserved."""

    vertex_name: str
    attempt: int


@dataclass(frozen=True)
class ScheduleWakeup:
    at: float


@dataclass(frozen=True)
class RaiseAlert:
    kind: str  # job_failed, crash_loop, capacity_wait, preemption_storm, ...
    severity: str  # WARNING or ERROR (Cloud Logging severities)
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    # The alert's entry in the job's outbox: once it is sent, the shell reports AlertDelivered
    # with this id. Set by `decide`; empty only on alerts built outside it.
    outbox_id: str = ""


@dataclass(frozen=True)
class ResolveAlert:
    """A condition this job raised an alert for has cleared (the kind leaves `JobState.firing`)."""

    kind: str  # capacity_wait, running_shrunk
    severity: str  # the severity it fired with
    summary: str
    attempt: int | None = None
    # Its entry in the job's outbox, as for RaiseAlert: once published, the shell reports
    # AlertDelivered with this id.
    outbox_id: str = ""


@dataclass(frozen=True)
class MarkTerminal:
    phase: str
    reason: str


Action = (
    SubmitAttempt
    | CancelVertexJob
    | ReadVertexJob
    | ScheduleWakeup
    | RaiseAlert
    | ResolveAlert
    | MarkTerminal
)
