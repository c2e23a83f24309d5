"""Goodput of one job: how much of its wall time went into training that was kept.

Pure functions over a job's document (the stored one, with `state`, or the `status_document`
form with `attempts`); no I/O, and `now` is passed in.

The estimate, from each attempt's times (`submittedAt`, `startedAt`, `endedAt`) and checkpoint
steps (`resumeFromStep`, `checkpointStepAtEnd`):

- total: from the job's creation (first submission) to its end (the last attempt's end, or the
  last update, once the job is terminal), or to `now` while it is still live.
- running time of an attempt: `startedAt` to `endedAt` (or `now` while it runs; Vertex's end,
  `vertexEndedAt`, while the decision on its ending is awaited), less the dead time of its
  restarts in place (from a run's end, by its exit records, to the next run's start: `restarts`,
  controller/core/restarts.py), which is restarting. An attempt that never started (a stockout)
  has none.
- steps an attempt advanced: `checkpointStepAtEnd` minus the furthest committed step known
  before it (its `resumeFromStep`, or an earlier attempt's `checkpointStepAtEnd` if higher; a
  missing step counts as 0). Only committed steps survive an attempt, and steps done a second
  time are not progress.
- step rate: each attempt's apparent rate is advanced / running time. It counts any lost time
  as if it were training, so it can only underestimate; the job's rate is the highest apparent
  rate among its attempts (the one that wasted least).
- productive time: a succeeded attempt's whole running time, unless it trained nothing (it
  resumed from a committed step and neither committed a newer one nor, by the trainer's count,
  trained past it: a 0-step attempt is all unproductive); a still-running attempt's running
  time so far (nothing is lost until it ends); for an attempt that ended any other way,
  advanced / job rate.
- lost ("unproductive running") time: the rest of an ended, unsuccessful attempt's running
  time. It holds the work done after its last committed checkpoint, which the next attempt
  recomputes (all of it when it advanced nothing), and also whatever made that attempt slower
  than the fastest one: start-up, cold caches. The trainer's exit record tells the exact
  number of recomputed steps; `relaunch demo` prints it.
- waiting for capacity: `submittedAt` to `startedAt` of each attempt (to `endedAt` for one
  that never started, to `now` for one still queued).
- restarting: what remains of the total: queueing before the first submission, the dead time
  from an attempt's end (Vertex's end time) to the next one's submission (deciding, backoff),
  and the dead time of restarts in place.
- goodput = productive / total.

Where the trainer left its own figures (`trainerFigures` of an attempt, from its exit record and
the commit markers it wrote; controller/service/interval.py keeps them), they replace the
estimates above for that attempt, and the attempt's `source` says so:

- steps trained: the exit record's `step` (every step done, kept or not), not just the
  committed ones, so the apparent rate counts recomputed work as work done and the job's rate
  comes out close to the real step rate;
- committed progress: the exit record's `lastCommittedStep` (the trainer's word, also when the
  controller did not see the final checkpoint);
- recomputed steps: `step - lastCommittedStep`, exactly what the next attempt redoes;
- checkpoint stall: the sum of the `blockingSeconds` of the attempt's own commit markers that
  are still kept (a lower bound once --keep-last dropped older ones).
The trainer records no per-step times, so the job's rate is still the best apparent rate, and
the start-up before the first step still reads as lost time.

Work is counted at the size actually run (an elastic job, `controller.core.elastic`): each
attempt's `replicas` (per pool, the request's unless it was shrunk) gives its nodes, and the
rates compared above are steps per node-second, so an attempt on 2 of 4 nodes is expected to
advance half as fast and is not charged the other half as lost. This assumes the trainer keeps
the global batch when it runs on fewer nodes (each step then takes about 4/2 as long); the
totals in node-seconds (`node_seconds`, `productive_node_seconds`) say what the capacity bought.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.model import TERMINAL_PHASE_NAMES
from controller.jobrecord import is_job_document
from controller.readmodel.jobs import Json, status_document


@dataclass(frozen=True)
class AttemptTime:
    number: int
    running: float  # seconds between start and end (or now)
    productive: float
    lost: float
    waiting: float  # submitted -> started
    source: str = "estimate"  # or "trainer" when the trainer's exit record gave the figures
    recomputed_steps: int | None = None  # trainer: steps done after the last commit
    stall_seconds: float | None = None  # trainer: blocking time of its kept checkpoints
    nodes: int = 1  # replicas the attempt ran on (all pools)


@dataclass(frozen=True)
class Goodput:
    total: float
    productive: float
    lost: float
    waiting_for_capacity: float
    restarting: float
    step_rate: float | None  # steps per second; None when no attempt advanced
    attempts: tuple[AttemptTime, ...]
    node_seconds: float = 0.0  # running time times the replicas it ran on, summed
    productive_node_seconds: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.productive / self.total if self.total > 0 else None

    def summary(self) -> str:
        ratio = "n/a" if self.ratio is None else f"{self.ratio:.1%}"
        rate = "unknown" if self.step_rate is None else f"{self.step_rate:.3g} steps/s"
        return (
            f"goodput {ratio} of {duration(self.total)}: productive {duration(self.productive)}, "
            f"unproductive running {duration(self.lost)}, waiting for capacity "
            f"{duration(self.waiting_for_capacity)}, restarting {duration(self.restarting)} "
            f"(step rate {rate}; {self.sources()})" + self._sizes()
        )

    def _sizes(self) -> str:
        """Node-seconds, when attempts ran at different sizes (a shrunk elastic job)."""
        sizes = sorted({a.nodes for a in self.attempts if a.running > 0})
        if len(sizes) < 2:
            return ""
        hours = self.node_seconds / 3600
        productive = self.productive_node_seconds / 3600
        return f"; ran on {'/'.join(map(str, sizes))} replicas: {hours:.2f} node-hours, {productive:.2f} productive"

    def sources(self) -> str:
        """Which attempts' figures came from the trainer and which are estimates."""
        trained = sum(1 for a in self.attempts if a.source == "trainer")
        if trained == 0:
            return "estimated from checkpoint steps"
        if trained == len(self.attempts):
            return "trainer's figures for every attempt"
        return f"trainer's figures for {trained} of {len(self.attempts)} attempts, the rest estimated"


def duration(seconds: float) -> str:
    """Seconds as a short human duration: 42s, 3m05s, 2h07m, 3d04h."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def user_view(document: Json) -> Json:
    """The `status_document` form, whichever form was given."""
    if is_job_document(document):
        return status_document(document, with_timeline=False)
    return document


def job_end(view: Json, now: float) -> float:
    """When the job's wall clock stops: its end once terminal, otherwise now."""
    if view["phase"] not in TERMINAL_PHASE_NAMES:
        return now
    ends = [a["endedAt"] for a in view["attempts"] if a.get("endedAt") is not None]
    return float(max(ends)) if ends else _first(view.get("updatedAt"), view["createdAt"])


def _running(attempt: Json, now: float) -> float:
    """Running time, without the dead time of restarts in place (restarting, not running), to
    the attempt's end: Vertex's end while its decision is awaited, `now` while it runs."""
    started = attempt.get("startedAt")
    if started is None:
        return 0.0
    stop = _first(attempt.get("endedAt"), attempt.get("vertexEndedAt"), now)
    return max(0.0, stop - float(started) - _restarting_in_place(attempt))


def _restarting_in_place(attempt: Json) -> float:
    """Dead time between the runs of an attempt's CustomJob (its restarts in place)."""
    return sum(
        max(0.0, float(r["startedAt"]) - float(r["previousEndedAt"]))
        for r in attempt.get("restarts") or []
        if r.get("previousEndedAt") is not None
    )


def _figures(attempt: Json) -> Json | None:
    """The trainer's figures of an attempt, when its exit record gave a step count."""
    figures = attempt.get("trainerFigures")
    return figures if figures and figures.get("stepAtEnd") is not None else None


def _committed_at_end(attempt: Json) -> int | None:
    figures = _figures(attempt)
    if figures is not None and figures.get("lastCommittedStep") is not None:
        return max(int(figures["lastCommittedStep"]), attempt.get("checkpointStepAtEnd") or 0)
    return attempt.get("checkpointStepAtEnd")


def _starts(attempts: list[Json]) -> list[int]:
    """The committed step each attempt started from (the furthest known before it)."""
    out, best = [], 0
    for attempt in attempts:
        start = max(best, attempt.get("resumeFromStep") or 0)
        out.append(start)
        end = _committed_at_end(attempt)
        best = max(best, start if end is None else end)
    return out


def _advanced(attempts: list[Json]) -> list[int]:
    """New committed steps of each attempt, in order."""
    out = []
    for attempt, start in zip(attempts, _starts(attempts)):
        end = _committed_at_end(attempt)
        out.append(max(0, (start if end is None else end) - start))
    return out


def _trained(attempts: list[Json]) -> list[int]:
    """Steps each attempt trained: the trainer's count where its exit record says, else the
    committed ones (all that can be known without it)."""
    out = []
    for attempt, start, advanced in zip(attempts, _starts(attempts), _advanced(attempts)):
        figures = _figures(attempt)
        out.append(max(advanced, int(figures["stepAtEnd"]) - start) if figures is not None else advanced)
    return out


def _trained_nothing(attempt: Json, start: int, advanced: int) -> bool:
    """An ended attempt known to have trained 0 steps (resumed from a committed step and left
    none newer, nor any step by the trainer's count): its running time is not productive."""
    if attempt.get("ending") is None or start <= 0 or advanced > 0:
        return False
    figures = _figures(attempt)
    if figures is not None:
        return int(figures["stepAtEnd"]) <= start
    return attempt.get("checkpointStepAtEnd") is not None


def _waiting(attempt: Json, now: float) -> float:
    submitted = attempt.get("submittedAt")
    if submitted is None:
        return 0.0
    return max(0.0, _first(attempt.get("startedAt"), attempt.get("endedAt"), now) - float(submitted))


def _first(*values: float | None) -> float:
    """The first value that is set (0 is a time like any other)."""
    return float(next(v for v in values if v is not None))


def _nodes(attempt: Json) -> int:
    return max(1, sum(attempt.get("replicas") or [1]))


def node_step_rate(attempts: list[Json], now: float) -> float | None:
    """The best apparent rate in steps per node-second."""
    rates = [
        steps / (_running(a, now) * _nodes(a))
        for a, steps in zip(attempts, _trained(attempts))
        if _running(a, now) > 0 and steps > 0
    ]
    return max(rates) if rates else None


def step_rate(attempts: list[Json], now: float) -> float | None:
    rates = [
        steps / _running(a, now)
        for a, steps in zip(attempts, _trained(attempts))
        if _running(a, now) > 0 and steps > 0
    ]
    return max(rates) if rates else None


def compute(document: Json, now: float) -> Goodput:
    view = user_view(document)
    attempts = view["attempts"]
    rate = step_rate(attempts, now)
    per_node = node_step_rate(attempts, now)
    rows = []
    for attempt, advanced, start in zip(attempts, _advanced(attempts), _starts(attempts)):
        running = _running(attempt, now)
        ending = attempt.get("ending")
        nodes = _nodes(attempt)
        if (ending is None or ending == "succeeded") and not _trained_nothing(attempt, start, advanced):
            productive = running
        elif per_node is None:
            productive = 0.0
        else:
            productive = min(running, advanced / (per_node * nodes))
        figures = _figures(attempt)
        recomputed = stall = None
        if figures is not None:
            committed = _committed_at_end(attempt) or start
            recomputed = max(0, int(figures["stepAtEnd"]) - max(committed, start))
            stall = figures.get("stallSeconds")
        rows.append(
            AttemptTime(
                attempt["number"],
                running,
                productive,
                running - productive,
                _waiting(attempt, now),
                source="trainer" if figures is not None else "estimate",
                recomputed_steps=recomputed,
                stall_seconds=stall,
                nodes=nodes,
            )
        )
    total = max(0.0, job_end(view, now) - view["createdAt"])
    productive = sum(r.productive for r in rows)
    lost = sum(r.lost for r in rows)
    waiting = sum(r.waiting for r in rows)
    restarting = max(0.0, total - productive - lost - waiting)
    return Goodput(
        total,
        productive,
        lost,
        waiting,
        restarting,
        rate,
        tuple(rows),
        node_seconds=sum(r.running * r.nodes for r in rows),
        productive_node_seconds=sum(r.productive * r.nodes for r in rows),
    )
