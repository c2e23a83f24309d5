"""One read of an attempt: its CustomJob, and at an ending the evidence the trainer left.

`Observer.observe` is the single adapter call a reconcile makes about a job's recorded attempt.
It reads the CustomJob (GetCustomJob, or the copy a periodic listing just returned) and, only
when that CustomJob has ended, the latest committed checkpoint and the trainer's exit record
for it. What comes back is typed facts for the decision core, never a raw client object.

At an ending the evidence (the latest committed checkpoint, the chief's, every replica's and the
run records, the recent commit markers the interval keeper wants) is read on the look's own
thread, in series, in as few round trips as the bucket allows: two listings and the newest
markers (`controller.adapters.evidence`). No thread of its own.

The listing copy: a periodic pass lists every live CustomJob at once (one List call per page),
then hands each job to a reconcile. A copy is used once, and only while it is younger than
`listing_max_age`; a Vertex event for the job drops its copy (`forget`), so after an event the
job is always read with Get.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from controller import logs
from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.adapters.runs import restarts_of
from controller.adapters.vertex import VertexBackend, job_labels, job_name, observed_event, vertex_state_name
from controller.core import events as ev
from controller.core.model import VERTEX_TERMINAL, Attempt
from trainer import layout

log = logs.get("relaunch.observation")


@dataclass(frozen=True)
class AttemptObservation:
    """What one read found about one attempt's recorded CustomJob."""

    attempt: int
    vertex_name: str
    vertex: ev.VertexObserved | ev.VertexJobMissing
    checkpoint: ev.CheckpointObserved | None = None  # read only at an ending
    unreadable: CheckpointsUnreadable | None = None  # the checkpoint root refused us
    from_listing: bool = False
    # At an ending, what the trainer left, as read (the interval keeper's figures reuse it):
    exit_record: Any = None  # the chief's exit record (None: it left none)
    markers: list[Any] | None = None  # the recent commit markers (None: not read, or unreadable)
    got_at: float = 0.0  # wall-clock time the CustomJob's read returned (the recovery's timings)

    @property
    def ended(self) -> bool:
        if isinstance(self.vertex, ev.VertexJobMissing):
            return True
        return self.vertex.vertex_state in VERTEX_TERMINAL

    def has_error(self) -> bool:
        """Vertex has set the job's `error` (it does so about a minute after a failed job ends)."""
        vertex = self.vertex
        return isinstance(vertex, ev.VertexObserved) and bool(
            vertex.error_code or vertex.error_message.strip()
        )

    def events(self) -> list[ev.Event]:
        """For the core, in order: the checkpoint first (the ending is measured against it)."""
        return [*([self.checkpoint] if self.checkpoint else []), self.vertex]


class Observer:
    def __init__(
        self,
        vertex: VertexBackend,
        checkpoints: Any,  # controller.adapters.checkpoints.CheckpointProbe
        *,
        listing_max_age: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.vertex = vertex
        self.checkpoints = checkpoints
        self._max_age = listing_max_age
        self._clock = clock
        self._listed: dict[str, tuple[Any, float]] = {}  # vertex name -> (CustomJob, listed at)
        self._names_of: dict[str, list[str]] = {}  # job id -> the names listed with its labels
        # Stays: the pass's worker replaces the listing copy, jobs' workers take their entries, the
        # event callbacks drop them: an in-memory map shared across threads.
        self._lock = threading.Lock()

    # --- the listing copy ----------------------------------------------------------------------
    def remember_listing(self, jobs: list[Any]) -> None:
        now = self._clock()
        by_job: dict[str, list[str]] = {}
        names = [job_name(job) for job in jobs]
        for job, name in zip(jobs, names, strict=True):
            job_id, _ = job_labels(job)
            if job_id is not None:
                by_job.setdefault(job_id, []).append(name)
        with self._lock:
            self._listed = {name: (job, now) for job, name in zip(jobs, names, strict=True)}
            self._names_of = by_job

    def listed_for(self, job_id: str, *, other_than: str | None = None) -> list[Any]:
        """The CustomJobs a recent listing found with this job's labels, but `other_than` (the one
        the store recorded): a duplicate, a stray, or a create whose name was never recorded.
        Each is handed out once."""
        with self._lock:
            names = [n for n in self._names_of.pop(job_id, []) if n != other_than]
            copies = [self._listed.pop(name, None) for name in names]
        now = self._clock()
        return [job for job, at in filter(None, copies) if now - at <= self._max_age]

    def forget(self, vertex_name: str) -> None:
        with self._lock:
            self._listed.pop(vertex_name, None)

    def listed_recently(self, vertex_name: str) -> bool:
        with self._lock:
            copy = self._listed.get(vertex_name)
            return copy is not None and self._clock() - copy[1] <= self._max_age

    def _listed_copy(self, vertex_name: str) -> Any | None:
        with self._lock:
            copy = self._listed.pop(vertex_name, None)
        if copy is None or self._clock() - copy[1] > self._max_age:
            return None
        return copy[0]

    # --- the one read ---------------------------------------------------------------------------
    def observe(
        self,
        vertex_name: str,
        attempt: int,
        checkpoint_uri: str,
        *,
        read_evidence: bool = True,
        urgent: bool = False,
    ) -> AttemptObservation:
        """Read `vertex_name` (attempt `attempt`'s recorded CustomJob); at its ending also the
        latest committed checkpoint under `checkpoint_uri` and the trainer's exit record.
        `urgent`: the Get may spend the read budget's reserve (a running attempt's read)."""
        job = self._listed_copy(vertex_name)
        from_listing = job is not None
        if job is None:
            job = self.vertex.get(vertex_name, urgent=urgent)
        got_at = time.time()
        if job is None:
            return AttemptObservation(attempt, vertex_name, ev.VertexJobMissing(attempt, vertex_name))
        if vertex_state_name(job) not in VERTEX_TERMINAL or not read_evidence:
            return AttemptObservation(
                attempt, vertex_name, observed_event(job, attempt), from_listing=from_listing
            )
        vertex_job_id = vertex_name.rsplit("/", 1)[-1]
        checkpoint, exit_record, unreadable, replicas, markers, runs = None, None, None, [], None, []
        try:
            ending = self.checkpoints.ending(checkpoint_uri, attempt, vertex_job_id=vertex_job_id)
        except CheckpointsUnreadable as error:
            # Not a passing fault: waiting cannot help, and the ending must still be applied.
            unreadable = error
        else:
            exit_record, replicas, runs, markers = (
                ending.exit_record,
                ending.replicas,
                ending.runs,
                ending.markers,
            )
            if ending.latest is not None:
                checkpoint = ev.CheckpointObserved(ending.latest.step, ending.latest.uri)
            if runs:  # a last run killed without a word left an earlier run's records in place
                exit_record, kept = layout.records_of_run(runs[-1], exit_record, replicas)
                replicas = list(kept)
        observed = observed_event(
            job, attempt, exit_record, progress_unknown=unreadable is not None, replica_exits=replicas
        )
        observed = replace(observed, restarts=restarts_of(runs))
        return AttemptObservation(
            attempt, vertex_name, observed, checkpoint, unreadable, from_listing, exit_record, markers, got_at
        )

    def latest_checkpoint(self, checkpoint_uri: str) -> ev.CheckpointObserved | None:
        """A running job's progress probe (raises CheckpointsUnreadable like `observe` would)."""
        latest = self.checkpoints.latest(checkpoint_uri)
        return None if latest is None else ev.CheckpointObserved(latest.step, latest.uri)

    def progress(self, checkpoint_uri: str, current: Attempt | None) -> list[ev.Event]:
        """A running job's progress probe: its newest committed checkpoint and the restarts in
        place its current attempt's run records tell (raises CheckpointsUnreadable like `observe`)."""
        latest = self.latest_checkpoint(checkpoint_uri)
        events: list[ev.Event] = [latest] if latest is not None else []
        if current is not None and current.vertex_name is not None and not current.ended:
            name = current.vertex_name
            runs = self.checkpoints.runs(
                checkpoint_uri, current.number, vertex_job_id=name.rsplit("/", 1)[-1]
            )
            if restarts := restarts_of(runs):
                events.append(ev.RestartsObserved(current.number, name, restarts))
        return events
