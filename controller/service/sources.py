"""Everything that can happen to a job, turned into its id in the work queue.

Nothing here decides or writes job state; each source only finds which job a signal concerns and
enqueues it, and `reconcile(job_id)` reads the truth for itself:

  - a Vertex job-state log entry (`on_hint`): it names a CustomJob, not our job; the index of
    CustomJob ids the live jobs recorded (kept as states are written) says whose it is. An id
    not in the index costs nothing once the first pass has built it (the sink carries every
    Vertex job of the project); before that, one Get reads its labels;
  - the periodic pass (`run_pass`, served by a queue worker under the reserved key `PASS_KEY`,
    so a recovery never waits for it and no two passes overlap): every live CustomJob listed
    (state filter, read mask) and every live job in the store is enqueued; the jobs whose
    outboxes may hold an unsent alert once per leadership; and the gauges move one step;
  - the intake and the push endpoint enqueue the job they recorded (`service.intake`), through
    `enqueue`, and a new job through `enqueue_created` with the record just created, which its
    first look starts from (reading only its cancel record, and that only once its create-slot
    turn has come), as a pass's look starts from the pass's snapshot.

The pass's snapshot: what the pass listed (each live job's document, whether a cancel is recorded
for it, whether it is due for a progress probe) is handed to that job's next look (`serve`), so
a pass reads each live job once, in its listing, and a look it caused reads nothing again: a
pass costs one store listing of jobs and one of cancels, one Vertex listing, and the probes,
however many live jobs there are. A snapshot entry is only good while nothing newer can exist:
every write of a job by this controller (a transition) and every enqueue for a reason of its own
(a request, a cancel, a Vertex event) drops the job's entry, and one that happens while the
pass lists keeps the entry from being taken at all; then the look reads the store as usual.
Writes by any other controller are refused by the fence the leader raised before its first pass.
The looks themselves run on the queue's workers, and a pass's looks on one of them at a time,
never beginning beside an event's look (`workqueue.WorkQueue`, so that an event's look finds a
free worker and the interpreter nearly to itself): the probes are bounded without a pool of
their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from controller import logs
from controller.adapters.pubsub import UnreadableHint, vertex_job_id_from_log_entry
from controller.adapters.vertex import job_labels
from controller.core.model import JobState, Phase
from controller.jobrecord import JobSummary
from controller.service.deps import Listed
from controller.service.look_timings import LookTimings
from controller.service.reconciler import Reconciler
from controller.service.workqueue import WorkQueue
from controller.store import Versioned
from controller.store.keys import CANCELS_PREFIX, JOBS_PREFIX

log = logs.get("relaunch.sources")
T = TypeVar("T")

# The periodic pass's own key in the work queue (a job id never starts with "~").
PASS_KEY = "~pass"

# The pass's own interpreter work (parsing the store's listing, the gauges) stops every this many
# jobs while an event's look is served (`WorkQueue.yield_to_asked`): a few milliseconds of work.
PASS_STEP_JOBS = 50


class Sources:
    def __init__(
        self,
        reconciler: Reconciler,
        queue: WorkQueue,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        health: Any = None,  # pass_failed(errors) / pass_succeeded(), e.g. a Degradation source
        gauges: Any = None,  # controller.service.gauges.Gauges
        on_unreadable: Callable[[], None] = lambda: None,  # an events message that was no log entry
    ):
        self.reconciler = reconciler
        self.queue = queue
        self.settings = reconciler.settings
        self.is_leader = is_leader
        self.health = health
        self.gauges = gauges
        self.on_unreadable = on_unreadable
        # Stays: the CustomJob-id index and the pass's snapshot are written by every queue worker's
        # transitions and by the pass, and read by the event callbacks and the workers: in-memory
        # maps shared across threads.
        self._lock = threading.Lock()
        self._job_of: dict[str, str] = {}  # CustomJob id -> job id, for the live jobs' attempts
        self._added_during_pass: dict[str, str] = {}
        self._listed: dict[str, Listed] = {}  # the pass's snapshot, one entry per live job, taken once
        self._touched_during_pass: set[str] | None = None  # jobs changed since the pass began listing
        self._index_built = False
        self._outboxes_swept_for: int | None = None
        self._pass_started: float | None = None
        self._probed_at: dict[str, float] = {}  # running job -> when the pass last picked it to probe
        reconciler.on_transition.append(self._job_changed)

    # --- the handler the queue's workers run ----------------------------------------------------
    def serve(self, key: str) -> float | None:
        if key == PASS_KEY:
            return self.run_pass()
        with self._lock:  # taken first: a standby's entries (the intake's) must not pile up
            listed = self._listed.pop(key, None)
        if not self.is_leader():
            return None
        queued, sweep_waiting = self.queue.taken(key)
        return self.reconciler.reconcile(key, listed, LookTimings(key, queued, sweep_waiting))

    def enqueue(self, job_id: str) -> bool:
        """A look at the job for a reason of its own (its request or cancel recorded, a Vertex
        event): that look reads the store, since the pass's copy may predate the reason."""
        self._touched(job_id)
        return self.queue.add(job_id)

    def enqueue_created(self, job_id: str, record: Versioned) -> bool:
        """A new job's first look, handed the record the intake has just created, so that it
        does not read it back (its cancel record it still reads, once its create-slot turn has
        come and the look decides: a cancel may have come first).
        Nothing but a look writes a job after its creation, and every look's write drops the entry
        (`_job_changed`); a pass listing meanwhile keeps it from being taken, as for its own."""
        self._touched(job_id)
        with self._lock:
            self._listed[job_id] = Listed(record, cancel_recorded=None)
        return self.queue.add(job_id)

    def _touched(self, job_id: str) -> None:
        with self._lock:
            self._listed.pop(job_id, None)
            if self._touched_during_pass is not None:
                self._touched_during_pass.add(job_id)

    # --- Vertex events ---------------------------------------------------------------------------
    def on_hint(self, vertex_job_id: str, published: Any = None) -> None:
        """`published`: when Pub/Sub received the event (a datetime), for the "vertex event" line."""
        with self._lock:
            job_id = self._job_of.get(vertex_job_id)
            built = self._index_built
        # An event names the job's id, not its region: every watched region's name for it.
        names = self.reconciler.vertex.names_for(vertex_job_id)
        if job_id is None:
            if built and self.settings.hint_ignore_unknown:
                return  # no live job recorded it; a pass finds one not recorded yet
            job = next((j for j in map(self.reconciler.vertex.get, names) if j is not None), None)
            job_id = job_labels(job)[0] if job is not None else None
            if job_id is None:
                return
        for name in names:
            self.reconciler.observer.forget(name)  # the listing's copy predates this event
        self.enqueue(job_id)
        if published is not None:  # when it was published and delivered: a recovery's first phase
            log.info(
                "vertex event", job_id=job_id, vertex_job=vertex_job_id, published_at=published.timestamp()
            )

    def on_event_message(self, message: Any) -> None:
        """The events subscription's callback: a Cloud Logging entry about a CustomJob."""
        try:
            vertex_job_id = vertex_job_id_from_log_entry(message.data)
        except UnreadableHint as error:
            # Redelivery cannot make it readable; the reconcile pass is the safety net.
            log.warning(
                "unreadable event acked and ignored", reason=str(error), message_id=message.message_id
            )
            self.on_unreadable()
            message.ack()
            return
        if vertex_job_id is not None:
            try:
                # Only finds whose job it is, and enqueues it.
                self.on_hint(vertex_job_id, getattr(message, "publish_time", None))
            except Exception:
                log.exception("event handling failed; leaving it for redelivery", vertex_job_id=vertex_job_id)
                message.nack()
                return
        message.ack()

    def _job_changed(self, old: JobState, new: JobState, document: dict[str, Any]) -> None:
        self._touched(new.job_id)
        with self._lock:
            for attempt in new.attempts:
                if attempt.vertex_name:
                    vertex_id = attempt.vertex_name.rsplit("/", 1)[-1]
                    self._job_of[vertex_id] = self._added_during_pass[vertex_id] = new.job_id

    # --- the periodic pass -------------------------------------------------------------------------
    def run_pass(self) -> float:
        """Enqueue every job that may need a look; the seconds until the next pass."""
        period = self.settings.reconcile_seconds
        if not self.is_leader():
            return period
        self._pass_started = self.reconciler.clock()
        try:
            self._pass(period)
        finally:
            self._pass_started = None
        return period

    def pass_running_for(self, now: float) -> float:
        """Seconds the pass under way has run (0.0 when none runs)."""
        started = self._pass_started
        return 0.0 if started is None else max(0.0, now - started)

    def _pass(self, period: float) -> None:
        errors: list[str] = []
        self.queue.yield_to_asked(PASS_KEY)  # the listing's page is parsed in one call: not beside a look
        try:
            listed = self.reconciler.vertex.list_live_managed()
        except Exception as error:
            self._report([f"listing Vertex jobs: {error}"])
            raise  # the queue serves the pass again after a short wait
        self.reconciler.observer.remember_listing(listed)
        with self._lock:
            self._added_during_pass = {}
            self._touched_during_pass = set()
        try:
            records = list(self._politely(self.reconciler.store.list_live(JOBS_PREFIX)))
            cancelled = {
                r.key.removeprefix(CANCELS_PREFIX) for r in self.reconciler.store.list(CANCELS_PREFIX)
            }
        except Exception:
            with self._lock:
                self._touched_during_pass = None
            raise
        jobs = [JobSummary.of(r.document) for r in self._politely(records)]
        probe = self._due_for_probe(jobs)
        snapshot = {
            job.job_id: Listed(record, job.job_id in cancelled, job.job_id in probe)
            for record, job in zip(records, jobs, strict=True)
            if not job.terminal  # a finished one kept live for its ledger: its look reads the store
        }
        with self._lock:
            for job_id in self._touched_during_pass or ():
                snapshot.pop(job_id, None)  # changed while the pass listed: its copy may be older
            self._listed, self._touched_during_pass = snapshot, None
        job_of: dict[str, str] = {}
        for job in jobs:
            for vertex_name in job.vertex_names:
                job_of[vertex_name.rsplit("/", 1)[-1]] = job.job_id
        with self._lock:
            # Attempts recorded while the store was listed are newer than its snapshot.
            self._job_of = job_of | self._added_during_pass
            self._added_during_pass = {}
            self._index_built = True
        wanted = [job.job_id for job in jobs]
        wanted += [job_id for job_id, _ in map(job_labels, listed) if job_id is not None]
        try:
            wanted += self._outboxes_to_sweep()
        except Exception as error:
            errors.append(f"searching outboxes: {error}")
        refused = sum(1 for job_id in dict.fromkeys(wanted) if not self.queue.add(job_id, sweep=True))
        if refused:
            errors.append(f"{refused} jobs not enqueued: the work queue is full")
        if self.gauges is not None:
            try:
                live = [r for r, job in zip(records, jobs, strict=True) if not job.terminal]
                self.gauges.export(live, step=self._politely)
            except Exception as error:
                errors.append(f"gauges: {error}")
        self._report(errors)

    def _politely(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, with a stop every PASS_STEP_JOBS of them while an event's look is served."""
        for index, item in enumerate(items, 1):
            yield item
            if index % PASS_STEP_JOBS == 0:
                self.queue.yield_to_asked(PASS_KEY)

    def _due_for_probe(self, jobs: list[JobSummary]) -> set[str]:
        """The running jobs whose checkpoint root their next look lists: the least recently
        probed, at most `progress_probes_per_pass`, so each is probed once per ceil(running / cap)
        passes."""
        running = [job.job_id for job in jobs if job.phase == Phase.RUNNING.value]
        running.sort(key=lambda job_id: self._probed_at.get(job_id, 0.0))
        due = set(running[: self.settings.progress_probes_per_pass])
        now = self.reconciler.clock()
        self._probed_at = {job_id: self._probed_at.get(job_id, 0.0) for job_id in running}  # bounded
        for job_id in due:
            self._probed_at[job_id] = now
        return due

    def _outboxes_to_sweep(self) -> list[str]:
        """Once per leadership (fence), every job with an alert still in its outbox: a deposed
        leader's last alerts may sit in a job that has finished since."""
        fence = self.reconciler.fence()
        if self._outboxes_swept_for == fence:
            return []
        found = [
            job.job_id
            for job in map(JobSummary.of, (r.document for r in self.reconciler.store.list(JOBS_PREFIX)))
            if job.has_outbox
        ]
        self._outboxes_swept_for = fence
        return found

    def _report(self, errors: list[str]) -> None:
        if self.health is None:
            return
        if errors:
            self.health.pass_failed(errors)
        else:
            self.health.pass_succeeded()

    def forget_index(self) -> None:
        """A controller that stops leading: the next leadership builds the index again."""
        with self._lock:
            self._job_of.clear()
            self._listed.clear()
            self._index_built = False
        self._outboxes_swept_for = None
