"""The shell of the adaptive checkpoint interval: the rate book in the state store, C from the
job's commit markers, the trainer's figures of an ending.

Everything that decides is pure (`controller.core.adaptive_interval`, and
`controller.core.interval_choice` where a SubmitAttempt is emitted); this module gathers the
facts the reconcile hands to the core (`inputs`) and writes to the job's record (`figures`), and
it keeps the ledger. It never writes a job's record: only the reconcile does. The ledger (rate book + counted endings) is one document under
`INTERVAL_LEDGER_KEY`, updated read-modify-write with the store's version precondition, so two
writers never lose an update, and `Ledger.record` ignores an ending it already counted, so an
ending applied twice (a redelivered event, a reconcile pass after a crash) counts once.

Which jobs teach the book: those whose request sets `checkpoint.interval` (auto or fixed). They
run a trainer that honours RELAUNCH_CHECKPOINT_INTERVAL_SECONDS and writes exit records, so "a
reclaim without an exit record" really means the emergency save never ran; another program's
reclaims would all look work-losing and inflate every job's rate.

No ending is lost to a crash between a job's write and the ledger's: a live job's endings are
caught up by every reconcile pass (`catch_up`), and a job's terminal write carries
the ledger mark (`JobRecord.ledger_pending`), which keeps the finished job in the store's live
index (so the pass still sees it, while finished work stays unread) until every ending of it is
counted (`all_counted`; the reconcile then clears the mark).

An ending whose exit record cannot be read waits (its true kind needs the record), also when a
later attempt of the job is counted first (`Ledger` remembers the gap). After
`EXIT_RECORD_PATIENCE_SECONDS` it is counted without the record: a reclaim then counts as
work-losing (KILLED), the side that shortens the interval rather than one that misses a loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from controller import logs
from controller.adapters.checkpoints import CheckpointsUnavailable, CheckpointsUnreadable
from controller.core.adaptive_interval import (
    CheckpointCost,
    EndingFacts,
    Ledger,
    checkpoint_cost,
    ending_kind,
    estimate_for,
    exposure,
    restart_endings,
)
from controller.core.checkpoint_interval import CapacityClass, RateEstimate, prior_for
from controller.core.interval_choice import IntervalInputs
from controller.core.model import Attempt, JobState
from controller.jobrecord import JobRecord
from controller.request import JobRequest
from controller.request.capacity import capacity_class
from controller.request.render import build_custom_job, placement_named
from controller.service.interval_records import epoch as _epoch
from controller.service.interval_records import measured_before as _measured_before
from controller.settings import Settings
from controller.store import AlreadyExists, StateStore, VersionConflict
from controller.store.keys import INTERVAL_LEDGER_KEY
from trainer import layout

log = logs.get("relaunch.interval")

_WRITE_TRIES = 8
# How long after an attempt's end its unreadable exit record is waited for before the ending is
# counted without it. Long past any GCS outage the SLA allows for; short enough that a finished
# job (kept in the live index meanwhile, one exit-record read a pass) does not linger.
EXIT_RECORD_PATIENCE_SECONDS = 3600.0


@dataclass(frozen=True)
class EndingRead:
    """An ended attempt's exit record (None: it wrote none) and the root's commit markers."""

    record: Any
    markers: list[Any]


class IntervalKeeper:
    def __init__(
        self, settings: Settings, store: StateStore, checkpoints: Any, fence: Callable[[], int] = lambda: 0
    ):
        self.settings = settings
        self.store = store
        self.checkpoints = checkpoints
        self.fence = fence
        # (job id, attempt) endings known to be in the book, or not meant for it; bounded by the
        # live jobs' attempts (pruned in catch_up).
        self._checked: set[tuple[str, int]] = set()

    # --- the book -----------------------------------------------------------------------------
    def ledger(self) -> Ledger:
        record = self.store.get(INTERVAL_LEDGER_KEY)
        return Ledger() if record is None else Ledger.from_dict(record.document)

    def prior(self, capacity: CapacityClass) -> RateEstimate:
        """The class's prior, forgetting at the configured half-life (which `estimate_for` and the
        ledger then apply to a class already in the book as well)."""
        mtbf = self.settings.interval_prior_mtbf_seconds
        base = prior_for(capacity) if mtbf is None else RateEstimate(alpha=0.5, beta=0.5 * mtbf)
        return replace(base, half_life_seconds=self.settings.estimate_half_life_seconds)

    def capacity(self, request: JobRequest, attempt: int, on_demand: bool) -> CapacityClass:
        return capacity_class(build_custom_job(request, attempt, on_demand=on_demand), self.settings.region)

    def update_ledger(self, change: Callable[[Ledger], Ledger]) -> Ledger:
        """Read-modify-write of the ledger; a concurrent writer makes us re-read and redo it."""
        for _ in range(_WRITE_TRIES):
            record = self.store.get(INTERVAL_LEDGER_KEY)
            before = Ledger() if record is None else Ledger.from_dict(record.document)
            after = change(before)
            if after == before:
                return before
            try:
                if record is None:
                    self.store.create(INTERVAL_LEDGER_KEY, after.to_dict(), fence=self.fence())
                else:
                    self.store.put(
                        INTERVAL_LEDGER_KEY,
                        after.to_dict(),
                        expected_version=record.version,
                        fence=self.fence(),
                    )
            except (VersionConflict, AlreadyExists):
                continue
            return after
        raise RuntimeError("the interval ledger kept changing under us")

    def learn(self, job_id: str, request: JobRequest, attempt: Attempt, now: float) -> bool:
        """Fold one ended attempt into the book (once). False when there was nothing to do, or
        when its exit record is unreadable and still worth waiting for (see the module's doc)."""
        if request.checkpoint_interval is None or attempt.ending is None:
            return False
        if self.ledger().has_counted(job_id, attempt.number):
            return False
        record: Any = None
        markers: list[Any] = []
        if attempt.started_at is not None:
            # The trainer's word: did its emergency save commit, and when did training begin?
            try:
                record = self._exit_record(request, attempt)
                markers = self.checkpoints.recent_markers(request.checkpoint_uri)
            except (CheckpointsUnavailable, CheckpointsUnreadable) as error:
                waited = now - (attempt.ended_at if attempt.ended_at is not None else now)
                if waited < EXIT_RECORD_PATIENCE_SECONDS:
                    log.warning(
                        "checkpoint interval: exit record unreadable; ending not counted yet",
                        job_id=job_id,
                        attempt=attempt.number,
                        error=str(error),
                    )
                    return False
                log.warning(
                    "checkpoint interval: exit record still unreadable; counting the ending without it",
                    job_id=job_id,
                    attempt=attempt.number,
                    waited_seconds=round(waited, 1),
                    error=str(error),
                )
        return self._count(job_id, request, attempt, self.facts(attempt, record, markers), now)

    @staticmethod
    def facts(attempt: Attempt, record: Any, markers: Iterable[Any]) -> EndingFacts:
        """What the controller and the trainer (its exit record, the commit markers) know of
        one ended attempt."""
        assert attempt.ending is not None
        progress = [
            (m.step, at - (m.write_seconds or 0.0))
            for m in markers
            if m.attempt == attempt.number and (at := _epoch(m.wall_time)) is not None
        ]
        # A reclaim's exit record is written after the emergency save (or the grace spent waiting
        # for one), not when its step was reached: it would slow the pace and date the first
        # step too early. Other endings write theirs as the step ends.
        if (
            record is not None
            and record.reason != layout.REASON_PREEMPTED
            and record.step is not None
            and (at := _epoch(record.time)) is not None
        ):
            progress.append((record.step, at))
        return EndingFacts(
            ending=attempt.ending,
            rule=attempt.rule,
            started_at=attempt.started_at,
            ended_at=attempt.ended_at,
            exit_reason=record.reason if record is not None else None,
            checkpoint_saved=record.checkpoint_saved if record is not None else None,
            resume_step=attempt.resume_from_step,
            progress=tuple(progress),
        )

    def _count(
        self, job_id: str, request: JobRequest, attempt: Attempt, facts: EndingFacts, now: float
    ) -> bool:
        kind = ending_kind(facts)
        # An attempt of a job with placements ran where its placement put it.
        placed = placement_named(request, str(attempt.placement["chosen"])) if attempt.placement else None
        capacity = (
            placed.capacity_class()
            if placed is not None
            else self.capacity(request, attempt.number, attempt.on_demand)
        )
        exposed = exposure(facts)
        restarts = restart_endings(attempt.restarts, attempt.started_at)  # each one an ending too
        self.update_ledger(
            lambda ledger: ledger.record(
                job_id, attempt.number, capacity, kind, exposed.seconds, now, self.prior(capacity), restarts
            )
        )
        log.info(
            "checkpoint interval: ending observed",
            job_id=job_id,
            attempt=attempt.number,
            capacity=capacity.key(),
            counted_as=kind.value if kind is not None else None,
            exposure_seconds=round(exposed.seconds, 3),
            exposure_source=exposed.source,
        )
        return True

    def _exit_record(self, request: JobRequest, attempt: Attempt) -> Any:
        vertex_id = attempt.vertex_name.rsplit("/", 1)[-1] if attempt.vertex_name else None
        return self.checkpoints.exit_record(request.checkpoint_uri, attempt.number, vertex_job_id=vertex_id)

    def read_ending(self, request: JobRequest, attempt: Attempt) -> EndingRead | None:
        """The trainer's word on an ended attempt (its exit record, the commit markers), read
        once for its figures and for the book; None when unreadable (the pass retries)."""
        if attempt.started_at is None:
            return EndingRead(None, [])
        try:
            return EndingRead(
                self._exit_record(request, attempt), self.checkpoints.recent_markers(request.checkpoint_uri)
            )
        except (CheckpointsUnavailable, CheckpointsUnreadable) as error:
            log.warning(
                "trainer figures unreadable", job_id=request.job_id, attempt=attempt.number, error=str(error)
            )
            return None

    def figures(self, attempt: Attempt, read: EndingRead) -> dict[str, Any] | None:
        """What goodput keeps of an ended attempt (None without an exit record): a fact the
        reconcile writes with the ending itself."""
        record = read.record
        if record is None:
            return None
        own = [m for m in read.markers if m.attempt == attempt.number and m.blocking_seconds is not None]
        exposed = exposure(self.facts(attempt, record, read.markers))
        return {
            "stepAtEnd": record.step,
            "lastCommittedStep": record.last_committed_step,
            "checkpointSaved": record.checkpoint_saved,
            "reason": record.reason,
            # Of the checkpoints this attempt committed that are still kept (--keep-last).
            "checkpoints": len(own),
            "stallSeconds": sum(m.blocking_seconds or 0.0 for m in own),
            "exposureSeconds": round(exposed.seconds, 3),
            "exposureSource": exposed.source,
        }

    def on_ending(
        self, job_id: str, request: JobRequest, attempt: Attempt, now: float, read: EndingRead | None = None
    ) -> None:
        """An attempt just ended (and its ending is stored): teach the book, once. `read`: what
        the reconcile already read of it; unreadable, the book is not taught now (the pass retries)."""
        if attempt.started_at is None:
            self.learn(job_id, request, attempt, now)
            return
        read = read if read is not None else self.read_ending(request, attempt)
        if read is None or request.checkpoint_interval is None:
            return
        if not self.ledger().has_counted(job_id, attempt.number):
            self._count(job_id, request, attempt, self.facts(attempt, read.record, read.markers), now)

    def with_ending(
        self,
        record: JobRecord,
        before: JobState,
        request: JobRequest,
        known: dict[int, EndingRead] | None = None,
    ) -> tuple[JobRecord, dict[int, EndingRead]]:
        """A job's record about to be written, with the facts of every attempt that ends in this
        write (with a restart at once the next attempt is already current): the trainer's figures,
        and on a terminal write the ledger mark (so the job stays live until the book has counted
        every ending). `known`: what the look's observation already read of an ending, by attempt
        (not read again). Returns what was read, by attempt number, for the book."""
        state, reads = record.state, dict[int, EndingRead]()
        for attempt in state.attempts:
            if not attempt.ended or _ended_in(before, attempt.number):
                continue
            try:
                read = (known or {}).get(attempt.number) or self.read_ending(request, attempt)
                figures = self.figures(attempt, read) if read is not None else None
            except Exception:  # figures are a nicety: they never hold up the ending's write
                log.exception("trainer figures unreadable", job_id=request.job_id, attempt=attempt.number)
                read = figures = None
            if read is not None:
                reads[attempt.number] = read
            if figures is not None:
                record = record.with_figures(attempt.number, figures)
        if state.phase.terminal and not before.phase.terminal and record.interval_setting is not None:
            record = replace(record, ledger_pending=True)
        return record, reads

    def all_counted(self, state: JobState, request: JobRequest) -> bool:
        """Whether every ended attempt of the job is in the book (a finished job's ledger mark
        may then go, in the reconcile's write)."""
        if request.checkpoint_interval is None:
            return True
        ledger = self.ledger()
        return all(ledger.has_counted(state.job_id, a.number) for a in state.attempts if a.ended)

    def catch_up(
        self, states: Iterable[JobState], request_of: Callable[[str], JobRequest], now: float
    ) -> int:
        """Learn every ended attempt of these jobs that the book has not counted (after a crash
        between a job's write and the ledger's). `states`: the live jobs, and the finished ones
        still marked as waiting for the ledger. Returns how many were counted now.

        Endings this instance has seen counted are remembered, so a pass reads the ledger only
        when a job has an ending it has not checked yet (a pass costs nothing otherwise)."""
        states = list(states)
        listed_ids = {state.job_id for state in states}
        self._checked = {key for key in self._checked if key[0] in listed_ids}
        unchecked = [
            (state, attempt)
            for state in states
            for attempt in state.attempts
            if attempt.ended and (state.job_id, attempt.number) not in self._checked
        ]
        counted = 0
        if unchecked:
            ledger = self.ledger()
            for state, attempt in unchecked:
                request = request_of(state.job_id)
                if request.checkpoint_interval is not None and not ledger.has_counted(
                    state.job_id, attempt.number
                ):
                    if not self.learn(state.job_id, request, attempt, now):
                        continue  # its exit record was unreadable: try again next pass
                    counted += 1
                self._checked.add((state.job_id, attempt.number))
        return counted

    # --- the choice (made by the core: `controller.core.interval_choice`) ---------------------------------------------------------------------------
    def cost(self, request: JobRequest, earlier: dict[str, Any] | None = None) -> CheckpointCost:
        """C from the job's commit markers; `earlier` (the job's recorded interval decisions by
        attempt) supplies the last measured C when no periodic save's marker is left."""
        try:
            markers = self.checkpoints.recent_markers(request.checkpoint_uri)
        except (CheckpointsUnavailable, CheckpointsUnreadable) as error:
            log.warning(
                "checkpoint interval: commit markers unreadable; default cost",
                job_id=request.job_id,
                error=str(error),
            )
            markers = []
        return checkpoint_cost(
            ((m.blocking_seconds, m.write_seconds, m.emergency) for m in markers), _measured_before(earlier)
        )

    def inputs(self, request: JobRequest, earlier: dict[str, Any] | None = None) -> IntervalInputs | None:
        """The facts the core chooses an `auto` attempt's interval from (None: not `auto`): the
        book's estimate for each capacity class the attempt may run on, and C."""
        setting = request.checkpoint_interval
        if setting is None or not setting.auto:
            return None
        book = self.ledger().book

        def on(on_demand: bool) -> tuple[CapacityClass, RateEstimate]:
            capacity = self.capacity(request, 1, on_demand)
            return capacity, estimate_for(book, capacity, self.prior(capacity))

        placed = {
            p.name: (
                p.capacity_class(),
                estimate_for(book, p.capacity_class(), self.prior(p.capacity_class())),
            )
            for p in request.placements
        }
        return IntervalInputs(setting, on(False), on(True), self.cost(request, earlier), placed)


def _ended_in(state: JobState, number: int) -> bool:
    return any(a.number == number and a.ended for a in state.attempts)
