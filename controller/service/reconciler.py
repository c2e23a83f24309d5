"""reconcile(job_id): the one place a job's story moves forward.

A worker of the work queue (`service.workqueue`) calls it with a job id; whatever put the id
there (a request recorded, a Vertex event, a cancel, a wake-up, the periodic pass) does not
matter, because each look re-derives everything from the evidence:

  1. load the job's record from the store;
  2. gather the facts: a cancel recorded for it, its attempt's CustomJob read in ONE adapter call
     (`adapters.observation`: at an ending with the latest committed checkpoint and the exit
     records), any other CustomJob a listing found with its labels, and the clock (`TimerFired`);
  3. decide (the pure core) over those facts;
  4. write the new state once, a compare-and-set carrying the lease's fence token;
  5. carry out the actions; an action's outcome that must be recorded (the name of the CustomJob
     a create made, an alert delivered) is decided and written the same way, in the same look;
  6. return the delay before the next look (the core's wake-up, or the create lane's turn).

The queue never serves one job on two workers, so nothing here locks job state. Leadership:
every side effect asks `guard` first, which raises `LeaseNotHeld` once this controller may no
longer act; a write the store refuses as `Fenced` means another controller leads. Either way `on_deposed` is
told (the daemon steps down) and the look ends: the new leader re-derives it from the store.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from controller import logs
from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.adapters.lease import LeaseNotHeld
from controller.adapters.observation import Observer
from controller.adapters.vertex import job_labels, observed_event
from controller.core import events as ev
from controller.core.actions import (
    Action,
    CancelVertexJob,
    MarkTerminal,
    RaiseAlert,
    ReadVertexJob,
    ResolveAlert,
    ScheduleWakeup,
    SubmitAttempt,
)
from controller.core.confirm import pending
from controller.core.decide import decide, pending_alerts
from controller.core.interval_choice import IntervalInputs
from controller.core.interval_choice import wanted as interval_wanted
from controller.core.model import JobState, Phase
from controller.core.placement_choice import PlacementInputs
from controller.core.placement_choice import wanted as placement_wanted
from controller.jobrecord import JobRecord
from controller.readmodel.jobs import TIMELINE_LIMIT, transition_entries
from controller.request import JobRequest, parse_request
from controller.service.after_the_end import AfterTheEnd
from controller.service.alerts import unreadable_checkpoints_alert
from controller.service.deps import Dependencies, Deposed, Listed, Transition, core_config
from controller.service.interval import EndingRead, IntervalKeeper
from controller.service.look_timings import CREATE_CALLED, CREATED, DECIDED, GOT, READ, STORED, LookTimings
from controller.service.placing import placement_inputs
from controller.service.reconcile_probe import ProbeSteps
from controller.service.submit import crash_point, first_create_wait, ready_at, submit
from controller.settings import Settings
from controller.store import Fenced, VersionConflict, Versioned
from controller.store.keys import cancel_key, job_key

log = logs.get("relaunch.reconcile")

# A write that loses a compare-and-set race is decided again on the fresh state, this many times.
WRITE_TRIES = 5
# Rounds of "act, record the outcome" in one look (a create that adopts, then cancels a duplicate).
OUTCOME_ROUNDS = 4


class Reconciler(AfterTheEnd, ProbeSteps):
    def __init__(
        self,
        settings: Settings,
        deps: Dependencies,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        fence: Callable[[], int] = lambda: 0,
        guard: Callable[[str], float] = lambda what: float("inf"),
        on_deposed: Callable[[str], None] = lambda reason: None,
    ):
        self.settings = settings
        self.store = deps.store
        self.vertex = deps.vertex
        self.alerts = deps.alerts
        self.metrics = deps.metrics
        self.clock = clock
        self.rng = rng or random.Random()
        self.fence = fence
        self.guard = guard
        self._on_deposed = on_deposed
        self.observer = Observer(
            deps.vertex, deps.checkpoints, listing_max_age=max(1.0, settings.reconcile_seconds)
        )
        self.intervals = IntervalKeeper(settings, self.store, deps.checkpoints, fence=lambda: self.fence())
        self.core_config = core_config(settings)
        # Observers of every stored transition (metrics, the hint index): they read, never write.
        self.on_transition: list[Transition] = [*deps.on_transition]
        self._requests: dict[str, JobRequest] = {}  # parsed requests of live jobs

    # ==== the door ===========================================================================
    def reconcile(
        self, job_id: str, listed: Listed | None = None, timings: LookTimings | None = None
    ) -> float | None:
        """Look at one job; the seconds until it wants another look, or None. `listed`: what the
        periodic pass just read of it (then the look starts from that, reading nothing again).
        `timings`: its time in the queue, and where this look's time goes (logged for a
        recovery's looks)."""
        try:
            return self._reconcile(job_id, listed, timings or LookTimings(job_id))
        except Fenced as error:
            self._deposed(f"state write refused: {error}")
        except LeaseNotHeld as error:
            self._deposed(str(error))
        except Deposed:
            pass
        return None

    def _reconcile(self, job_id: str, listed: Listed | None, timings: LookTimings) -> float | None:
        record = listed.record if listed is not None else self.store.get(job_key(job_id))
        if record is None:
            return None
        first = (record, JobRecord.from_dict(record.document))  # decided from, unless stale
        state = first[1].state
        if state.phase.terminal and not pending(state):  # else Vertex's error may refine the reason
            self._after_the_end(job_id, state, record.document)
            return None
        self._request(job_id, record.document)  # parsed from the record at hand, not read again
        loaded = state
        facts, observed, known = self._facts(state, listed, timings)
        timings.mark(READ)
        if (turn := first_create_wait(state, facts, self.vertex.lane)) > 0:
            log.info("waiting for a create slot", job_id=job_id, attempt=1)
            return turn  # its intent is written when its turn comes
        if listed is not None and listed.cancel_recorded is None and self._cancel_recorded(state):
            facts.insert(0, ev.CancelRequested())  # read only now that the look decides
        for look in range(2):  # the first decides from the record just read (a stale one fails the CAS)
            state, actions = self._decide_and_write(job_id, facts, first if look == 0 else None, known)
            timings.mark(DECIDED)
            decided = {a.outbox_id for a in actions if isinstance(a, RaiseAlert | ResolveAlert)}
            # Alerts a crash or a failed publish left in the outbox go out with this look's.
            actions += [a for a in pending_alerts(state) if a.outbox_id not in decided]
            state, wake, wants_create = self._act(state, actions, observed, timings)
            if wake is None or wake > self.clock() or wants_create or state.phase.terminal:
                break
            # Due already (a backoff of 0 after a reclaim): go on in this look, not the queue.
            facts, observed = [ev.TimerFired()], None
        timings.ended = sum(a.ended for a in state.attempts) > sum(a.ended for a in loaded.attempts)
        timings.report(state.current.number if state.current else 0)
        if not wants_create:
            self.vertex.lane.leave(job_id)
        if state.phase.terminal and not pending(state):
            self._after_the_end(job_id, state, None)
            return None
        return None if wake is None else max(0.0, wake - self.clock())

    def _facts(
        self, state: JobState, listed: Listed | None, timings: LookTimings
    ) -> tuple[list[ev.Event], int | None, dict[int, EndingRead]]:
        """What is true of the job now, for the core (which attempt was read from Vertex, and what
        was read of its ending, for the interval keeper)."""
        facts: list[ev.Event] = []
        # A new job from the intake (cancel not read: None) is told of its cancel by the look once
        # its create-slot turn has come; until then the look decides nothing and reads nothing.
        cancelled = listed.cancel_recorded if listed is not None else self._cancel_recorded(state)
        if not state.cancel_requested and cancelled:
            facts.append(ev.CancelRequested())
        current, observed = state.current, None
        recorded = current.vertex_name if current is not None else None
        for job in self.observer.listed_for(state.job_id, other_than=recorded):
            _, attempt = job_labels(job)
            if attempt is not None:  # a CustomJob the store has not recorded: adopt or cancel it
                facts.append(observed_event(job, attempt))
        if listed and listed.probe and state.phase is Phase.RUNNING:  # its progress, now and then
            facts += self._probe(state)
        known: dict[int, EndingRead] = {}
        timings.mark(STORED)
        if current is not None and current.vertex_name is not None and not current.ended:
            observation = self._read_attempt(state, current.vertex_name, current.number)
            timings.marks.setdefault(GOT, observation.got_at)
            if observation.markers is not None and observation.unreadable is None:
                # An ending read whole: the interval keeper's figures use it, not a second read.
                known[current.number] = EndingRead(observation.exit_record, observation.markers)
            facts += observation.events()
            observed = current.number
        facts.append(ev.TimerFired())
        return facts, observed, known

    def _cancel_recorded(self, state: JobState) -> bool:
        return not state.cancel_requested and self.store.get(cancel_key(state.job_id)) is not None

    # ==== decide and write once ============================================================
    def _decide_and_write(
        self,
        job_id: str,
        facts: list[ev.Event],
        loaded: tuple[Versioned, JobRecord] | None = None,  # a record just read, and its parse
        known: dict[int, EndingRead] | None = None,
    ) -> tuple[JobState, list[Action]]:
        record, parsed = loaded if loaded is not None else (None, None)
        inputs: IntervalInputs | None = None
        placing: PlacementInputs | None = None  # a job with placements: where its attempt runs
        for _ in range(WRITE_TRIES):
            if record is None:
                record, parsed = self.store.get(job_key(job_id)), None
            if record is None:
                raise Deposed(f"{job_id}: its record vanished")  # retention deleted it meanwhile
            stored = parsed if parsed is not None else JobRecord.from_dict(record.document)
            before, now = stored.state, self.clock()
            state, actions, entries = self._fold(before, facts, now, inputs, placing)
            if placing is None and placement_wanted(actions):
                if placing := placement_inputs(self._request(job_id), self.intervals):
                    state, actions, entries = self._fold(before, facts, now, inputs, placing)
            if inputs is None and interval_wanted(actions) and stored.interval_setting is not None:
                if sum(a.ended for a in state.attempts) > sum(a.ended for a in before.attempts):
                    # A restart at once: the next attempt's interval must see this ending, so the
                    # ending is written (and learned) first; the look's next turn, a tick, submits.
                    facts = [f for f in facts if not isinstance(f, ev.TimerFired)]
                    state, actions, entries = self._fold(before, facts, now, None, placing)
                elif inputs := self.intervals.inputs(self._request(job_id), stored.interval_choices):
                    # The core chooses the interval from the book's estimate and C, gathered now.
                    state, actions, entries = self._fold(before, facts, now, inputs, placing)
            if state == before:
                return state, actions
            written, reads = self.intervals.with_ending(
                stored.with_state(state, entries, timeline_limit=TIMELINE_LIMIT),
                before,
                self._request(job_id),
                known,
            )
            document = written.to_dict()
            try:
                self.store.put(job_key(job_id), document, expected_version=record.version, fence=self.fence())
            except VersionConflict:
                record = parsed = None
                continue  # someone wrote in between (the intake's cancel): decide again
            self._transitioned(before, state, document, reads)
            return state, actions
        raise RuntimeError(f"{job_id}: state kept changing under us; giving up this look")

    def _fold(
        self, state: JobState, facts: list[ev.Event], now: float, *inputs: Any
    ) -> tuple[JobState, list[Action], list[dict[str, Any]]]:
        """`inputs`: the interval's and the placement's, each None when not gathered."""
        actions, entries = list[Action](), list[dict[str, Any]]()
        for fact in facts:
            decision = decide(state, fact, now, self.rng, self.core_config, *inputs)
            if decision.state != state:
                entries += transition_entries(state, decision.state, fact, decision.actions, now)
            state = decision.state
            actions += decision.actions
        return state, actions, entries

    def _transitioned(self, old: JobState, new: JobState, document: dict[str, Any], reads: dict) -> None:
        for observe in self.on_transition:
            observe(old, new, document)
        # Every attempt that ended in this write (with a restart at once, the next one is current).
        was_ended = {a.number for a in old.attempts if a.ended}
        for attempt in new.attempts:
            if attempt.ended and attempt.number not in was_ended:
                if new.phase.terminal:
                    crash_point("after-terminal-write")
                self._learn_ending(new, attempt, reads.get(attempt.number))

    # ==== act ==============================================================================
    def _act(
        self, state: JobState, actions: list[Action], observed: int | None, timings: LookTimings
    ) -> tuple[JobState, float | None, bool]:
        """Carry out the actions, recording outcomes: (state, earliest wake-up, waits for a create slot)."""
        wake: float | None = None
        wants_create = False
        for _ in range(OUTCOME_ROUNDS):
            outcomes: list[ev.Event] = []
            for action in actions:
                if isinstance(action, ScheduleWakeup):
                    wake = action.at if wake is None else min(wake, action.at)
                    continue
                if isinstance(action, ReadVertexJob) and observed == action.attempt:
                    continue  # read moments ago, in this look
                if isinstance(action, SubmitAttempt) and action.create_if_missing:
                    turn = self.vertex.lane.take(state.job_id, ready_at(state))
                    if turn > 0:
                        wants_create = True
                        log.info("waiting for a create slot", job_id=state.job_id, attempt=action.attempt)
                        at = self.clock() + turn
                        wake = at if wake is None else min(wake, at)
                        continue
                    timings.mark(CREATE_CALLED)
                outcomes += self._execute(state, action)
                if isinstance(action, SubmitAttempt):
                    timings.mark(CREATED)
            if not outcomes:
                break
            state, actions = self._decide_and_write(state.job_id, outcomes)
            observed = None
        return state, wake, wants_create

    def _execute(self, state: JobState, action: Action) -> list[ev.Event]:
        job_id = state.job_id
        bound = log.bind(job_id=job_id, attempt=state.current.number if state.current else 0)
        if isinstance(action, SubmitAttempt):
            return submit(
                state,
                self._request(job_id),
                action,
                vertex=self.vertex,
                guard=self.guard,
                clock=self.clock,
                metrics=self.metrics,
                slot_taken=action.create_if_missing,
            )
        if isinstance(action, CancelVertexJob):
            bound.info("cancelling vertex job", vertex_job=action.vertex_name, for_attempt=action.attempt)
            self.vertex.cancel(action.vertex_name, guard=self.guard)
            return []
        if isinstance(action, ReadVertexJob):
            return self._read_attempt(state, action.vertex_name, action.attempt).events()
        if isinstance(action, RaiseAlert):
            return self._send_alert(state, action)
        if isinstance(action, ResolveAlert):
            self.guard("resolve an alert")
            self.alerts.resolve(
                action.kind, job_id, action.summary, attempt=action.attempt, fired_with=action.severity
            )
            return [ev.AlertDelivered(action.outbox_id)] if action.outbox_id else []
        if isinstance(action, MarkTerminal):
            (bound.info if action.phase == "succeeded" else bound.warning)(
                f"job {action.phase}",
                reason=action.reason,
                preemptions=state.preemptions,
                failures=state.failures,
            )
            return []
        raise TypeError(f"unknown action {action!r}")

    def _send_alert(self, state: JobState, alert: RaiseAlert) -> list[ev.Event]:
        attempt = alert.details.get("attempt", state.current.number if state.current else 0)
        self._alert(
            alert.kind,
            alert.severity,
            alert.summary,
            job_id=state.job_id,
            attempt=attempt,
            details=alert.details,
        )
        return [ev.AlertDelivered(alert.outbox_id)] if alert.outbox_id else []

    def _alert(self, kind: str, severity: str, summary: str, **fields: Any) -> None:
        """A paging alert: only the leader sends it (a deposed one would page for a stale view)."""
        self.guard("send an alert")
        self.alerts.raise_alert(kind, severity, summary, **fields)
        if self.metrics is not None:
            self.metrics.alert(kind)

    # ==== helpers ==========================================================================
    def _checkpoints_unreadable(self, job_id: str, attempt: int, error: CheckpointsUnreadable) -> None:
        log.error(
            "checkpoints unreadable; progress unknown", job_id=job_id, attempt=attempt, error=str(error)
        )
        kind, severity, summary, details = unreadable_checkpoints_alert(job_id, error)
        self._alert(kind, severity, summary, job_id=job_id, attempt=attempt, details=details)

    def _request(self, job_id: str, document: dict[str, Any] | None = None) -> JobRequest:
        request = self._requests.get(job_id)
        if request is None:
            if document is None:
                record = self.store.get(job_key(job_id))
                if record is None:
                    raise Deposed(f"{job_id}: its record vanished")
                document = record.document
            parsed = parse_request(
                JobRecord.from_dict(document).request,
                allow_local_checkpoints=self.settings.allow_local_checkpoints,
                prices=self.settings.prices,
            )
            assert isinstance(parsed, JobRequest)  # a stored job's request, never a cancel
            self._requests[job_id] = request = parsed
        return request

    def remembered_jobs(self) -> set[str]:
        """The jobs this process keeps anything about (their parsed requests): the live ones."""
        return set(self._requests)

    def remember_request(self, request: JobRequest) -> None:
        """The intake hands over a request it just stored, saving a parse on the first look."""
        self._requests[request.job_id] = request

    def _deposed(self, reason: str) -> None:
        self.vertex.lane.clear()
        self._on_deposed(reason)


__all__ = ["Dependencies", "Deposed", "Reconciler"]
