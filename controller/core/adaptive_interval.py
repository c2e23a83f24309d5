"""The adaptive checkpoint interval as the controller uses it: what a request asks for, what an
attempt's ending teaches, and the interval the next attempt gets.

Pure (stdlib only, no clock: times are passed in). The estimator itself is
`checkpoint_interval` (rate estimate, prior, interval choice); this module is the bookkeeping
around it that the shell (`controller/service/interval.py`) runs:

- `IntervalSetting`: a request's `checkpoint.interval` (`auto` with optional min/max, or a
  fixed number of seconds);
- `ending_kind`: which `EndingKind` an attempt's classified ending is, or None when it teaches
  nothing (see the table there);
- `exposure`: the seconds of training an attempt was exposed for, from the trainer's timestamps
  where they tell, else Vertex's run time;
- `Ledger`: the `RateBook` plus which (job, attempt) endings it already counted, so an ending
  applied twice (redelivery, a reconcile pass after a crash) counts once; `Ledger.record` is the
  one update, and it is idempotent;
- `checkpoint_cost`: C (the blocking stall) and the full write time from the newest commit
  markers (emergency saves left out), or documented defaults before any marker exists;
- `decide_interval`: the seconds for the next attempt and the evidence behind them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from controller.core.checkpoint_interval import (
    CapacityClass,
    EndingKind,
    RateBook,
    RateEstimate,
    choose_interval_detail,
    explain,
    retimed,
)
from controller.core.classify import Ending
from controller.core.restarts import InPlaceRestart

# --- the request's setting ----------------------------------------------------------------------

# Bounds an `auto` interval stays within unless the request narrows them: below a minute a
# checkpoint of a real model is mostly stall; past a day the work at risk is a day's compute.
DEFAULT_MIN_SECONDS = 60.0
DEFAULT_MAX_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class IntervalSetting:
    """`checkpoint.interval` of a request: `auto` (learned, within [min, max]) or fixed seconds."""

    auto: bool
    fixed_seconds: float | None = None
    min_seconds: float = DEFAULT_MIN_SECONDS
    max_seconds: float = DEFAULT_MAX_SECONDS

    def __post_init__(self) -> None:
        if self.auto == (self.fixed_seconds is not None):
            raise ValueError("an interval is either auto or a fixed number of seconds")
        if not (0.0 < self.min_seconds <= self.max_seconds and math.isfinite(self.max_seconds)):
            raise ValueError(f"need 0 < min <= max (got {self.min_seconds}, {self.max_seconds})")

    def to_json(self) -> Any:
        """The canonical request form: `"auto"`, `{"mode": "auto", "min": s, "max": s}` or seconds."""
        if not self.auto:
            return self.fixed_seconds
        if (self.min_seconds, self.max_seconds) == (DEFAULT_MIN_SECONDS, DEFAULT_MAX_SECONDS):
            return "auto"
        return {"mode": "auto", "min": self.min_seconds, "max": self.max_seconds}


# --- what an ending teaches ---------------------------------------------------------------------


@dataclass(frozen=True)
class EndingFacts:
    """What the shell knows about one ended attempt when it learns from it."""

    ending: Ending
    rule: str | None
    started_at: float | None  # None: the attempt never ran
    ended_at: float | None
    exit_reason: str | None = None  # the trainer's exit record, when one was found
    checkpoint_saved: bool | None = None  # ... and whether its emergency save committed
    # Where training resumed (the checkpoint step the attempt was given; None: from scratch), and
    # (step, epoch seconds) points at which the trainer timestamped reaching a step during this
    # attempt (its commit markers, its exit record): they date the first step (see `exposure`).
    resume_step: int | None = None
    progress: tuple[tuple[int, float], ...] = ()


def ending_kind(facts: EndingFacts) -> EndingKind | None:
    """How an ended attempt counts for the rate of work-losing endings, or None when not at all.

    | classified ending                         | counts as         | why                          |
    |-------------------------------------------|-------------------|------------------------------|
    | preempted, exit record says saved         | RECLAIM_SAVED     | SIGTERM, emergency save done |
    | preempted, exit record says not saved     | RECLAIM_UNSAVED   | grace too short              |
    | preempted, no exit record                 | KILLED            | SIGKILL before any record    |
    | infrastructure, rule `capacity`           | NODE_LOST         | capacity lost while running  |
    | infrastructure, other rules               | CRASHED           | internal error, unknown      |
    | infrastructure, rule `rendezvous-timeout` | None              | the gang never trained       |
    | succeeded                                 | SUCCEEDED         | exposure without a loss      |
    | cancelled                                 | CANCELLED         | exposure without a loss      |
    | user error, timeout                       | USER_ERROR        | the user's program or limit  |
    | capacity, no usable checkpoint            | None              | nothing trained              |
    | any ending of an attempt that never ran   | None              | no exposure                  |

    SUCCEEDED, CANCELLED and USER_ERROR are no work-losing endings (the book's rate is the
    capacity's, which a user's bug says nothing about), but their training time still counts as
    exposure: the capacity ran that long without taking the machines back.
    """
    if facts.started_at is None or facts.ended_at is None or facts.ended_at <= facts.started_at:
        return None
    ending = facts.ending
    if ending is Ending.PREEMPTED:
        if facts.exit_reason == "preempted":
            return EndingKind.RECLAIM_SAVED if facts.checkpoint_saved else EndingKind.RECLAIM_UNSAVED
        return EndingKind.KILLED
    if ending is Ending.INFRASTRUCTURE:
        if facts.rule == "rendezvous-timeout":
            return None
        return EndingKind.NODE_LOST if facts.rule == "capacity" else EndingKind.CRASHED
    if ending is Ending.SUCCEEDED:
        return EndingKind.SUCCEEDED
    if ending is Ending.CANCELLED:
        return EndingKind.CANCELLED
    if ending in (Ending.USER_ERROR, Ending.TIMEOUT):
        return EndingKind.USER_ERROR
    return None  # CAPACITY, NO_USABLE_CHECKPOINT


def restart_endings(
    restarts: Iterable[InPlaceRestart], started_at: float | None
) -> tuple[tuple[EndingKind, float], ...]:
    """Each restart in place of an attempt as an ending of its own for the book, with the run it
    cut short as its exposure (from the attempt's start, or the previous restart, to the run's
    end): a failure as USER_ERROR, a reclaim whose run resumed where the previous one stopped as
    RECLAIM_SAVED, one with no exit record as KILLED, any other as RECLAIM_UNSAVED."""
    out = []
    begin = started_at
    for restart in sorted(restarts, key=lambda r: r.run):
        seconds = max(0.0, restart.at - begin) if begin is not None else 0.0
        if restart.previous_failed:
            kind = EndingKind.USER_ERROR
        elif restart.lost_no_work:
            kind = EndingKind.RECLAIM_SAVED
        elif restart.previous_ended_at is None:
            kind = EndingKind.KILLED
        else:
            kind = EndingKind.RECLAIM_UNSAVED
        out.append((kind, seconds))
        begin = restart.started_at
    return tuple(out)


@dataclass(frozen=True)
class Exposure:
    seconds: float
    source: str  # EXPOSURE_TRAINING or EXPOSURE_RUN_TIME (or "never ran")


EXPOSURE_TRAINING = "training time (trainer timestamps)"
EXPOSURE_RUN_TIME = "run time (Vertex start to end, start-up included)"


# The trainer's timestamps (commit markers' `wallTime`, exit records' `time`) are whole seconds.
STAMP_RESOLUTION_SECONDS = 1.0
# The first step is dated only when that date is this sure, as a share of the training time it
# gives: two stamps a few seconds apart, far from the first step, say little about when it was.
MAX_DATING_ERROR_SHARE = 0.1


def exposure(facts: EndingFacts) -> Exposure:
    """Seconds of training the attempt was exposed for: from its first step to its end.

    Vertex's start time is when the replicas were started; the image pull, rendezvous and restore
    come before the first step and lose no work when they are cut short, so counting them makes
    the rate come out low and the interval long. The trainer timestamps the steps it reaches (a
    commit marker: the step its save began at, `wallTime - writeSeconds`; its exit record, unless
    a reclaim's: the step it stopped at). The earliest and the
    latest such point of this attempt give its seconds per step, and going back from the earliest
    by the steps since the resume step dates the first step.

    The run time instead (start-up included) when that cannot be done well: fewer than two dated
    steps (killed before its first checkpoint, an older trainer), stamps too close together for
    their whole-second resolution to date the first step within MAX_DATING_ERROR_SHARE of the
    training time, or a first step dated before Vertex's start (a skewed clock, slower steps near
    the start)."""
    if facts.started_at is None or facts.ended_at is None:
        return Exposure(0.0, "never ran")
    run = max(0.0, facts.ended_at - facts.started_at)
    resumed = facts.resume_step or 0
    earliest: dict[int, float] = {}
    for step, at in facts.progress:
        if step > resumed and math.isfinite(at):
            earliest[step] = min(at, earliest.get(step, at))
    points = sorted(earliest.items())
    if len(points) >= 2:
        (first_step, first_at), (last_step, last_at) = points[0], points[-1]
        if last_at > first_at:
            seconds_per_step = (last_at - first_at) / (last_step - first_step)
            back = (first_step - resumed) * seconds_per_step
            first_step_at = first_at - back
            training = facts.ended_at - first_step_at
            # Each stamp may be off by the resolution: the pace by 2r over the span, and the date
            # of the first step by r plus that share of the way back.
            error = STAMP_RESOLUTION_SECONDS * (1.0 + 2.0 * back / (last_at - first_at))
            if first_step_at >= facts.started_at and error <= MAX_DATING_ERROR_SHARE * training:
                return Exposure(min(run, training), EXPOSURE_TRAINING)
    return Exposure(run, EXPOSURE_RUN_TIME)


def exposure_seconds(facts: EndingFacts) -> float:
    """`exposure(facts).seconds`."""
    return exposure(facts).seconds


# --- the book, and what it already counted ------------------------------------------------------

# Jobs whose counted attempts the ledger remembers. Attempts of one job end in order, so "the
# highest counted, less the ones skipped below it" is exact; the oldest jobs are forgotten past
# this many, long after any redelivery of their endings could arrive (the shell catches up on
# live jobs and on ended jobs still marked as waiting for the ledger).
MAX_REMEMBERED_JOBS = 5000


@dataclass(frozen=True)
class Counted:
    job_id: str
    attempt: int  # the highest counted attempt
    at: float
    # Attempts below `attempt` not counted yet: a later attempt was counted while their exit
    # record could not be read. They count when they are learned (with their true kind).
    missing: tuple[int, ...] = ()


@dataclass(frozen=True)
class Ledger:
    """The rate book plus the endings it was built from (for idempotence)."""

    book: RateBook = field(default_factory=RateBook)
    counted: tuple[Counted, ...] = ()  # one per job: its highest counted attempt

    def has_counted(self, job_id: str, attempt: int) -> bool:
        return any(
            c.job_id == job_id and c.attempt >= attempt and attempt not in c.missing for c in self.counted
        )

    def record(
        self,
        job_id: str,
        attempt: int,
        capacity: CapacityClass,
        kind: EndingKind | None,
        exposure: float,
        now: float,
        prior: RateEstimate | None = None,
        restarts: tuple[tuple[EndingKind, float], ...] = (),
    ) -> Ledger:
        """Fold one ended attempt in; the same (job, attempt) a second time changes nothing.

        `kind` None (an ending that teaches nothing) is still marked counted, so a later look at
        the same attempt does not reconsider it. `prior` seeds a class the book has not seen yet
        (None: the estimator's documented prior for the class), and its half-life (the configured
        one) applies to a class already in the book. `restarts`: the attempt's restarts in place
        (`restart_endings`), each an ending of its own, folded in first; the attempt's own ending
        keeps the rest of its exposure."""
        if self.has_counted(job_id, attempt):
            return self
        book = self.book
        if kind is not None:
            if prior is not None:
                # Seed an unseen class; re-time a known one to the prior's (configured) half-life.
                seeded = estimate_for(book, capacity, prior)
                rest = tuple((c, e) for c, e in book.estimates if c != capacity)
                book = replace(book, estimates=(*rest, (capacity, seeded)))
            for restart_kind, seconds in restarts:
                book = book.observe(capacity, restart_kind, seconds)
            rest_seconds = max(0.0, exposure - sum(seconds for _, seconds in restarts))
            book = book.observe(capacity, kind, rest_seconds)
        known = next((c for c in self.counted if c.job_id == job_id), None)
        if known is None:
            entry = Counted(job_id, attempt, now, tuple(range(1, attempt)))
        elif attempt > known.attempt:
            skipped = tuple(range(known.attempt + 1, attempt))
            entry = Counted(job_id, attempt, now, (*known.missing, *skipped))
        else:  # one of the missing attempts, learned at last
            entry = Counted(job_id, known.attempt, now, tuple(a for a in known.missing if a != attempt))
        others = [c for c in self.counted if c.job_id != job_id]
        remembered = sorted([*others, entry], key=lambda c: c.at)
        return Ledger(book=book, counted=tuple(remembered[-MAX_REMEMBERED_JOBS:]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "book": self.book.to_dict(),
            "counted": [
                {
                    "jobId": c.job_id,
                    "attempt": c.attempt,
                    "at": c.at,
                    **({"missing": list(c.missing)} if c.missing else {}),
                }
                for c in self.counted
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        return cls(
            book=RateBook.from_dict(data.get("book", {})),
            counted=tuple(
                Counted(
                    str(c["jobId"]),
                    int(c["attempt"]),
                    float(c["at"]),
                    tuple(int(a) for a in c.get("missing", ())),
                )
                for c in data.get("counted", [])
            ),
        )


def estimate_for(book: RateBook, capacity: CapacityClass, prior: RateEstimate | None = None) -> RateEstimate:
    """The class's estimate; an unseen class reads as `prior` (or the estimator's own)."""
    if prior is None:
        return book.estimate(capacity)
    if not any(c == capacity for c, _ in book.estimates):
        return prior
    # The prior carries the configured half-life; a class already in the book forgets at it too.
    return retimed(book.estimate(capacity), prior.half_life_seconds)


# --- C ------------------------------------------------------------------------------------------

# Before any commit marker of the job carries a measured cost: a checkpoint of a multi-GB model
# stalls training for tens of seconds and takes a few minutes to reach GCS. Overstating C makes
# the first interval longer, which costs at most the work since the attempt began, once.
DEFAULT_CHECKPOINT_STALL_SECONDS = 30.0
DEFAULT_CHECKPOINT_WRITE_SECONDS = 120.0
# The median of this many newest markers: one slow save (a GCS hiccup) must not set every later
# interval.
COST_MARKERS = 5


@dataclass(frozen=True)
class CheckpointCost:
    stall_seconds: float  # C
    write_seconds: float  # save start to commit
    source: str  # "commit markers (n)" or "default"


def checkpoint_cost(
    measured: Iterable[tuple[float | None, float | None, bool]], earlier: CheckpointCost | None = None
) -> CheckpointCost:
    """C and the write time from the (blockingSeconds, writeSeconds, emergency) of the newest
    markers first.

    Markers without the figures (older trainers) are skipped, and so are emergency saves: the save
    a SIGTERM starts stalls no training that would go on (the attempt is ending), so its stall is
    no measure of what a periodic checkpoint costs, and its near-zero C would drag the interval
    down. With none left, `earlier` (what an earlier attempt of the job measured: --keep-last
    may have pruned every periodic save's marker, leaving an emergency save's alone), else the
    defaults."""
    usable = [(b, w) for b, w, emergency in measured if b is not None and not emergency][:COST_MARKERS]
    if not usable and earlier is not None:
        return earlier
    if not usable:
        return CheckpointCost(
            DEFAULT_CHECKPOINT_STALL_SECONDS, DEFAULT_CHECKPOINT_WRITE_SECONDS, "default (no marker yet)"
        )
    stall = _median([b for b, _ in usable])
    writes = [w for _, w in usable if w is not None]
    write = _median(writes) if writes else stall
    # A stall of 0 s (measured below the clock's resolution) is no cost the estimator accepts.
    return CheckpointCost(max(stall, 1e-3), max(write, 0.0), f"commit markers ({len(usable)})")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntervalDecision:
    """What one attempt was given, and why: stored on the job, shown by status and report."""

    seconds: float
    mode: str  # "auto" or "fixed"
    capacity: str = ""  # CapacityClass.key()
    rate_per_hour: float | None = None  # posterior mean of work-losing endings per hour
    rate_sd_per_hour: float | None = None  # its posterior standard deviation
    endings: int = 0
    saved_reclaims: int = 0
    exposure_seconds: float = 0.0
    stall_seconds: float | None = None
    write_seconds: float | None = None
    cost_source: str = ""
    clamped_by: str | None = None
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "mode": self.mode,
            "capacity": self.capacity,
            "ratePerHour": self.rate_per_hour,
            "rateSdPerHour": self.rate_sd_per_hour,
            "endings": self.endings,
            "savedReclaims": self.saved_reclaims,
            "exposureSeconds": self.exposure_seconds,
            "stallSeconds": self.stall_seconds,
            "writeSeconds": self.write_seconds,
            "costSource": self.cost_source,
            "clampedBy": self.clamped_by,
            "explanation": self.explanation,
        }


def decide_interval(
    setting: IntervalSetting,
    capacity: CapacityClass,
    estimate: RateEstimate,
    cost: CheckpointCost,
) -> IntervalDecision:
    """The interval for the next attempt: the request's fixed seconds, or the learned optimum."""
    if not setting.auto:
        assert setting.fixed_seconds is not None
        return IntervalDecision(
            seconds=setting.fixed_seconds, mode="fixed", explanation="fixed by the request"
        )
    choice = choose_interval_detail(
        estimate,
        cost.stall_seconds,
        setting.min_seconds,
        setting.max_seconds,
        write_seconds=cost.write_seconds,
    )
    return IntervalDecision(
        seconds=choice.seconds,
        mode="auto",
        capacity=capacity.key(),
        rate_per_hour=estimate.mean_rate * 3600.0,
        # Gamma(alpha, beta): sd = sqrt(alpha) / beta.
        rate_sd_per_hour=math.sqrt(estimate.alpha) / estimate.beta * 3600.0,
        endings=estimate.endings,
        saved_reclaims=estimate.saved_reclaims,
        exposure_seconds=estimate.exposure_seconds,
        stall_seconds=cost.stall_seconds,
        write_seconds=cost.write_seconds,
        cost_source=cost.source,
        clamped_by=choice.clamped_by,
        explanation=f"{explain(estimate, cost.stall_seconds, choice)}; C from {cost.source}",
    )
