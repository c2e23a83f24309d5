"""The imperative shell around the decision core.

For one job at a time (a lock per job) it loads the state, asks `decide` what to do, stores the
new state with a compare-and-set write (carrying the lease's fence token), and only then carries
out the actions. Actions report back as new events, which go through the same loop.

Everything that reaches the controller ends up here:
  - `accept_request(bytes)`: a job or cancel request from Pub/Sub (pull or push);
  - `on_hint(vertex_job_id)`: a Vertex job-state log entry; the job is then read with Get;
  - `reconcile()`: the periodic list-by-label pass plus a timer tick for every live job;
  - `fire_due_timers()`: backoff wake-ups.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import aiplatform_v1

from controller import goodput, logs
from controller.alerts import AlertSink, ReconcileHealth
from controller.core import events as ev
from controller.core.actions import (
    Action,
    CancelVertexJob,
    MarkTerminal,
    RaiseAlert,
    ScheduleWakeup,
    SubmitAttempt,
)
from controller.core.decide import CoreConfig, decide, new_job
from controller.core.model import JobState, Phase
from controller.intake_result import IntakeResult
from controller.render import build_custom_job
from controller.request import CancelRequest, JobRequest, RequestInvalid, parse_request
from controller.settings import Settings
from controller.store import AlreadyExists, StateStore, VersionConflict
from controller.timers import TimerQueue
from controller.vertex import SubmitRejected, VertexBackend, job_labels, vertex_state_name

log = logs.get("relaunch.engine")

TIMELINE_LIMIT = 500


def job_key(job_id: str) -> str:
    return f"jobs/{job_id}"


def _ts(value) -> float | None:
    """A proto timestamp (DatetimeWithNanoseconds) as epoch seconds; None when unset."""
    if value is None:
        return None
    try:
        seconds = value.timestamp()
    except (AttributeError, ValueError):
        return None
    return seconds if seconds > 0 else None


@dataclass
class Dependencies:
    store: StateStore
    vertex: VertexBackend
    checkpoints: Any  # controller.checkpoints.CheckpointProbe
    alerts: AlertSink
    metrics: Any | None = None  # controller.metrics.Metrics
    dead_letter: Callable[[bytes, str], None] | None = None  # (payload, reason)


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
    ):
        self.settings = settings
        self.store = deps.store
        self.vertex = deps.vertex
        self.checkpoints = deps.checkpoints
        self.alerts = deps.alerts
        self.metrics = deps.metrics
        self._dead_letter = deps.dead_letter
        self.clock = clock
        self.rng = rng or random.Random()
        self.fence = fence
        self.is_leader = is_leader
        self.core_config = CoreConfig(
            submit_retry_seconds=settings.submit_retry_seconds,
            capacity_wait_alert_seconds=settings.capacity_wait_alert_seconds,
            preemption_storm_count=settings.preemption_storm_count,
            preemption_storm_window_seconds=settings.preemption_storm_window_seconds,
        )
        self.timers = TimerQueue(clock)
        self.health = ReconcileHealth(self.alerts, settings.degraded_after_failed_passes)
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._requests: dict[str, JobRequest] = {}

    # ==== intake ===========================================================================
    def accept_request(self, data: bytes, attributes: dict[str, str] | None = None) -> IntakeResult:
        """Parse, validate and durably record one request. Returns once the effect is stored.

        Bad input is recorded and dead-lettered here and reported as `invalid` / `conflict`;
        only infrastructure trouble (the state store is down) raises, so the caller does not ack.
        """
        try:
            request = parse_request(data, allow_local_checkpoints=self.settings.allow_local_checkpoints)
        except RequestInvalid as error:
            reason = "; ".join(str(p) for p in error.problems)
            return self._reject(data, "invalid", reason, self._guess_job_id(data))

        if isinstance(request, CancelRequest):
            if self.store.get(job_key(request.job_id)) is None:
                return self._reject(
                    data, "invalid", f"jobId: no job {request.job_id!r} to cancel", request.job_id
                )
            self.apply(request.job_id, ev.CancelRequested())
            return IntakeResult("cancel", request.job_id, "cancel requested")

        fingerprint = request.fingerprint()
        existing = self.store.get(job_key(request.job_id))
        if existing is None:
            now = self.clock()
            state = new_job(request.job_id, request.restart_policy, now)
            document = {
                "request": request.to_json(),
                "fingerprint": fingerprint,
                "state": state.to_dict(),
                "timeline": [self._entry(now, 0, "request accepted")],
            }
            try:
                self.store.create(job_key(request.job_id), document, fence=self.fence())
            except AlreadyExists:
                existing = self.store.get(job_key(request.job_id))
            else:
                self._requests[request.job_id] = request
                log.info("job accepted", job_id=request.job_id, attempt=0)
                self.timers.schedule(request.job_id, now)  # the worker submits attempt 1
                return IntakeResult("accepted", request.job_id, "accepted")
        if existing.document.get("fingerprint") == fingerprint:
            return IntakeResult("duplicate", request.job_id, "already accepted; nothing to do")
        return self._reject(
            data,
            "conflict",
            f"jobId: {request.job_id!r} already exists with a different request body; "
            "use a new jobId to run a different job",
            request.job_id,
        )

    def _reject(self, data: bytes, status: str, reason: str, job_id: str | None) -> IntakeResult:
        now = self.clock()
        digest = hashlib.sha256(data).hexdigest()[:24]
        record = {
            "time": now,
            "status": status,
            "reason": reason,
            "jobId": job_id,
            "payload": data[:65536].decode("utf-8", errors="replace"),
        }
        try:
            self.store.create(f"rejected/{digest}", record, fence=self.fence())
        except AlreadyExists:
            pass  # the same bad message again: already recorded and alerted
        else:
            if self._dead_letter is not None:
                self._dead_letter(data, reason)
            self.alerts.raise_alert(
                "request_rejected",
                "WARNING",
                f"request rejected ({status}): {reason}",
                job_id=job_id,
                details={"reason": reason, "status": status},
            )
            if self.metrics is not None:
                self.metrics.rejected(status)
        log.warning("request rejected", job_id=job_id, attempt=None, status=status, reason=reason)
        return IntakeResult(status, job_id, reason)

    @staticmethod
    def _guess_job_id(data: bytes) -> str | None:
        try:
            value = json.loads(data).get("jobId")
        except Exception:
            return None
        return value if isinstance(value, str) and len(value) <= 63 else None

    # ==== observations =====================================================================
    def on_hint(self, vertex_job_id: str) -> None:
        """A log entry said something happened to this Vertex job: read its real state."""
        name = f"{self.vertex.parent}/customJobs/{vertex_job_id}"
        job = self.vertex.get(name)
        if job is not None:
            self.observe(job)

    def observe(self, job: aiplatform_v1.CustomJob) -> None:
        """Feed one authoritative CustomJob to its Relaunch job, if it is one of ours."""
        job_id, attempt = job_labels(job)
        if job_id is None or attempt is None:
            return
        record = self.store.get(job_key(job_id))
        if record is None:
            return
        state_name = vertex_state_name(job)
        with self._lock(job_id):
            events: list[ev.Event] = []
            exit_reason = None
            if state_name in ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"):
                # Learn the latest committed checkpoint and the trainer's exit record first: the
                # core classifies the ending and measures progress with them.
                uri = record.document["request"]["checkpoint"]["uri"]
                latest = self.checkpoints.latest(uri)
                if latest is not None:
                    events.append(ev.CheckpointObserved(latest.step, latest.uri))
                record_ = self.checkpoints.exit_record(uri, attempt)
                exit_reason = record_.reason if record_ is not None else None
            events.append(
                ev.VertexObserved(
                    attempt=attempt,
                    vertex_name=job.name,
                    vertex_state=state_name,
                    error_code=job.error.code if job.error else 0,
                    error_message=job.error.message if job.error else "",
                    start_time=_ts(job.start_time),
                    end_time=_ts(job.end_time),
                    exit_reason=exit_reason,
                )
            )
            for event in events:
                self.apply(job_id, event)

    def reconcile(self) -> None:
        """Level-triggered pass: list our Vertex jobs, feed what is seen, tick every live job.

        A pass that hit errors counts toward `controller_degraded`; a clean one resolves it."""
        if not self.is_leader():
            return
        errors: list[str] = []
        seen: set[str] = set()
        try:
            listed = list(self.vertex.list_managed())
        except Exception as error:
            self.health.pass_failed([f"listing Vertex jobs: {error}"])
            raise
        for job in listed:
            seen.add(job.name)
            try:
                self.observe(job)
            except Exception as error:
                errors.append(f"{job.name}: {error}")
                log.exception("reconcile: observing a job failed", vertex_job=job.name)
        live = self.live_states()
        for state in sorted(live, key=lambda s: s.current.intent_at if s.current else s.created_at):
            try:
                current = state.current
                if current and current.vertex_name and not current.ended and current.vertex_name not in seen:
                    # Listed moments ago and not there: confirm with Get before believing it.
                    job = self.vertex.get(current.vertex_name)
                    if job is None:
                        self.apply(state.job_id, ev.VertexJobMissing(current.number, current.vertex_name))
                    else:
                        self.observe(job)
                elif current and not current.ended and current.vertex_name:
                    self._probe_progress(state)
                self.apply(state.job_id, ev.TimerFired())
            except Exception as error:
                errors.append(f"{state.job_id}: {error}")
                log.exception("reconcile: job failed to converge", job_id=state.job_id)
        self._export_job_states()
        if errors:
            self.health.pass_failed(errors)
        else:
            self.health.pass_succeeded()

    def _probe_progress(self, state: JobState) -> None:
        request = self._request(state.job_id)
        latest = self.checkpoints.latest(request.checkpoint_uri)
        if latest is not None and (
            state.latest_checkpoint_step is None or latest.step > state.latest_checkpoint_step
        ):
            self.apply(state.job_id, ev.CheckpointObserved(latest.step, latest.uri))

    def fire_due_timers(self) -> int:
        fired = 0
        for job_id in self.timers.pop_due():
            try:
                self.apply(job_id, ev.TimerFired())
                fired += 1
            except Exception:
                log.exception("timer: job failed to converge", job_id=job_id)
        return fired

    # ==== the loop: decide, persist, act ===================================================
    def apply(self, job_id: str, event: ev.Event) -> JobState | None:
        """Run one event through the core for one job; persist first, then act."""
        with self._lock(job_id):
            pending: list[ev.Event] = [event]
            state = None
            while pending:
                state, actions = self._decide_and_store(job_id, pending.pop(0))
                if state is None:
                    return None
                for action in actions:
                    pending.extend(self._execute(state, action))
            return state

    def _decide_and_store(self, job_id: str, event: ev.Event) -> tuple[JobState | None, tuple[Action, ...]]:
        for _ in range(5):
            record = self.store.get(job_key(job_id))
            if record is None:
                return None, ()
            state = JobState.from_dict(record.document["state"])
            now = self.clock()
            decision = decide(state, event, now, self.rng, self.core_config)
            if decision.state == state:
                return state, decision.actions
            document = dict(record.document)
            document["state"] = decision.state.to_dict()
            entries = self._describe(state, decision.state, event, decision.actions, now)
            document["timeline"] = (list(document.get("timeline", [])) + entries)[-TIMELINE_LIMIT:]
            try:
                self.store.put(job_key(job_id), document, expected_version=record.version, fence=self.fence())
            except VersionConflict:
                continue  # someone else wrote in between: decide again on the fresh state
            self._after_transition(state, decision.state, now)
            self._resolve_alerts(state, decision.state)
            return decision.state, decision.actions
        raise RuntimeError(f"{job_id}: state kept changing under us; giving up this event")

    def _execute(self, state: JobState, action: Action) -> list[ev.Event]:
        job_id = state.job_id
        attempt = state.current.number if state.current else 0
        bound = log.bind(job_id=job_id, attempt=attempt)
        if isinstance(action, SubmitAttempt):
            return self._submit(state, action)
        if isinstance(action, CancelVertexJob):
            bound.info("cancelling vertex job", vertex_job=action.vertex_name, for_attempt=action.attempt)
            self.vertex.cancel(action.vertex_name)
            return []
        if isinstance(action, ScheduleWakeup):
            self.timers.schedule(job_id, action.at)
            return []
        if isinstance(action, RaiseAlert):
            self.alerts.raise_alert(
                action.kind,
                action.severity,
                action.summary,
                job_id=job_id,
                attempt=attempt,
                details=action.details,
            )
            if self.metrics is not None:
                self.metrics.alert(action.kind)
            return []
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

    def _submit(self, state: JobState, action: SubmitAttempt) -> list[ev.Event]:
        job_id = state.job_id
        bound = log.bind(job_id=job_id, attempt=action.attempt)
        request = self._request(job_id)

        def build() -> aiplatform_v1.CustomJob:
            return build_custom_job(
                request, action.attempt, resume_from=action.resume_from_uri, on_demand=action.on_demand
            )

        _crash_point("after-intent")
        try:
            submission = self.vertex.ensure_attempt(
                job_id, action.attempt, build, create=action.create_if_missing
            )
        except SubmitRejected as error:
            bound.error("vertex rejected the job", error=str(error))
            return [ev.SubmitFailed(action.attempt, str(error), permanent=True)]
        except gexc.GoogleAPICallError as error:
            bound.warning("submission failed; will retry", error=str(error))
            return [ev.SubmitFailed(action.attempt, str(error), permanent=False)]
        for duplicate in submission.duplicates:
            bound.warning("second vertex job for one attempt; cancelling it", vertex_job=duplicate)
            self.vertex.cancel(duplicate)
        if submission.job is None:
            return [ev.AttemptNotFound(action.attempt)]
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
            )
        else:
            bound.info("adopted existing vertex job", vertex_job=submission.job.name)
        return [ev.AttemptSubmitted(action.attempt, submission.job.name)]

    # ==== views ============================================================================
    def live_states(self) -> list[JobState]:
        states = []
        for record in self.store.list("jobs/"):
            state = JobState.from_dict(record.document["state"])
            if not state.phase.terminal:
                states.append(state)
        return states

    def job_document(self, job_id: str) -> dict | None:
        record = self.store.get(job_key(job_id))
        return status_document(record.document) if record else None

    def list_job_documents(self) -> list[dict]:
        return [status_document(r.document, with_timeline=False) for r in self.store.list("jobs/")]

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
            if ending not in ("succeeded", "preempted", "cancelled"):
                self.metrics.failed(ending)

    def _resolve_alerts(self, old: JobState, new: JobState) -> None:
        """capacity_wait clears once an attempt runs, or when the job ends (nothing waits any
        more); the sink only publishes it if that alert had fired."""
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

    def _export_job_states(self) -> None:
        if self.metrics is None:
            return
        counts: dict[str, int] = {phase.value: 0 for phase in Phase}
        now = self.clock()
        for record in self.store.list("jobs/"):
            counts[record.document["state"]["phase"]] += 1
            ratio = goodput.compute(record.document, now).ratio
            if ratio is not None:
                self.metrics.set_goodput(record.document["state"]["job_id"], ratio)
        self.metrics.set_job_states(counts)

    @staticmethod
    def _entry(now: float, attempt: int, what: str, **extra: Any) -> dict:
        return {"time": now, "attempt": attempt, "what": what, **extra}

    def _describe(
        self, old: JobState, new: JobState, event: ev.Event, actions: Iterable[Action], now: float
    ) -> list[dict]:
        """Timeline entries a person would want to read for this transition."""
        entries = []
        attempt = new.current.number if new.current else 0
        if new.latest_checkpoint_step != old.latest_checkpoint_step:
            entries.append(
                self._entry(
                    now,
                    attempt,
                    f"checkpoint at step {new.latest_checkpoint_step} committed",
                    step=new.latest_checkpoint_step,
                    uri=new.latest_checkpoint_uri,
                )
            )
        if len(new.attempts) > len(old.attempts):
            current = new.current
            where = (
                f"from checkpoint step {current.resume_from_step}"
                if current.resume_from_step is not None
                else "from scratch"
            )
            spot = "on-demand" if current.on_demand else "spot"
            entries.append(
                self._entry(
                    now,
                    attempt,
                    f"attempt {attempt} requested {where} ({spot})",
                    resumeFromStep=current.resume_from_step,
                )
            )
        if new.current and old.current and new.current.number == old.current.number:
            if new.current.vertex_name and not old.current.vertex_name:
                entries.append(
                    self._entry(now, attempt, f"attempt {attempt} submitted as {new.current.vertex_name}")
                )
            if new.current.started_at and not old.current.started_at:
                entries.append(self._entry(new.current.started_at, attempt, f"attempt {attempt} running"))
            if new.current.ended and not old.current.ended:
                c = new.current
                entries.append(
                    self._entry(
                        c.ended_at or now,
                        attempt,
                        f"attempt {attempt} ended: {c.ending.value} ({c.rule})",
                        ending=c.ending.value,
                        error=c.error_message,
                        checkpointStep=c.checkpoint_step_at_end,
                    )
                )
        if new.phase is Phase.BACKING_OFF and old.phase is not Phase.BACKING_OFF:
            entries.append(
                self._entry(
                    now,
                    attempt,
                    f"backing off {new.next_attempt_at - now:.1f}s before the next attempt",
                    nextAttemptAt=new.next_attempt_at,
                )
            )
        if new.cancel_requested and not old.cancel_requested:
            entries.append(self._entry(now, attempt, "cancel requested"))
        if new.phase.terminal and not old.phase.terminal:
            entries.append(self._entry(now, attempt, f"job {new.phase.value}: {new.terminal_reason}"))
        return entries


def _crash_point(name: str) -> None:
    """Fault injection for the crash-safety tests: die here, as `kill -9` would.

    `RELAUNCH_FAULT_CRASH_POINT=after-intent` kills the process after the attempt's intent is
    stored and before CreateCustomJob; `after-create` right after CreateCustomJob returned and
    before its result is stored. Unset in production.
    """
    if os.environ.get("RELAUNCH_FAULT_CRASH_POINT") == name:
        log.warning("fault injection: crashing", crash_point=name)
        os.kill(os.getpid(), signal.SIGKILL)


def status_document(document: dict, *, with_timeline: bool = True) -> dict:
    """The JSON a user sees for one job (HTTP API, `relaunch status`)."""
    state = document["state"]
    attempts = state.get("attempts", [])
    current = attempts[-1] if attempts else None
    out = {
        "jobId": state["job_id"],
        "displayName": document["request"].get("displayName"),
        "phase": state["phase"],
        "attempt": current["number"] if current else 0,
        "preemptions": state["preemptions"],
        "failures": state["failures"],
        "latestCheckpointStep": state["latest_checkpoint_step"],
        "latestCheckpointUri": state["latest_checkpoint_uri"],
        "nextAttemptAt": state["next_attempt_at"],
        "createdAt": state["created_at"],
        "updatedAt": state["updated_at"],
        "terminalReason": state["terminal_reason"],
        "checkpointUri": document["request"]["checkpoint"]["uri"],
        "attempts": [
            {
                "number": a["number"],
                "vertexJob": a["vertex_name"],
                "vertexState": a["vertex_state"],
                "onDemand": a["on_demand"],
                "resumeFromStep": a["resume_from_step"],
                "requestedAt": a["intent_at"],
                "submittedAt": a["submitted_at"],
                "startedAt": a["started_at"],
                "endedAt": a["ended_at"],
                "ending": a["ending"],
                "rule": a["rule"],
                "errorCode": a["error_code"],
                "errorMessage": a["error_message"],
                "checkpointStepAtEnd": a["checkpoint_step_at_end"],
            }
            for a in attempts
        ],
    }
    if with_timeline:
        out["timeline"] = document.get("timeline", [])
    return out
