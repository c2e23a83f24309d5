"""The state of one managed job, as the decision core sees it.

Plain frozen dataclasses that round-trip through JSON (`to_dict` / `from_dict`), so the state store
can keep them and a restarted controller continues exactly where the last one stopped. Times are
seconds since the epoch (floats); the core never reads a clock, `now` is always passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from enum import Enum
from typing import Any

from controller.core.classify import Ending
from controller.core.elastic import ElasticPolicy
from controller.core.policy import RestartPolicy
from controller.core.restarts import InPlaceRestart


class Phase(str, Enum):
    ACCEPTED = "accepted"  # request stored, nothing submitted yet
    SUBMITTING = "submitting"  # intent for attempt N recorded, Vertex job not confirmed yet
    QUEUED = "queued"  # Vertex job exists, not running yet (QUEUED/PENDING)
    RUNNING = "running"
    BACKING_OFF = "backing_off"  # attempt ended, next one due at next_attempt_at
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


# The phases a job never leaves; the read model and the CLI compare stored strings against the
# values, so both forms are defined here once.
TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
TERMINAL_PHASE_NAMES = frozenset(phase.value for phase in TERMINAL_PHASES)


# Vertex JobState names (without the JOB_STATE_ prefix), grouped by what they mean to us.
VERTEX_WAITING = frozenset({"QUEUED", "PENDING", "PAUSED", "UPDATING"})
VERTEX_RUNNING = frozenset({"RUNNING", "CANCELLING"})
VERTEX_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "PARTIALLY_SUCCEEDED"})


def vertex_is_live(vertex_state: str) -> bool:
    return vertex_state not in VERTEX_TERMINAL


@dataclass(frozen=True)
class Attempt:
    number: int
    resume_from_step: int | None
    resume_from_uri: str | None
    on_demand: bool
    intent_at: float
    vertex_name: str | None = None
    vertex_state: str | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    ending: Ending | None = None
    rule: str | None = None  # classifier rule that decided `ending`
    error_code: int = 0
    error_message: str = ""
    checkpoint_step_at_end: int | None = None
    progress_unknown: bool = False  # the checkpoint root was unreadable when this attempt ended
    # First time this attempt was seen FAILED with no error and no decisive exit record: Vertex
    # fills `error` in about a minute later, so the ending is classified only then (or after a
    # bounded wait).
    failed_unexplained_at: float | None = None
    # Replicas per worker pool this attempt asked for (an elastic job, `controller.core.elastic`);
    # None: the request's own replicaCount in every pool.
    replicas: tuple[int, ...] | None = None
    # The checkpoint interval chosen for this attempt (`IntervalDecision.to_dict()`), for an
    # `auto` job: chosen once, where its SubmitAttempt is emitted (`core.interval_choice`).
    checkpoint_interval: dict[str, Any] | None = None
    # Decided at the end, before Vertex set the job's error: the error, read later, confirms or
    # corrects the ending (`controller.core.confirm`). Cleared once confirmed or past the bound.
    provisional: bool = False
    # When a provisional ending's CustomJob was last read again for Vertex's error (None: not yet
    # since the ending): read again at most every `error_recheck_seconds`, whatever else wakes the job.
    rechecked_at: float | None = None
    # What the trainer's records say failed, for reasons and alerts ("workerpool0-1 exit 1 at
    # step 25: RuntimeError: ...").
    evidence: str = ""
    # This ending already added to the job's no-progress streak (the crash-loop count).
    stalled: bool = False
    # Restarts of this attempt's CustomJob in place, each counted once (`controller.core.restarts`).
    restarts: tuple[InPlaceRestart, ...] = ()
    # Held back while Vertex's error is awaited (`failed_unexplained_at`): when Vertex ended it,
    # and when the ending is decided at the latest (the status says so, with the time left).
    vertex_ended_at: float | None = None
    decision_due_at: float | None = None
    # The scheduling strategy this attempt falls back to after a stockout (`core.fallback`):
    # "STANDARD" or "FLEX_START"; None: the request's (or on_demand's STANDARD).
    strategy: str | None = None
    # Where this attempt runs, for a job with placements: the choice (`Choice.to_dict()`: the
    # name chosen, the reason and every figure compared), made once where its SubmitAttempt is
    # emitted (`core.placement_choice`), so a retried submission renders the same placement.
    placement: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self.ending is not None


@dataclass(frozen=True)
class Alerted:
    """An alert already raised for this job, remembered so it is not raised again."""

    kind: str
    at: float


@dataclass(frozen=True)
class PendingAlert:
    """An alert decided together with a state change and not yet known to be published.

    It is written in the same state document as the change (a transactional outbox), so an
    alert is never lost to a crash or a lost lease between the write and the publish: whoever
    leads next sends what is left. Delivery is at least once."""

    outbox_id: str
    kind: str
    severity: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    # A resolution of `kind` (it has cleared), not a firing: sent through the outbox the same way,
    # so a crash between the write that cleared it and the publish loses no "resolved" message.
    resolves: bool = False


@dataclass(frozen=True)
class JobState:
    job_id: str
    policy: RestartPolicy
    phase: Phase = Phase.ACCEPTED
    created_at: float = 0.0
    updated_at: float = 0.0
    attempts: tuple[Attempt, ...] = ()
    failures: int = 0  # endings that spent the failure budget
    preemptions: int = 0
    no_progress_streak: int = 0  # consecutive attempts that ended without checkpoint progress
    retry_streak: int = 0  # consecutive endings since the checkpoint last advanced (backoff index)
    latest_checkpoint_step: int | None = None
    latest_checkpoint_uri: str | None = None
    capacity_wait_since: float | None = None  # start of the current run of capacity/quota refusals
    next_attempt_at: float | None = None  # BACKING_OFF: when to submit; SUBMITTING: retry time
    cancel_requested: bool = False
    terminal_reason: str | None = None
    alerts: tuple[Alerted, ...] = field(default=())
    outbox: tuple[PendingAlert, ...] = field(default=())
    elastic: ElasticPolicy | None = None  # the request's elastic range; None: fixed size
    # Alert kinds raised for this job that clear on their own (capacity_wait, running_shrunk) and
    # have not been resolved yet: stored, so whoever leads when they clear resolves them.
    firing: tuple[str, ...] = ()
    # The step training ends at, once a trainer's exit record has said it: a committed checkpoint
    # at that step means the work is done, and no attempt is started to train 0 steps.
    final_step: int | None = None
    # The names of the request's placements (its alternatives for where attempts run), in the
    # request's order; empty: every attempt runs as the jobSpec says.
    placements: tuple[str, ...] = ()

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def with_current(self, **changes: Any) -> JobState:
        assert self.attempts, "no attempt to change"
        return replace(self, attempts=self.attempts[:-1] + (replace(self.attempts[-1], **changes),))

    # --- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _plain(self)
        data["phase"] = self.phase.value
        for attempt in data["attempts"]:
            if attempt["ending"] is not None:
                attempt["ending"] = Ending(attempt["ending"]).value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobState:
        policy = RestartPolicy.from_dict(data["policy"])
        attempts = tuple(
            Attempt(
                **{
                    **a,
                    "ending": Ending(a["ending"]) if a.get("ending") else None,
                    "replicas": tuple(a["replicas"]) if a.get("replicas") is not None else None,
                    "restarts": tuple(InPlaceRestart(**r) for r in a.get("restarts", ())),
                }
            )
            for a in data.get("attempts", ())
        )
        elastic = ElasticPolicy.from_dict(data["elastic"]) if data.get("elastic") else None
        alerts = tuple(Alerted(**a) for a in data.get("alerts", ()))
        outbox = tuple(PendingAlert(**a) for a in data.get("outbox", ()))
        special = ("policy", "attempts", "alerts", "outbox", "phase", "elastic", "firing", "placements")
        rest = {k: v for k, v in data.items() if k not in special}
        return cls(
            policy=policy,
            attempts=attempts,
            alerts=alerts,
            outbox=outbox,
            phase=Phase(data["phase"]),
            elastic=elastic,
            firing=tuple(data.get("firing", ())),
            placements=tuple(data.get("placements", ())),
            **rest,
        )


def _plain(value: Any) -> Any:
    """What `dataclasses.asdict` makes of a value (dataclasses to dicts, containers copied),
    at a fraction of its cost: every write of a job serialises its whole state."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    names = _FIELD_NAMES.get(kind)
    if names is None and is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return kind(_plain(item) for item in value)
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value  # enums and the like: immutable, shared as asdict's copy would be


# The field names of each dataclass met so far (`dataclasses.fields` is slow to ask every time),
# and the types that are returned as they are without a look.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_LEAVES = frozenset({str, int, float, bool, type(None)})
