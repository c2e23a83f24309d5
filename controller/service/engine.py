"""The imperative shell around the decision core.

For one job at a time (a lock per job) it loads the state, asks `decide` what to do, stores the
new state with a compare-and-set write (carrying the lease's fence token), and only then carries
out the actions. Actions report back as new events, which go through the same loop.

Everything that reaches the controller ends up here (requests first pass `service.intake`):
  - `apply(job_id, event)`: one event for one job, e.g. a cancel recorded by the intake;
  - `on_hint(vertex_job_id)`: a Vertex job-state log entry; the job is then read with Get, if a
    live job recorded it, and hints for one Vertex job that arrive while it is being read are
    coalesced into one more read;
  - `reconcile()`: the periodic pass: our *live* CustomJobs listed (state filter, read mask), the
    store's *live* jobs (its live index) each ticked; finished jobs cost nothing;
  - `fire_due_timers()`: backoff wake-ups.

Served beside one another (the daemon): a create goes to the submission queue
(`service.submissions`, oldest ready job first, one create slot at a time) and a due timer to a
worker (`service.workers`), so neither the event path, the intake nor the reconcile pass waits
for quota or for another job's slow call; per-job locks keep each job's decisions in order.
Without them (`queue_submissions`/`run_timers_on` not called, as in the engine's own tests)
everything runs on the caller's thread.

Leadership: every side effect (CreateCustomJob, CancelCustomJob, a paging alert) first asks
`guard`, which raises `LeaseNotHeld` once this controller may no longer act; a state write the
store refuses as `Fenced` means another controller leads. Either way the engine reports it once
through `on_deposed` (the daemon steps down at once) and raises `Deposed`: nothing further
happens for that event here; the new leader re-derives it from the stored state.

Cancels: the intake records a cancel as a create-only `cancels/{job}` record (any instance may,
even before the job's request has arrived). The engine applies it whenever it touches the job
(a timer, a reconcile pass), so a cancel is never lost whatever order things arrive in.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import aiplatform_v1

from controller import logs
from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.adapters.lease import LeaseNotHeld
from controller.adapters.vertex import (
    CreateQuotaExceeded,
    SubmitRejected,
    VertexBackend,
    job_labels,
    observed_event,
    vertex_state_name,
)
from controller.core import events as ev
from controller.core.actions import (
    Action,
    CancelVertexJob,
    MarkTerminal,
    RaiseAlert,
    ReadVertexJob,
    ScheduleWakeup,
    SubmitAttempt,
)
from controller.core.decide import CoreConfig, decide, pending_alerts
from controller.core.model import VERTEX_TERMINAL, JobState, Phase
from controller.readmodel import goodput
from controller.readmodel.jobs import append_timeline, transition_entries
from controller.request import JobRequest, parse_request
from controller.request.render import build_custom_job
from controller.service.alerts import AlertSink, ReconcileHealth
from controller.service.interval import IntervalKeeper
from controller.service.submissions import QueuedSubmission, SubmissionQueue
from controller.service.timers import TimerQueue
from controller.service.workers import JobWorkers
from controller.settings import Settings
from controller.store import Fenced, StateStore, VersionConflict
from controller.store.keys import CANCELS_PREFIX, JOBS_PREFIX, cancel_key, job_key

log = logs.get("relaunch.engine")


class Deposed(RuntimeError):
    """This controller is not the leader any more (lease ran out, or a write was fenced)."""


def _always_allowed(what: str) -> float:
    return float("inf")


@dataclass
class Dependencies:
    store: StateStore
    vertex: VertexBackend
    checkpoints: Any  # controller.adapters.checkpoints.CheckpointProbe
    alerts: AlertSink
    metrics: Any | None = None  # controller.service.metrics.Metrics


class Engine:
    def __init__(
        self,
        settings: Settings,
        deps: Dependencies,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        fence: Callable[[], int] = lambda: 0,
        is_leader: Callable[[], bool] = lambda: True,
        guard: Callable[[str], float] = _always_allowed,
        on_deposed: Callable[[str], None] = lambda reason: None,
    ):
        self.settings = settings
        self.store = deps.store
        self.vertex = deps.vertex
        self.checkpoints = deps.checkpoints
        self.alerts = deps.alerts
        self.metrics = deps.metrics
        self.clock = clock
        self.rng = rng or random.Random()
        self.fence = fence
        self.is_leader = is_leader
        self.guard = guard
        self._on_deposed = on_deposed
        self.core_config = CoreConfig(
            submit_retry_seconds=settings.submit_retry_seconds,
            capacity_wait_alert_seconds=settings.capacity_wait_alert_seconds,
            preemption_storm_count=settings.preemption_storm_count,
            preemption_storm_window_seconds=settings.preemption_storm_window_seconds,
            error_settle_seconds=settings.error_settle_seconds,
            error_recheck_seconds=settings.error_recheck_seconds,
            capacity_retry_seconds=settings.capacity_retry_seconds,
        )
        self.timers = TimerQueue(clock)
        self.health = ReconcileHealth(self.alerts, settings.degraded_after_failed_passes)
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._requests: dict[str, JobRequest] = {}
        self.intervals = IntervalKeeper(settings, self.store, self.checkpoints, fence=lambda: self.fence())
        # Jobs whose outbox may hold an alert not yet published, and the lease generation for
        # which the whole store was last searched for such jobs (once per leadership).
        self._undelivered: set[str] = set()
        self._outbox_swept_for: int | None = None
        # Vertex job ids that live jobs recorded; None until the first pass has built it (until
        # then every hint is read). Hints for other ids are dropped before any Get.
        self._known_vertex_ids: set[str] | None = None
        self._vertex_ids_added: set[str] = set()  # recorded while a pass rebuilds the known ids
        # Vertex job id -> whether another hint came while it was being read (coalescing).
        self._hints_in_flight: dict[str, bool] = {}
        self._hints_guard = threading.Lock()
        self._probed_at: dict[str, float] = {}  # job id -> when its checkpoint root was last listed
        # job id -> phase, kept as jobs change; a full sweep every metrics_sweep_seconds.
        self._phases: dict[str, str] = {}
        self._next_metrics_sweep = 0.0
        # The sweep under way: the rest of its listing, what it found, and jobs changed meanwhile.
        self._sweep: Iterator[Any] | None = None
        self._swept: dict[str, str] = {}
        self._changed_during_sweep: set[str] = set()
        self.submissions: SubmissionQueue | None = None  # None: submit on the caller's thread
        self._timer_workers: JobWorkers | None = None  # None: fire timers on the caller's thread

    def queue_submissions(self, workers: int) -> SubmissionQueue:
        """From now on creates wait in an ordered queue for their quota slot, on its own threads."""
        self.submissions = SubmissionQueue(self.vertex.creates, self._submit_queued, workers=workers)
        return self.submissions

    def run_timers_on(self, workers: int) -> None:
        """From now on due timers are served by a pool of workers, not the caller's thread."""
        self._timer_workers = JobWorkers(workers, name="timer")

    def stop_workers(self) -> None:
        if self.submissions is not None:
            self.submissions.stop()
        if self._timer_workers is not None:
            self._timer_workers.stop()

    def remember_request(self, request: JobRequest) -> None:
        """The intake hands over a request it just stored, saving a parse on the first submit."""
        self._requests[request.job_id] = request

    # ==== observations =====================================================================
    def on_hint(self, vertex_job_id: str) -> None:
        """A log entry said something happened to this Vertex job: read its real state.

        The events sink carries every Vertex job of the project and no labels, so a hint is read
        only for a job a live Relaunch job recorded (others cost nothing; the reconcile pass finds
        one not recorded yet). While one read of a job is under way, further hints for it are
        folded into a single read after it, so a burst of transitions costs two Gets, not one
        each, and the last state is still read."""
        known = self._known_vertex_ids
        if self.settings.hint_ignore_unknown and known is not None and vertex_job_id not in known:
            return
        with self._hints_guard:
            if vertex_job_id in self._hints_in_flight:
                self._hints_in_flight[vertex_job_id] = True
                return
            self._hints_in_flight[vertex_job_id] = False
        try:
            while True:
                job = self.vertex.get(f"{self.vertex.parent}/customJobs/{vertex_job_id}")
                if job is not None:
                    self.observe(job)
                with self._hints_guard:
                    if not self._hints_in_flight[vertex_job_id]:
                        return
                    self._hints_in_flight[vertex_job_id] = False
        finally:
            with self._hints_guard:
                self._hints_in_flight.pop(vertex_job_id, None)

    def observe(self, job: aiplatform_v1.CustomJob) -> None:
        """Feed one authoritative CustomJob to its Relaunch job, if it is one of ours."""
        job_id, attempt = job_labels(job)
        if job_id is None or attempt is None:
            return
        record = self.store.get(job_key(job_id))
        if record is None:
            return
        with self._lock(job_id):
            for event in self._observation_events(job, record, attempt):
                self.apply(job_id, event)

    def _observation_events(self, job: aiplatform_v1.CustomJob, record: Any, attempt: int) -> list[ev.Event]:
        events: list[ev.Event] = []
        exit_record = None
        progress_unknown = False
        current = JobState.from_dict(record.document["state"]).current
        deciding = current is not None and current.number == attempt and not current.ended
        if (
            deciding
            and vertex_state_name(job) in VERTEX_TERMINAL
            and self._is_recorded(record, attempt, job.name)
        ):
            # Learn the latest committed checkpoint and the trainer's exit record first: the
            # core classifies the ending and measures progress with them. Only for the current
            # attempt's recorded CustomJob: endings already classified need neither, and a
            # duplicate's record must not speak for the real attempt.
            uri = record.document["request"]["checkpoint"]["uri"]
            try:
                latest = self.checkpoints.latest(uri)
                if latest is not None:
                    events.append(ev.CheckpointObserved(latest.step, latest.uri))
                exit_record = self.checkpoints.exit_record(
                    uri, attempt, vertex_job_id=job.name.rsplit("/", 1)[-1]
                )
            except CheckpointsUnreadable as error:
                # Not a passing fault: waiting cannot help, and the ending must still be applied.
                # Progress is unknown; the classifier goes by Vertex's account alone.
                self._checkpoints_unreadable(record.document["state"]["job_id"], attempt, error)
                progress_unknown = True
        events.append(observed_event(job, attempt, exit_record, progress_unknown=progress_unknown))
        return events

    @staticmethod
    def _is_recorded(record, attempt: int, vertex_name: str) -> bool:
        """Is `vertex_name` the job the store recorded for the current `attempt` (or none is
        recorded yet)? Only then are its checkpoints and exit record worth reading."""
        attempts = record.document["state"].get("attempts", [])
        if not attempts or attempts[-1].get("number") != attempt:
            return False
        return attempts[-1].get("vertex_name") in (None, vertex_name)

    def _checkpoints_unreadable(self, job_id: str, attempt: int, error: CheckpointsUnreadable) -> None:
        log.error(
            "checkpoints unreadable; progress unknown",
            job_id=job_id,
            attempt=attempt,
            bucket=error.bucket,
            permission=error.permission,
            error=str(error),
        )
        self._alert(
            "checkpoints_unreadable",
            "ERROR",
            f"job {job_id}: cannot read gs://{error.bucket} ({error.permission} needed): {error.reason}; "
            "attempt endings are applied with progress unknown",
            job_id=job_id,
            attempt=attempt,
            details={"bucket": error.bucket, "permission": error.permission, "reason": error.reason},
        )

    def _alert(self, kind: str, severity: str, summary: str, **fields) -> None:
        """A paging alert: only the leader sends it (a deposed one would page for a stale view)."""
        self._guarded("send an alert")
        self.alerts.raise_alert(kind, severity, summary, **fields)
        if self.metrics is not None:
            self.metrics.alert(kind)

    def _guarded(self, what: str) -> None:
        try:
            self.guard(what)
        except LeaseNotHeld as error:
            self._deposed(str(error))

    def _deposed(self, reason: str) -> None:
        self.timers.clear()
        if self.submissions is not None:
            self.submissions.clear()
        self._on_deposed(reason)
        raise Deposed(reason)

    def reconcile(self) -> None:
        """Level-triggered pass: list our live Vertex jobs, feed what is seen, tick every live job.

        Its cost follows live work: Vertex lists only CustomJobs that have not ended (and only the
        fields read here), the store lists only jobs that have not ended (its live index), and
        the checkpoint roots of at most `progress_probes_per_pass` running jobs are listed. A
        finished job whose CustomJob still runs is listed by Vertex and so still converges; a
        live job whose CustomJob is not listed any more is read with Get (it ended or vanished).

        A pass that hit errors counts toward `controller_degraded`; a clean one resolves it."""
        if not self.is_leader():
            return
        errors: list[str] = []
        seen: set[str] = set()
        try:
            listed = self.vertex.list_live_managed()
        except Exception as error:
            self.health.pass_failed([f"listing Vertex jobs: {error}"])
            raise
        for job in listed:
            seen.add(job.name)
            try:
                self.observe(job)
            except Deposed:
                raise
            except Exception as error:
                errors.append(f"{job.name}: {error}")
                log.exception("reconcile: observing a job failed", vertex_job=job.name)
        self._vertex_ids_added = set()
        try:
            self._send_pending_alerts()
        except Deposed:
            raise
        except Exception as error:
            errors.append(f"sending alerts left in outboxes: {error}")
            log.exception("reconcile: sending alerts left in outboxes failed")
        indexed = list(self.store.list_live(JOBS_PREFIX))
        # The live index also holds finished jobs whose endings the interval ledger has yet to
        # count (keys.LEDGER_PENDING_FIELD): only the interval's catch-up looks at those.
        listed_states = [(r, JobState.from_dict(r.document["state"])) for r in indexed]
        records = [r for r, s in listed_states if not s.phase.terminal]
        live = [s for _, s in listed_states if not s.phase.terminal]
        ledger_pending = [s for _, s in listed_states if s.phase.terminal]
        self._remember_vertex_ids(live)
        cancelled = {r.key[len(CANCELS_PREFIX) :] for r in self.store.list(CANCELS_PREFIX)}
        to_probe = self._due_for_probe(live)
        for state in sorted(live, key=lambda s: s.current.intent_at if s.current else s.created_at):
            try:
                if state.job_id in cancelled and not state.cancel_requested:
                    state = self.apply(state.job_id, ev.CancelRequested()) or state
                    if state.phase.terminal:
                        continue
                current = state.current
                if current and current.vertex_name and not current.ended and current.vertex_name not in seen:
                    # Not among the live CustomJobs listed moments ago: it ended, or is missing
                    # (or the listing lagged behind a create). Get says which.
                    job = self.vertex.get(current.vertex_name)
                    if job is None:
                        self.apply(state.job_id, ev.VertexJobMissing(current.number, current.vertex_name))
                    else:
                        self.observe(job)
                elif state.job_id in to_probe:
                    self._probe_progress(state)
                self.apply(state.job_id, ev.TimerFired())
            except Deposed:
                raise
            except Exception as error:
                errors.append(f"{state.job_id}: {error}")
                log.exception("reconcile: job failed to converge", job_id=state.job_id)
        try:
            self.intervals.catch_up([*live, *ledger_pending], self._request, self.clock())
        except Deposed:
            raise
        except (Fenced, LeaseNotHeld) as error:
            self._deposed(str(error))
        except Exception as error:
            errors.append(f"checkpoint interval ledger: {error}")
            log.exception("reconcile: catching up the checkpoint interval ledger failed")
        self._export_job_states(records)
        if errors:
            self.health.pass_failed(errors)
        else:
            self.health.pass_succeeded()

    def _send_pending_alerts(self) -> None:
        """Publish the alerts a crash, a lost lease or a failed publish left in job outboxes.

        A new leader searches every job once (a deposed leader's last alerts may sit in a finished
        job); after that only the jobs whose alert this instance failed to publish are read."""
        fence = self.fence()
        if self._outbox_swept_for != fence:
            self._undelivered.update(
                record.key[len(JOBS_PREFIX) :]
                for record in self.store.list(JOBS_PREFIX)
                if record.document["state"].get("outbox")
            )
            self._outbox_swept_for = fence
        for job_id in sorted(self._undelivered):
            with self._lock(job_id):
                record = self.store.get(job_key(job_id))
                state = JobState.from_dict(record.document["state"]) if record is not None else None
                for alert in pending_alerts(state) if state is not None else ():
                    log.info("sending an alert left in the outbox", job_id=job_id, kind=alert.kind)
                    self._alert(
                        alert.kind,
                        alert.severity,
                        alert.summary,
                        job_id=job_id,
                        attempt=alert.details.get("attempt"),
                        details=alert.details,
                    )
                    self.apply(job_id, ev.AlertDelivered(alert.outbox_id))
                self._undelivered.discard(job_id)

    def _remember_vertex_ids(self, live: list[JobState]) -> None:
        """The Vertex job ids hints are read for: every attempt of every live job, plus those
        recorded while the pass listed the store (its snapshot may predate them)."""
        self._known_vertex_ids = {
            attempt.vertex_name.rsplit("/", 1)[-1]
            for state in live
            for attempt in state.attempts
            if attempt.vertex_name
        } | self._vertex_ids_added

    def _due_for_probe(self, live: list[JobState]) -> set[str]:
        """The running jobs whose checkpoint root this pass lists: the least recently probed,
        at most `progress_probes_per_pass`, so each is probed once per ceil(running / cap) passes."""
        running = [s.job_id for s in live if s.phase is Phase.RUNNING and s.current and not s.current.ended]
        running.sort(key=lambda job_id: self._probed_at.get(job_id, 0.0))
        due = set(running[: self.settings.progress_probes_per_pass])
        now = self.clock()
        for job_id in due:
            self._probed_at[job_id] = now
        for job_id in [j for j in self._probed_at if j not in set(running)]:
            del self._probed_at[job_id]  # not running any more: forget, so the map stays small
        return due

    def _probe_progress(self, state: JobState) -> None:
        request = self._request(state.job_id)
        try:
            latest = self.checkpoints.latest(request.checkpoint_uri)
        except CheckpointsUnreadable as error:
            self._checkpoints_unreadable(state.job_id, state.current.number, error)
            return
        if latest is not None and (
            state.latest_checkpoint_step is None or latest.step > state.latest_checkpoint_step
        ):
            self.apply(state.job_id, ev.CheckpointObserved(latest.step, latest.uri))

    def fire_due_timers(self) -> int:
        fired = 0
        for job_id in self.timers.pop_due():
            if self._timer_workers is not None:
                self._timer_workers.run(job_id, lambda job_id=job_id: self._poke_quietly(job_id))
                fired += 1
                continue
            try:
                self.poke(job_id)
                fired += 1
            except Deposed:
                raise
            except Exception:
                log.exception("timer: job failed to converge", job_id=job_id)
        return fired

    def _poke_quietly(self, job_id: str) -> None:
        try:
            self.poke(job_id)
        except Deposed:
            pass  # already reported through on_deposed
        except Exception:
            log.exception("timer: job failed to converge", job_id=job_id)

    def poke(self, job_id: str) -> JobState | None:
        """Re-derive what a job needs now: a recorded cancel first, then a timer tick."""
        state = None
        if self.store.get(cancel_key(job_id)) is not None:
            state = self.apply(job_id, ev.CancelRequested())
        if state is None or not state.phase.terminal:
            state = self.apply(job_id, ev.TimerFired())
        return state

    # ==== the loop: decide, persist, act ===================================================
    def apply(self, job_id: str, event: ev.Event) -> JobState | None:
        """Run one event through the core for one job; persist first, then act."""
        with self._lock(job_id):
            pending: list[ev.Event] = [event]
            state = None
            fired_inline = False
            try:
                while pending:
                    before, state, actions = self._decide_and_store(job_id, pending.pop(0))
                    if state is None:
                        return None
                    for action in actions:
                        pending.extend(self._execute(state, action))
                        if (
                            self._timer_workers is not None
                            and isinstance(action, ScheduleWakeup)
                            and action.at <= self.clock()
                            and not fired_inline
                        ):
                            # Due already (a backoff of 0 after a reclaim): fire it here rather
                            # than through the timer queue and a worker, once per event. The
                            # queued wake-up still fires later and finds nothing left to do.
                            fired_inline = True
                            pending.append(ev.TimerFired())
                    if before is not None:
                        # After the actions: reading the trainer's figures must not delay them.
                        self._learn_ending(before, state, self.clock())
            except Fenced as error:
                self._deposed(f"state write refused: {error}")
            except LeaseNotHeld as error:
                self._deposed(str(error))
            if state is not None and not state.outbox:
                self._undelivered.discard(job_id)
            return state

    def _decide_and_store(
        self, job_id: str, event: ev.Event
    ) -> tuple[JobState | None, JobState | None, tuple[Action, ...]]:
        """(the state before, if a new one was stored; the state now; the actions)."""
        for _ in range(5):
            record = self.store.get(job_key(job_id))
            if record is None:
                return None, None, ()
            state = JobState.from_dict(record.document["state"])
            now = self.clock()
            decision = decide(state, event, now, self.rng, self.core_config)
            if decision.state == state:
                return None, state, decision.actions
            document = dict(record.document)
            document["state"] = decision.state.to_dict()
            if decision.state.phase.terminal and not state.phase.terminal:
                self.intervals.mark_pending(document)
            entries = transition_entries(state, decision.state, event, decision.actions, now)
            document["timeline"] = append_timeline(document, entries)
            try:
                self.store.put(job_key(job_id), document, expected_version=record.version, fence=self.fence())
            except VersionConflict:
                continue  # someone else wrote in between: decide again on the fresh state
            self._after_transition(state, decision.state, now)
            self._job_changed(document, decision.state, now)
            self._resolve_alerts(state, decision.state)
            return state, decision.state, decision.actions
        raise RuntimeError(f"{job_id}: state kept changing under us; giving up this event")

    def _execute(self, state: JobState, action: Action) -> list[ev.Event]:
        job_id = state.job_id
        attempt = state.current.number if state.current else 0
        bound = log.bind(job_id=job_id, attempt=attempt)
        if isinstance(action, SubmitAttempt):
            if action.create_if_missing and self.submissions is not None:
                ready_at = self._ready_at(state)
                self.submissions.offer(job_id, action.attempt, action, ready_at)
                bound.info("queued for a create slot", ready_at=ready_at)
                return []
            return self._submit(state, action)
        if isinstance(action, CancelVertexJob):
            bound.info("cancelling vertex job", vertex_job=action.vertex_name, for_attempt=action.attempt)
            self.vertex.cancel(action.vertex_name, guard=self.guard)
            return []
        if isinstance(action, ScheduleWakeup):
            self.timers.schedule(job_id, action.at)
            return []
        if isinstance(action, ReadVertexJob):
            job = self.vertex.get(action.vertex_name)
            if job is None:
                return [ev.VertexJobMissing(action.attempt, action.vertex_name)]
            record = self.store.get(job_key(job_id))
            return [] if record is None else self._observation_events(job, record, action.attempt)
        if isinstance(action, RaiseAlert):
            self._undelivered.add(job_id)  # until the outbox entry is gone (a failed publish raises)
            self._alert(
                action.kind,
                action.severity,
                action.summary,
                job_id=job_id,
                attempt=attempt,
                details=action.details,
            )
            return [ev.AlertDelivered(action.outbox_id)] if action.outbox_id else []
        if isinstance(action, MarkTerminal):
            (bound.info if action.phase == "succeeded" else bound.warning)(
                f"job {action.phase}",
                reason=action.reason,
                preemptions=state.preemptions,
                failures=state.failures,
            )
            self.timers.cancel(job_id)
            return []
        raise TypeError(f"unknown action {action!r}")

    @staticmethod
    def _ready_at(state: JobState) -> float:
        """When the job became ready to submit: the end of the attempt it replaces (the
        preemption), else the first attempt's intent. The submission queue serves oldest first."""
        if len(state.attempts) > 1 and state.attempts[-2].ended_at is not None:
            return state.attempts[-2].ended_at
        current = state.current
        return current.intent_at if current is not None else state.created_at

    def _submit_queued(self, entry: QueuedSubmission) -> None:
        """A submission worker's turn, holding a create slot: submit if the job still wants it."""
        job_id = entry.job_id
        try:
            with self._lock(job_id):
                record = self.store.get(job_key(job_id))
                state = None if record is None else JobState.from_dict(record.document["state"])
                current = None if state is None else state.current
                if (
                    state is None
                    or current is None
                    or current.number != entry.attempt
                    or current.ended
                    or current.vertex_name is not None
                    or state.phase.terminal
                    or state.phase is Phase.CANCELLING
                ):
                    self.vertex.creates.give_back()  # nothing to create any more
                    log.info("queued submission no longer needed", job_id=job_id, attempt=entry.attempt)
                    return
                try:
                    events = self._submit(state, entry.action, slot_taken=True)
                except LeaseNotHeld as error:
                    self._deposed(str(error))
                for event in events:
                    self.apply(job_id, event)
        except Deposed:
            pass  # reported through on_deposed; the new leader submits from the stored state

    def queue_position(self, job_id: str) -> int | None:
        """1-based place of this job among those waiting for a create slot, or None."""
        return None if self.submissions is None else self.submissions.position(job_id)

    def _submit(self, state: JobState, action: SubmitAttempt, *, slot_taken: bool = False) -> list[ev.Event]:
        job_id = state.job_id
        bound = log.bind(job_id=job_id, attempt=action.attempt)
        request = self._request(job_id)
        interval = None
        if action.create_if_missing:
            try:
                interval = self.intervals.interval_for_attempt(
                    job_id, request, action.attempt, action.on_demand, self.clock()
                )
            except (Fenced, LeaseNotHeld):
                raise
            except Exception as error:  # the store or the markers: try the submission again later
                bound.warning("choosing the checkpoint interval failed; will retry", error=str(error))
                return [ev.SubmitFailed(action.attempt, f"checkpoint interval: {error}", permanent=False)]

        def build() -> aiplatform_v1.CustomJob:
            return build_custom_job(
                request,
                action.attempt,
                resume_from=action.resume_from_uri,
                on_demand=action.on_demand,
                checkpoint_interval_seconds=interval,
                replicas=action.replicas,
            )

        _crash_point("after-intent")
        try:
            submission = self.vertex.ensure_attempt(
                job_id,
                action.attempt,
                build,
                create=action.create_if_missing,
                guard=self.guard,
                slot_taken=slot_taken,
            )
        except SubmitRejected as error:
            bound.error("vertex rejected the job", error=str(error))
            return [ev.SubmitFailed(action.attempt, str(error), permanent=True)]
        except CreateQuotaExceeded as error:
            bound.warning("vertex refused the job for quota; waiting for capacity", error=str(error))
            return [ev.SubmitFailed(action.attempt, str(error), permanent=False, capacity=True)]
        except gexc.GoogleAPICallError as error:
            bound.warning("submission failed; will retry", error=str(error))
            return [ev.SubmitFailed(action.attempt, str(error), permanent=False)]
        if submission.job is None:
            return [ev.AttemptNotFound(action.attempt)]
        if submission.duplicates:
            # One rule, the core's: the job the store recorded survives, every other is cancelled.
            bound.warning(
                "more than one vertex job for one attempt",
                vertex_jobs=[submission.job.name, *submission.duplicates],
            )
        if submission.created:
            _crash_point("after-create")
            if self.metrics is not None:
                self.metrics.attempt_submitted()
            previous = state.attempts[-2] if len(state.attempts) > 1 else None
            if previous is not None and previous.ended_at is not None and self.metrics is not None:
                self.metrics.recovered(max(0.0, self.clock() - previous.ended_at))
            bound.info(
                "attempt submitted",
                vertex_job=submission.job.name,
                resume_from=action.resume_from_uri,
                on_demand=action.on_demand,
                replicas=list(action.replicas) if action.replicas is not None else None,
            )
        else:
            bound.info("adopted existing vertex job", vertex_job=submission.job.name)
        return [
            ev.AttemptSubmitted(action.attempt, name)
            for name in (submission.job.name, *submission.duplicates)
        ]

    # ==== views ============================================================================
    def live_states(self) -> list[JobState]:
        """Every job not finished, from the store's live index (finished jobs are not read)."""
        states = []
        for record in self.store.list_live(JOBS_PREFIX):
            state = JobState.from_dict(record.document["state"])
            if not state.phase.terminal:
                states.append(state)
        return states

    def forget_finished(self, live_job_ids: set[str]) -> int:
        """Drop the per-job locks and parsed requests of jobs that are no longer live, so these
        maps stay as small as the set of live jobs. A lock someone holds right now is kept."""
        dropped = 0
        with self._locks_guard:
            for job_id in [j for j in self._locks if j not in live_job_ids]:
                lock = self._locks[job_id]
                if lock.acquire(blocking=False):
                    del self._locks[job_id]
                    lock.release()
                    dropped += 1
            for job_id in [j for j in self._requests if j not in live_job_ids]:
                self._requests.pop(job_id, None)
        return dropped

    def memory_footprint(self) -> dict[str, int]:
        """Sizes of the per-job maps (tests and diagnostics)."""
        return {"locks": len(self._locks), "requests": len(self._requests)}

    # ==== helpers ==========================================================================
    def _lock(self, job_id: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks.setdefault(job_id, threading.RLock())

    def _request(self, job_id: str) -> JobRequest:
        request = self._requests.get(job_id)
        if request is None:
            record = self.store.get(job_key(job_id))
            request = parse_request(
                record.document["request"], allow_local_checkpoints=self.settings.allow_local_checkpoints
            )
            self._requests[job_id] = request
        return request

    def _after_transition(self, old: JobState, new: JobState, now: float) -> None:
        if self.metrics is None:
            return
        if new.preemptions > old.preemptions:
            for _ in range(new.preemptions - old.preemptions):
                self.metrics.preempted()
        if (
            new.current
            and new.current.ended
            and not (old.current and old.current.number == new.current.number and old.current.ended)
        ):
            ending = new.current.ending.value
            if ending not in ("succeeded", "preempted", "cancelled", "capacity"):  # capacity: no failure
                self.metrics.failed(ending)

    def _learn_ending(self, old: JobState, new: JobState, now: float) -> None:
        """An attempt just ended: keep the trainer's figures (goodput) and teach the checkpoint
        interval's rate book (once per attempt).

        A failure here must not stop the job's own progress: the reconcile pass catches up on
        endings the book has not counted."""
        current = new.current
        if current is None or not current.ended:
            return
        if old.current is not None and old.current.number == current.number and old.current.ended:
            return
        if new.phase.terminal:
            _crash_point("after-terminal-write")
        try:
            self.intervals.on_ending(new.job_id, self._request(new.job_id), current, now)
        except (Fenced, LeaseNotHeld):
            raise
        except Exception:
            log.exception(
                "checkpoint interval: learning from an ending failed; reconcile retries",
                job_id=new.job_id,
                attempt=current.number,
            )

    def _resolve_alerts(self, old: JobState, new: JobState) -> None:
        """capacity_wait clears once an attempt runs, or when the job ends (nothing waits any
        more); running_shrunk once an attempt runs at the full size again, or the job ends. The
        sink only publishes a resolution if that alert had fired."""
        current = new.current
        if current is None:
            return
        started = current.started_at is not None and not (
            old.current is not None and old.current.number == current.number and old.current.started_at
        )
        ended = new.phase.terminal and not old.phase.terminal
        if started or ended:
            what = f"attempt {current.number} is running" if started else f"job {new.phase.value}"
            self.alerts.resolve(
                "capacity_wait",
                new.job_id,
                f"job {new.job_id} no longer waits for capacity: {what}",
                attempt=current.number,
            )
        policy = new.elastic
        full_size = policy is not None and (current.replicas is None or current.replicas == policy.full)
        if policy is not None and ((started and full_size) or ended):
            # An elastic job grew back to its full size (or ended): the shrink alert resolves, an
            # INFO line that never pages; the sink publishes it only if that alert had fired.
            if started and full_size:
                log.info("elastic job grown back to its full size", job_id=new.job_id, attempt=current.number)
            what = (
                f"attempt {current.number} runs on all {sum(policy.full)} replicas"
                if started and full_size
                else f"job {new.phase.value}"
            )
            self.alerts.resolve(
                "running_shrunk", new.job_id, f"job {new.job_id} grown back: {what}", attempt=current.number
            )

    def _job_changed(self, document: dict[str, Any], state: JobState, now: float) -> None:
        """Keep what is derived per job current as the job changes, rather than recomputing it
        for every job on every pass: the Vertex ids hints are read for, the phase counts and
        the job's goodput gauge."""
        if state.current and state.current.vertex_name:
            vertex_id = state.current.vertex_name.rsplit("/", 1)[-1]
            self._vertex_ids_added.add(vertex_id)
            if self._known_vertex_ids is not None:
                self._known_vertex_ids.add(vertex_id)
        if self.metrics is None:
            return
        self._phases[state.job_id] = state.phase.value
        if self._sweep is not None:
            self._changed_during_sweep.add(state.job_id)
        ratio = goodput.compute(document, now).ratio
        if ratio is not None:
            self.metrics.set_goodput(state.job_id, ratio)

    def _export_job_states(self, live_records: list[Any]) -> None:
        """Gauges: the live jobs' goodput (it grows while they run) and the jobs-by-phase counts,
        kept by `_job_changed` as jobs change. Finished jobs are counted by a sweep over the whole
        store that reads at most `metrics_sweep_per_pass` documents a pass, once every
        `metrics_sweep_seconds` (and at start): the only reads of finished jobs a pass makes,
        bounded, and it drops jobs that retention deleted from the counts."""
        if self.metrics is None:
            return
        now = self.clock()
        for record in live_records:
            state = record.document["state"]
            known = self._phases.setdefault(state["job_id"], state["phase"])
            if known != state["phase"]:
                continue  # changed during this pass: `_job_changed` saw the newer document
            ratio = goodput.compute(record.document, now).ratio
            if ratio is not None:
                self.metrics.set_goodput(state["job_id"], ratio)
        self._advance_sweep(now)
        counts: dict[str, int] = {phase.value: 0 for phase in Phase}
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        self.metrics.set_job_states(counts)

    def _advance_sweep(self, now: float) -> None:
        if self._sweep is None:
            if now < self._next_metrics_sweep:
                return
            self._sweep = iter(self.store.list(JOBS_PREFIX))
            self._swept, self._changed_during_sweep = {}, set()
        budget = self.settings.metrics_sweep_per_pass
        for record in itertools.islice(self._sweep, budget):
            budget -= 1
            state = record.document["state"]
            self._swept[state["job_id"]] = state["phase"]
            self._phases.setdefault(state["job_id"], state["phase"])  # counts fill in as it goes
            ratio = goodput.compute(record.document, now).ratio
            if ratio is not None and state["job_id"] not in self._changed_during_sweep:
                self.metrics.set_goodput(state["job_id"], ratio)
        if budget > 0:  # the listing ran out: the sweep is complete
            for job_id in self._changed_during_sweep:
                if job_id in self._phases:
                    self._swept[job_id] = self._phases[job_id]
            self._phases, self._sweep = self._swept, None
            self._next_metrics_sweep = now + self.settings.metrics_sweep_seconds


def _crash_point(name: str) -> None:
    """Fault injection for the crash-safety tests: die here, as `kill -9` would.

    `RELAUNCH_FAULT_CRASH_POINT=after-intent` kills the process after the attempt's intent is
    stored and before CreateCustomJob; `after-create` right after CreateCustomJob returned and
    before its result is stored; `after-terminal-write` after a job's terminal state is stored and
    before its last ending reaches the checkpoint interval's ledger. Unset in production.
    """
    if os.environ.get("RELAUNCH_FAULT_CRASH_POINT") == name:
        log.warning("fault injection: crashing", crash_point=name)
        os.kill(os.getpid(), signal.SIGKILL)
