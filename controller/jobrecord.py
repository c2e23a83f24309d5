"""The stored job document, typed: the only code that spells its keys.

One document per job in the state store (`jobs/{job_id}`): the request as accepted (its canonical
JSON), the request's fingerprint (a duplicate delivery is recognised by it), the core's state, the
timeline users read, the checkpoint interval chosen per attempt, the trainer's figures per
attempt, and the mark that keeps a finished job in the live index until the interval ledger has
counted its endings. Pure: it imports only the decision core.

Format versions: a document without `format` was written before the field existed (format 1) and
loads the same way; this module writes `FORMAT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from controller.core.model import TERMINAL_PHASE_NAMES, JobState

FORMAT = 2

REQUEST = "request"
FINGERPRINT = "fingerprint"
STATE = "state"
TIMELINE = "timeline"
# attempt number (a string) -> the interval decision for it, as written before the choice moved
# onto the attempt in the state (`Attempt.checkpoint_interval`); read, never written anew.
INTERVALS = "checkpointIntervals"
TRAINER_FIGURES = "trainerFigures"  # attempt number (a string) -> what its exit record said
LEDGER_PENDING = "intervalLedgerPending"
FORMAT_KEY = "format"

_KNOWN = frozenset(
    {REQUEST, FINGERPRINT, STATE, TIMELINE, INTERVALS, TRAINER_FIGURES, LEDGER_PENDING, FORMAT_KEY}
)

Json = dict[str, Any]


@dataclass(frozen=True)
class JobRecord:
    request: Json
    fingerprint: str
    state: JobState
    timeline: tuple[Json, ...] = ()
    intervals: Json = field(default_factory=dict)
    trainer_figures: Json = field(default_factory=dict)
    ledger_pending: bool = False
    # Keys this release does not know (written by a newer one): kept as they are.
    extra: Json = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.state.job_id

    @property
    def interval_choices(self) -> Json:
        """attempt number (a string) -> the checkpoint interval chosen for it: those recorded on
        the attempts, over those an older release kept beside the state."""
        chosen = {str(a.number): a.checkpoint_interval for a in self.state.attempts if a.checkpoint_interval}
        return {**self.intervals, **chosen}

    @property
    def checkpoint_uri(self) -> str | None:
        checkpoint = self.request.get("checkpoint") if isinstance(self.request, dict) else None
        return checkpoint.get("uri") if isinstance(checkpoint, dict) else None

    @property
    def interval_setting(self) -> Any:
        """The request's canonical `checkpoint.interval` (None: the trainer's own flags)."""
        checkpoint = self.request.get("checkpoint") if isinstance(self.request, dict) else None
        return checkpoint.get("interval") if isinstance(checkpoint, dict) else None

    def with_figures(self, attempt: int, figures: Json) -> JobRecord:
        """The record with what an attempt's exit record said (goodput reads it)."""
        return replace(self, trainer_figures={**self.trainer_figures, str(attempt): figures})

    def with_state(self, state: JobState, entries: list[Json], *, timeline_limit: int) -> JobRecord:
        """The record after a transition: the new state and its timeline entries."""
        return replace(self, state=state, timeline=(*self.timeline, *entries)[-timeline_limit:])

    def to_dict(self) -> Json:
        document: Json = {
            **self.extra,
            FORMAT_KEY: FORMAT,
            REQUEST: self.request,
            FINGERPRINT: self.fingerprint,
            STATE: self.state.to_dict(),
            TIMELINE: list(self.timeline),
        }
        if self.intervals:
            document[INTERVALS] = self.intervals
        if self.trainer_figures:
            document[TRAINER_FIGURES] = self.trainer_figures
        if self.ledger_pending:
            document[LEDGER_PENDING] = True
        return document

    @classmethod
    def from_dict(cls, document: Json) -> JobRecord:
        version = document.get(FORMAT_KEY, 1)
        if not isinstance(version, int) or version > FORMAT:
            raise ValueError(f"job document format {version!r}: this release reads up to {FORMAT}")
        state = JobState.from_dict(document[STATE])
        legacy = dict(document.get(INTERVALS) or {})
        if legacy:  # an older release kept the choice beside the state: the attempt carries it now
            attempts = tuple(
                replace(a, checkpoint_interval=legacy.get(str(a.number)))
                if a.checkpoint_interval is None and legacy.get(str(a.number))
                else a
                for a in state.attempts
            )
            state = replace(state, attempts=attempts)
        return cls(
            request=document[REQUEST],
            fingerprint=document.get(FINGERPRINT, ""),
            state=state,
            timeline=tuple(document.get(TIMELINE) or ()),
            intervals=legacy,
            trainer_figures=dict(document.get(TRAINER_FIGURES) or {}),
            ledger_pending=bool(document.get(LEDGER_PENDING)),
            extra={k: v for k, v in document.items() if k not in _KNOWN},
        )


@dataclass(frozen=True)
class JobSummary:
    """What the periodic pass and the gauges read of every live job, without parsing its state."""

    job_id: str
    phase: str
    vertex_names: tuple[str, ...]  # of its attempts that have one
    has_outbox: bool  # alerts decided and not yet known to be published

    @classmethod
    def of(cls, document: Json) -> JobSummary:
        state = document[STATE]
        return cls(
            job_id=state["job_id"],
            phase=str(state.get("phase")),
            vertex_names=tuple(a["vertex_name"] for a in state.get("attempts", ()) if a.get("vertex_name")),
            has_outbox=bool(state.get("outbox")),
        )

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASE_NAMES


def is_job_document(document: Json) -> bool:
    """A stored job document (not a status document made from one)."""
    return STATE in document


def is_live_document(document: Json) -> bool:
    """A job not finished, or finished with endings the interval ledger has yet to count. A
    document whose phase cannot be read counts as live: nothing unreadable drops out of the pass."""
    if document.get(LEDGER_PENDING):
        return True
    state = document.get(STATE)
    phase = state.get("phase") if isinstance(state, dict) else None
    return phase not in TERMINAL_PHASE_NAMES
