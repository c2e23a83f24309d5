"""The decision core: `decide(state, event, now, rng) -> Decision(new state, actions)`.

Pure: no I/O, no clock, randomness only from the `rng` passed in. The shell persists the
returned state before it executes the actions, which makes every action a recorded intent.

Level-triggered: `TimerFired` re-derives what must happen from the state alone, so a reconcile
pass converges from any state, even after a crash lost the actions of an earlier decision.
Idempotent: replaying an event, or delivering one late, changes nothing it should not:
  - events about an attempt other than the current one never touch the current attempt
    (a live job they name is a stray and gets cancelled);
  - nothing changes once the job is terminal.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from controller.core import confirm, elastic, fallback, restarts, stockout
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
from controller.core.classify import (
    Classification,
    Ending,
    Observation,
    classify,
    needs_vertex_error,
    provisional,
)
from controller.core.elastic import ElasticPolicy
from controller.core.interval_choice import IntervalInputs, choose
from controller.core.model import (
    VERTEX_RUNNING,
    VERTEX_TERMINAL,
    VERTEX_WAITING,
    Alerted,
    Attempt,
    JobState,
    PendingAlert,
    Phase,
    vertex_is_live,
)
from controller.core.placement_choice import PlacementInputs, choose_placements
from controller.core.policy import NO_CHECKPOINT_RESTART, RestartPolicy


@dataclass(frozen=True)
class CoreConfig:
    """Operator knobs (not per job); defaults suit production."""

    submit_retry_seconds: float = 30.0  # after a transient CreateCustomJob failure
    capacity_wait_alert_seconds: float = 3600.0  # queued this long -> alert once per attempt
    preemption_storm_count: int = 5  # this many preemptions ...
    preemption_storm_window_seconds: float = 3600.0  # ... within this window -> alert
    # Vertex sets `error` about a minute after a job ends: a FAILED job read with none (and no
    # decisive exit record) is read again until this long after it was first seen so.
    error_settle_seconds: float = 90.0
    error_recheck_seconds: float = 10.0  # how often it is read again meanwhile
    # At least this long between attempts refused for capacity or quota (429, stockout before
    # running): such shortfalls last minutes, and every refused create spends Vertex quota.
    capacity_retry_seconds: float = 120.0


@dataclass(frozen=True)
class Decision:
    state: JobState
    actions: tuple[Action, ...] = ()


Outcome = tuple[JobState, list[Action]]


def new_job(
    job_id: str,
    policy: RestartPolicy,
    now: float,
    elastic_policy: ElasticPolicy | None = None,
    placements: tuple[str, ...] = (),
) -> JobState:
    return JobState(
        job_id=job_id,
        policy=policy,
        created_at=now,
        updated_at=now,
        elastic=elastic_policy,
        placements=placements,
    )


def decide(
    state: JobState,
    event: ev.Event,
    now: float,
    rng: random.Random,
    config: CoreConfig = CoreConfig(),
    interval: IntervalInputs | None = None,
    placement: PlacementInputs | None = None,
) -> Decision:
    """`interval`: the facts an `auto` checkpoint interval is chosen from, when the shell has them
    (`controller.core.interval_choice`: a SubmitAttempt without its interval asks for them);
    `placement`: the same for the placement of a job with placements (`core.placement_choice`)."""
    if isinstance(event, ev.AlertDelivered):  # also after the end: a failed job's alert matters most
        outbox = tuple(p for p in state.outbox if p.outbox_id != event.outbox_id)
        return Decision(replace(state, outbox=outbox) if outbox != state.outbox else state, ())
    if state.phase.terminal:
        finished, actions = _on_finished(state, event, now, config)
        finished, actions = _into_outbox(finished, actions, now)
        return Decision(replace(finished, updated_at=now) if finished != state else state, tuple(actions))
    handler = _HANDLERS[type(event)]
    new_state, actions = handler(state, event, now, rng, config)
    new_state, actions = _resolve_cleared(state, new_state, actions)
    new_state, actions = _into_outbox(new_state, actions, now)
    # The placement first: the interval is chosen for the capacity the attempt will run on.
    new_state, actions = choose_placements(new_state, actions, placement, now, config.capacity_retry_seconds)
    new_state, actions = choose(new_state, actions, interval)
    if new_state != state:
        new_state = replace(new_state, updated_at=now)
    return Decision(new_state, tuple(actions))


def pending_alerts(state: JobState) -> tuple[RaiseAlert | ResolveAlert, ...]:
    """The alerts (firings and resolutions) of this job still to be published (after a crash or
    a lost lease)."""
    return tuple(
        ResolveAlert(p.kind, p.severity, p.summary, p.details.get("attempt"), p.outbox_id)
        if p.resolves
        else RaiseAlert(p.kind, p.severity, p.summary, dict(p.details), p.outbox_id)
        for p in state.outbox
    )


# Alerts that clear on their own; what is firing is part of the job's state (`JobState.firing`).
SELF_CLEARING = frozenset({"capacity_wait", "running_shrunk"})


def _resolve_cleared(old: JobState, new: JobState, actions: list[Action]) -> tuple[JobState, list[Action]]:
    """capacity_wait clears once an attempt runs, or when the job ends (nothing waits any more);
    running_shrunk once an attempt runs at its full size again, or the job ends. Alerts raised
    by this decision join the firing set."""
    current = new.current
    firing = list(new.firing)
    out = list(actions)
    if current is not None:
        started = current.started_at is not None and not (
            old.current is not None and old.current.number == current.number and old.current.started_at
        )
        ended = new.phase.terminal and not old.phase.terminal
        full_size = new.elastic is None or current.replicas is None or current.replicas == new.elastic.full
        if "capacity_wait" in firing and (started or ended):
            what = f"attempt {current.number} is running" if started else f"job {new.phase.value}"
            out.append(
                ResolveAlert(
                    "capacity_wait",
                    "WARNING",
                    f"job {new.job_id} no longer waits for capacity: {what}",
                    current.number,
                )
            )
            firing.remove("capacity_wait")
        if "running_shrunk" in firing and ((started and full_size) or ended):
            what = (
                f"attempt {current.number} runs on all {sum(new.elastic.full)} replicas"
                if started and full_size and new.elastic is not None
                else f"job {new.phase.value}"
            )
            out.append(
                ResolveAlert(
                    "running_shrunk", "WARNING", f"job {new.job_id} grown back: {what}", current.number
                )
            )
            firing.remove("running_shrunk")
    for action in actions:
        if isinstance(action, RaiseAlert) and action.kind in SELF_CLEARING and action.kind not in firing:
            firing.append(action.kind)
    if tuple(firing) != new.firing:
        new = replace(new, firing=tuple(firing))
    return new, out


def _into_outbox(state: JobState, actions: list[Action], now: float) -> tuple[JobState, list[Action]]:
    """Every alert decided here, firing or resolved, is written to the outbox with the state
    change that caused it."""
    out: list[Action] = []
    pending = list(state.outbox)
    for action in actions:
        if isinstance(action, RaiseAlert) and not action.outbox_id:
            outbox_id = f"{action.kind}@{now:.6f}#{len(pending)}"
            pending.append(
                PendingAlert(outbox_id, action.kind, action.severity, action.summary, action.details)
            )
            action = replace(action, outbox_id=outbox_id)
        elif isinstance(action, ResolveAlert) and not action.outbox_id:
            outbox_id = f"{action.kind}-resolved@{now:.6f}#{len(pending)}"
            details = {} if action.attempt is None else {"attempt": action.attempt}
            pending.append(
                PendingAlert(outbox_id, action.kind, action.severity, action.summary, details, resolves=True)
            )
            action = replace(action, outbox_id=outbox_id)
        out.append(action)
    return (replace(state, outbox=tuple(pending)) if len(pending) != len(state.outbox) else state), out


# --- event handlers ------------------------------------------------------------------------


def _on_request_accepted(
    state: JobState, event: ev.RequestAccepted, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    if state.phase is Phase.ACCEPTED and not state.attempts:
        return _start_attempt(state, now)
    return state, []


def _on_attempt_submitted(
    state: JobState, event: ev.AttemptSubmitted, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _attempt(state, event.attempt)
    if current is None or current.ended:
        return state, [CancelVertexJob(event.vertex_name, event.attempt)]
    if current.vertex_name == event.vertex_name:
        return state, []
    if current.vertex_name is not None:
        # A second Vertex job for one attempt: keep the first, stop the other.
        return state, [CancelVertexJob(event.vertex_name, event.attempt)]
    state = state.with_current(vertex_name=event.vertex_name, submitted_at=now)
    if state.phase is Phase.CANCELLING:
        return state, [CancelVertexJob(event.vertex_name, event.attempt)]
    state = replace(state, phase=Phase.QUEUED, next_attempt_at=None)
    return state, _shrink_check_wakeup(state)


def _on_attempt_not_found(
    state: JobState, event: ev.AttemptNotFound, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _attempt(state, event.attempt)
    if current is None or current.ended or current.vertex_name is not None:
        return state, []
    if state.phase is Phase.CANCELLING:
        state = state.with_current(ending=Ending.CANCELLED, rule="cancelled-before-submit", ended_at=now)
        return _terminal(state, Phase.CANCELLED, "cancelled before a Vertex job was created")
    return state, [_submit_action(current, create=True)]


def _on_submit_failed(
    state: JobState, event: ev.SubmitFailed, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _attempt(state, event.attempt)
    if current is None or current.ended or current.vertex_name is not None:
        return state, []
    if event.permanent:
        state = state.with_current(
            ending=Ending.USER_ERROR, rule="submit-rejected", ended_at=now, error_message=event.message
        )
        if state.phase is Phase.CANCELLING:
            return _terminal(state, Phase.CANCELLED, "cancelled; the submission was rejected")
        return _fail(state, "job_failed", f"Vertex AI rejected the job: {event.message}", now)
    if event.capacity:
        if state.next_attempt_at is not None and state.next_attempt_at > now:
            return state, [ScheduleWakeup(state.next_attempt_at)]  # this refusal is known already
        if len(state.placements) > 1 and not state.cancel_requested:
            return _move_at_once(state, now, "create-refused-for-quota", event.message)
        retry_at = now + config.capacity_retry_seconds * rng.uniform(1.0, 1.2)
        retry_at = _no_later_than_fallback(state, now, retry_at)
        state, alerts = _capacity_refused(replace(state, next_attempt_at=retry_at), now, event.message)
        since = state.capacity_wait_since
        if since is not None and _smaller_size(state) is not None and _shrink_due(state, since, now):
            # Refused for quota for shrinkAfter: a smaller gang asks for less of it.
            state, actions = _replace_smaller(state, now, "create refused for quota for")
            return state, [*alerts, *actions]
        return state, [*alerts, ScheduleWakeup(retry_at)]
    retry_at = now + config.submit_retry_seconds
    return replace(state, next_attempt_at=retry_at), [ScheduleWakeup(retry_at)]


def _on_vertex_observed(
    state: JobState, event: ev.VertexObserved, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    earlier = next((a for a in confirm.pending(state) if a.number == event.attempt), None)
    if earlier is not None and earlier.vertex_name == event.vertex_name:
        # Read again after its ending was decided: Vertex's error confirms or corrects it.
        obs = _observation(state, event, earlier)
        state = confirm.confirm(state, earlier, event, obs)
        settled = next(a for a in state.attempts if a.number == earlier.number)
        account = confirm.account_of(state.job_id, settled, event, obs)
        why = f"attempt {settled.number} corrected by Vertex's error to {account}"
        return _judge_budgets(state, now, why, attempt=settled.number)
    current = _attempt(state, event.attempt)
    if current is None or current.ended:
        return state, list(_cancel_if_stray(event))
    if current.vertex_name is None:
        # Adoption: the job was created but its name never recorded (crash, lost reply).
        state = state.with_current(vertex_name=event.vertex_name, submitted_at=now)
        if state.phase is Phase.SUBMITTING:
            state = replace(state, phase=Phase.QUEUED, next_attempt_at=None)
    elif current.vertex_name != event.vertex_name:
        return state, list(_cancel_if_stray(event))

    actions: list[Action] = []
    if state.phase is Phase.CANCELLING and _cancel_not_landed(event.vertex_state):
        # Adopted while cancelling, or the cancel has not landed yet: (re)ask.
        actions.append(CancelVertexJob(event.vertex_name, event.attempt))

    if event.restarts:  # restarts in place the trainer recorded, counted before the ending
        terminal = event.vertex_state in VERTEX_TERMINAL
        judge = not terminal and not state.cancel_requested
        state, counted = _count_restarts(state, event.attempt, event.restarts, now, config, judge=judge)
        actions += counted
        if state.phase.terminal:
            return state, actions
    if event.vertex_state in VERTEX_TERMINAL:
        settling = _settle_unexplained_failure(state, event, now, config)
        if settling is not None:
            return settling[0], actions + settling[1]
        return _end_attempt(state, event, now, rng, config)
    state = state.with_current(vertex_state=event.vertex_state)
    if event.vertex_state in VERTEX_RUNNING:
        first_start = _current(state).started_at is None
        if first_start:
            state = state.with_current(started_at=event.start_time or now)
        state = replace(state, capacity_wait_since=None)  # it runs: the capacity wait is over
        if state.phase in (Phase.SUBMITTING, Phase.QUEUED):
            state = replace(state, phase=Phase.RUNNING)
        if first_start:
            state, shrunk_alerts = _running_shrunk_alert(state, now)
            actions += shrunk_alerts
    elif event.vertex_state in VERTEX_WAITING:
        if state.phase is Phase.SUBMITTING:
            state = replace(state, phase=Phase.QUEUED)
        if _waited_too_long(state, now):
            # Seen waiting by this fresh read, past shrinkAfter: replace it with a smaller gang.
            state, replaced = _replace_smaller(state, now, "waited for capacity for")
            return state, actions + replaced
    state, alerts = _capacity_wait_alert(state, now, config)
    return state, actions + alerts


def _on_finished(state: JobState, event: ev.Event, now: float, config: CoreConfig) -> Outcome:
    """A finished job: Vertex's late error still refines an ending decided before it (the reason
    names the replica, code and step; one alert says so); nothing else changes, and never an
    attempt. Any other event: a live CustomJob that is not ours is cancelled."""
    if isinstance(event, ev.TimerFired):
        return confirm.recheck_finished(state, now, config.error_settle_seconds, config.error_recheck_seconds)
    earlier = next(
        (
            a
            for a in confirm.pending(state)
            if isinstance(event, ev.VertexObserved) and a.number == event.attempt
        ),
        None,
    )
    if (
        not isinstance(event, ev.VertexObserved)
        or earlier is None
        or earlier.vertex_name != event.vertex_name
    ):
        return state, list(_cancel_if_stray(event))
    state, account = confirm.refine_finished(state, earlier, event, _observation(state, event, earlier))
    if not account or state.phase is not Phase.FAILED or earlier.evidence:
        return state, []  # the job_failed alert already named the replica: the reason is refined quietly
    summary = f"job {state.job_id} failed: {state.terminal_reason} (refined by Vertex's error)"
    return state, [
        RaiseAlert(
            "job_failure_explained", "WARNING", summary, {**_alert_details(state), "attempt": earlier.number}
        )
    ]


def _on_vertex_job_missing(
    state: JobState, event: ev.VertexJobMissing, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _attempt(state, event.attempt)
    if current is None or current.ended or current.vertex_name != event.vertex_name:
        return state, []
    gone = ev.VertexObserved(
        attempt=event.attempt,
        vertex_name=event.vertex_name,
        vertex_state="FAILED",
        error_code=5,
        error_message="The Vertex AI job no longer exists (NOT_FOUND).",
    )
    return _end_attempt(state, gone, now, rng, config)


def _on_checkpoint_observed(
    state: JobState, event: ev.CheckpointObserved, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    # Checkpoints only move forward; an older observation arriving late changes nothing.
    if state.latest_checkpoint_step is not None and event.step <= state.latest_checkpoint_step:
        return state, []
    return replace(state, latest_checkpoint_step=event.step, latest_checkpoint_uri=event.uri), []


def _on_restarts_observed(
    state: JobState, event: ev.RestartsObserved, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _attempt(state, event.attempt)
    if current is None or current.ended or current.vertex_name != event.vertex_name:
        return state, []  # an ended attempt's restarts are read with its ending
    # Counted while a cancel is under way too, but a job being cancelled is not failed for them.
    judge = not state.cancel_requested
    return _count_restarts(state, event.attempt, event.restarts, now, config, judge=judge)


def _count_restarts(
    state: JobState,
    number: int,
    observed: tuple[restarts.InPlaceRestart, ...],
    now: float,
    config: CoreConfig,
    *,
    judge: bool,
) -> Outcome:
    """Count each restart in place of attempt `number` once (`controller.core.restarts`): a
    preemption or a failure, as an attempt's ending would be. `judge`: the budgets may end the
    job now, stopping its live CustomJob (an ending being decided judges them itself)."""
    attempt = next((a for a in state.attempts if a.number == number), None)
    fresh = restarts.unseen(attempt.restarts, observed) if attempt is not None else ()
    if not fresh:
        return state, []
    failed = sum(1 for r in fresh if r.previous_failed)
    state = replace(
        state,
        attempts=tuple(
            replace(a, restarts=a.restarts + fresh) if a.number == number else a for a in state.attempts
        ),
        failures=state.failures + failed,
        preemptions=state.preemptions + len(fresh) - failed,
    )
    if not judge:
        return state, []
    last = f"attempt {number} {fresh[-1].describe()}"
    limit = state.policy.max_preemptions
    if state.failures > state.policy.max_failures:
        return _fail_and_stop(
            state,
            f"failure budget exhausted ({state.failures} failures, maxFailures={state.policy.max_failures}); last: {last}",
            now,
        )
    if limit is not None and state.preemptions > limit:
        return _fail_and_stop(
            state, f"preempted {state.preemptions} times, more than maxPreemptions={limit}; last: {last}", now
        )
    return _preemption_storm_alert(state, now, config)


def _cancel_not_landed(vertex_state: str | None) -> bool:
    """Whether a cancel must be asked (again): Vertex has not said CANCELLING yet. Once it has,
    asking again changes nothing (CancelCustomJob starts an asynchronous cancellation,
    https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/cancel)
    and would only spend API quota on every look until the job ends."""
    return vertex_state is None or (vertex_is_live(vertex_state) and vertex_state != "CANCELLING")


def _fail_and_stop(state: JobState, reason: str, now: float) -> Outcome:
    """Fail the job while its current attempt may still run: its CustomJob is cancelled."""
    current = state.current
    state, actions = _fail(state, "job_failed", reason, now)
    if current is not None and not current.ended and current.vertex_name is not None:
        actions.append(CancelVertexJob(current.vertex_name, current.number))
    return state, actions


def _on_timer(
    state: JobState, event: ev.TimerFired, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    if state.phase is Phase.ACCEPTED:
        return _start_attempt(state, now)
    if state.phase is Phase.SUBMITTING:
        if state.next_attempt_at is not None and now < state.next_attempt_at:
            return state, [ScheduleWakeup(state.next_attempt_at)]
        submitting = _current(state)
        wanted = fallback.strategy(state.policy, state.attempts, state.capacity_wait_since, now)
        if wanted is not None and submitting.strategy is None and submitting.vertex_name is None:
            # Creates refused for quota for the stated wait: the create tried again falls back.
            state = state.with_current(strategy=wanted)
        return replace(state, next_attempt_at=None), [_submit_action(_current(state), create=True)]
    if state.phase is Phase.BACKING_OFF:
        if state.next_attempt_at is not None and now < state.next_attempt_at:
            return state, [ScheduleWakeup(state.next_attempt_at)]
        return _start_attempt(state, now)
    current = state.current
    if state.phase is Phase.CANCELLING and current is not None:
        if current.vertex_name is None:
            return state, [_submit_action(current, create=False)]
        if not _cancel_not_landed(current.vertex_state):
            return state, []  # Vertex is cancelling it: the ending comes by event or listing
        return state, [CancelVertexJob(current.vertex_name, current.number)]
    if (
        current is not None
        and current.vertex_name is not None
        and current.failed_unexplained_at is not None
        and not current.ended
    ):
        return state, [ReadVertexJob(current.vertex_name, current.number)]
    if current is not None and current.vertex_name is not None and _waited_too_long(state, now):
        # Never replace on a stored observation alone: read the job now, and decide on what Vertex
        # says (it may have started since it was last seen).
        return state, [ReadVertexJob(current.vertex_name, current.number)]
    state, alerts = _capacity_wait_alert(state, now, config)
    return state, alerts + _shrink_check_wakeup(state)


def _on_timer_and_confirmations(
    state: JobState, event: ev.TimerFired, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    state, actions = _on_timer(state, event, now, rng, config)
    if state.phase.terminal:
        return state, actions
    state, reads = confirm.recheck(state, now, config.error_settle_seconds, config.error_recheck_seconds)
    state, judged = _judge_budgets(state, now, "no error from Vertex within the settle bound")
    return state, actions + (judged if state.phase.terminal else reads)


def _judge_budgets(state: JobState, now: float, why: str, *, attempt: int | None = None) -> Outcome:
    """After an ending's record changed later (confirm.py): the budgets it now spends may end the
    job. Never a new attempt; a live one is cancelled when the job fails. A cancel asked for wins:
    such a job ends cancelled, not failed."""
    if state.phase.terminal or state.cancel_requested:
        return state, []
    if state.failures > state.policy.max_failures:
        reason = f"failure budget exhausted ({state.failures} failures, maxFailures={state.policy.max_failures}; {why})"
        kind = "job_failed"
    elif state.no_progress_streak >= state.policy.crash_loop_attempts:
        reason = (
            f"{state.no_progress_streak} consecutive attempts ended without checkpoint progress "
            f"(crashLoopAttempts={state.policy.crash_loop_attempts}; {why})"
        )
        kind = "crash_loop"
    else:
        return state, []
    current = state.current
    live = current is not None and not current.ended and current.vertex_name is not None
    state, actions = _fail(state, kind, reason, now)
    if attempt is not None:  # the alert names the attempt whose ending was corrected
        actions = [
            replace(a, details={**a.details, "attempt": attempt}) if isinstance(a, RaiseAlert) else a
            for a in actions
        ]
    if live and current is not None and current.vertex_name is not None:
        actions.append(CancelVertexJob(current.vertex_name, current.number))
    return state, actions


def _on_cancel(
    state: JobState, event: ev.CancelRequested, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    if state.cancel_requested:
        return state, []
    state = replace(state, cancel_requested=True)
    if state.phase in (Phase.ACCEPTED, Phase.BACKING_OFF):
        return _terminal(replace(state, next_attempt_at=None), Phase.CANCELLED, "cancelled by request")
    current = _current(state)
    state = replace(state, phase=Phase.CANCELLING, next_attempt_at=None)
    if current.vertex_name is None:
        return state, [_submit_action(current, create=False)]
    return state, [CancelVertexJob(current.vertex_name, current.number)]


_HANDLERS: dict[type, Callable[..., Outcome]] = {
    ev.RequestAccepted: _on_request_accepted,
    ev.AttemptSubmitted: _on_attempt_submitted,
    ev.AttemptNotFound: _on_attempt_not_found,
    ev.SubmitFailed: _on_submit_failed,
    ev.VertexObserved: _on_vertex_observed,
    ev.VertexJobMissing: _on_vertex_job_missing,
    ev.CheckpointObserved: _on_checkpoint_observed,
    ev.RestartsObserved: _on_restarts_observed,
    ev.TimerFired: _on_timer_and_confirmations,
    ev.CancelRequested: _on_cancel,
}


# --- the restart policy at an attempt's end --------------------------------------------------


def _observation(state: JobState, event: ev.VertexObserved, attempt: Attempt | None = None) -> Observation:
    current = attempt or _current(state)
    committed = [s for s in (state.latest_checkpoint_step, event.exit_committed_step) if s is not None]
    return Observation(
        event.vertex_state,
        event.error_code,
        event.error_message,
        event.exit_reason,
        spot=event.spot,
        ran=current.started_at is not None or event.start_time is not None,
        replica_exits=event.replica_exits,
        committed_step=max(committed) if committed else None,
        final_step=event.final_step if event.final_step is not None else state.final_step,
    )


def _training_started(event: ev.VertexObserved) -> bool:
    """The trainer got past start-up: its chief or a replica recorded a step."""
    return event.exit_step is not None or any(r.step is not None for r in event.replica_exits)


def _settle_unexplained_failure(
    state: JobState, event: ev.VertexObserved, now: float, config: CoreConfig
) -> Outcome | None:
    """Hold back the classification of a FAILED job whose `error` is not set yet (and whose
    trainer left no decisive record), reading it again until `error_settle_seconds` after it was
    first seen so; after that, classify with what there is. None: classify now."""
    if state.cancel_requested or not needs_vertex_error(_observation(state, event)):
        return None
    first_seen = _current(state).failed_unexplained_at
    if first_seen is None:
        first_seen = now
        state = state.with_current(
            failed_unexplained_at=now,
            vertex_state=event.vertex_state,
            vertex_ended_at=event.end_time or now,
            decision_due_at=now + config.error_settle_seconds,
        )
    due = first_seen + config.error_settle_seconds
    if now >= due:
        return None
    return state, [ScheduleWakeup(min(due, now + config.error_recheck_seconds))]


@dataclass(frozen=True)
class _Ended:
    """One ending, as the named actions below read it."""

    event: ev.VertexObserved
    verdict: Classification
    evidence: str  # what the trainer's records say failed ("" when nothing)
    made_progress: bool  # the checkpoint moved past this attempt's resume point
    unknown: bool  # the checkpoint root was unreadable and no progress was seen
    ran: bool  # the attempt reached RUNNING
    number: int


def _end_attempt(
    state: JobState, event: ev.VertexObserved, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    current = _current(state)
    observation = _observation(state, event)
    verdict = classify(observation)
    evidence = confirm.describe(event.replica_exits, observation.own_failure(), state.job_id, current.number)
    made_progress = state.latest_checkpoint_step is not None and (
        current.resume_from_step is None or state.latest_checkpoint_step > current.resume_from_step
    )
    # With the checkpoint root unreadable, "no progress seen" proves nothing: the crash-loop
    # streak is left as it was (neither reset nor grown), so a healthy job whose bucket the
    # controller cannot read is never stopped for it. maxFailures still bounds real failures.
    unknown = event.progress_unknown and not made_progress
    state = state.with_current(
        vertex_state=event.vertex_state,
        ending=verdict.ending,
        rule=verdict.rule,
        ended_at=event.end_time or now,
        error_code=event.error_code,
        error_message=event.error_message,
        checkpoint_step_at_end=state.latest_checkpoint_step,
        progress_unknown=unknown,
        started_at=current.started_at or event.start_time,
        provisional=provisional(observation) and not state.cancel_requested,
        evidence=evidence,
    )
    state = replace(state, final_step=observation.final_step)
    ended = _Ended(
        event,
        verdict,
        evidence,
        made_progress,
        unknown,
        _current(state).started_at is not None,
        current.number,
    )
    return ENDING_ACTIONS[action_for(state, verdict)](state, ended, now, rng, config)


def action_for(state: JobState, verdict: Classification) -> str:
    """The name of what follows an ending (a row of ENDING_ACTIONS)."""
    if state.cancel_requested:
        return "stop-as-requested"
    if verdict.permanent:
        return "fail-permanently"
    return ACTION_OF_ENDING[verdict.ending]


def _stop_as_requested(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    if ended.verdict.ending is Ending.SUCCEEDED:
        return _terminal(state, Phase.SUCCEEDED, "completed before the cancel took effect")
    return _terminal(state, Phase.CANCELLED, "cancelled by request")


def _finish(state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig) -> Outcome:
    if ended.verdict.rule == "final-checkpoint-committed":
        return _terminal(
            state,
            Phase.SUCCEEDED,
            f"completed (the final step's checkpoint is committed; {ended.verdict.rule})",
        )
    return _terminal(state, Phase.SUCCEEDED, "completed")


def _cancelled_outside(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    state, actions = _terminal(state, Phase.CANCELLED, "cancelled outside Relaunch")
    alert = RaiseAlert(
        "job_cancelled_externally",
        "WARNING",
        f"job {state.job_id} was cancelled outside Relaunch",
        _alert_details(state),
    )
    return state, [alert, *actions]


def _restart_from_scratch_or_fail(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    return _no_usable_checkpoint(state, ended.event, now, rng)


def _streak(state: JobState, ended: _Ended) -> JobState:
    return replace(state, retry_streak=1 if ended.made_progress else state.retry_streak + 1)


def _wait_for_capacity(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    """Refused before it ran: nobody's fault and no progress to judge. The shrink applier first;
    otherwise the first retry at once and repeated stockouts backing off to the capacity retry
    (`core.stockout`). One refused after it ran waits the capacity retry."""
    state = _streak(state, ended)
    message = ended.event.error_message
    if not ended.ran and len(state.placements) > 1:
        return _move_at_once(state, now, None, message)
    if not ended.ran and _smaller_size(state) is not None:
        # Vertex has already waited and said no (its stockout ending): a smaller gang at once.
        since = state.capacity_wait_since if state.capacity_wait_since is not None else now
        state, alerts = _capacity_refused(replace(state, capacity_wait_since=since), now, message)
        state, actions = _start_attempt(state, now, replicas=_smaller_size(state))
        return state, [*alerts, *actions]
    if ended.ran:
        delay = max(state.policy.backoff.delay(state.retry_streak, rng), config.capacity_retry_seconds)
    else:  # a stockout before start: the first retry at once, then backing off (core/stockout.py)
        delay = stockout.wait_seconds(stockout.in_a_row(state.attempts), config.capacity_retry_seconds, rng)
    state, alerts = _capacity_refused(state, now, message)
    wake = _no_later_than_fallback(state, now, now + delay)
    state = replace(state, phase=Phase.BACKING_OFF, next_attempt_at=wake)
    return state, [*alerts, ScheduleWakeup(wake)]


def _no_later_than_fallback(state: JobState, now: float, wake: float) -> float:
    """A wait for capacity ends when the fallback falls due (`core.fallback`): at once, when it
    is due already and no attempt has fallen back yet."""
    if any(a.strategy is not None for a in state.attempts):
        return wake
    due = fallback.due_at(
        state.policy, state.capacity_wait_since if state.capacity_wait_since is not None else now
    )
    return wake if due is None else max(now, min(wake, due))


def _move_at_once(state: JobState, now: float, rule: str | None, message: str) -> Outcome:
    """Refused for capacity or quota before it ran, with other placements listed: the next
    attempt is due now (a wake-up at once, as a reclaim's restart: the same look goes on and
    creates it, after this ending is written), and its placement is chosen with this one marked
    refused (`placement_choice.refused`), so it goes elsewhere at once unless staying is worth
    the wait. `rule`: end the current attempt first (a create refused for quota ends no
    CustomJob)."""
    if rule is not None:
        state = state.with_current(
            ending=Ending.CAPACITY,
            rule=rule,
            ended_at=now,
            error_message=message,
            checkpoint_step_at_end=state.latest_checkpoint_step,
        )
    state, alerts = _capacity_refused(state, now, message)
    state = replace(state, phase=Phase.BACKING_OFF, next_attempt_at=now)
    return state, [*alerts, ScheduleWakeup(now)]


def _restart_not_counted(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    """A preemption: never spends maxFailures (the spot -> on-demand applier in _start_attempt
    reads the count). A reclaim the trainer confirmed is no crash, progress or not. One inferred
    from Vertex's ending alone may be a crash in disguise: without checkpoint progress it counts
    toward the crash-loop limit, but only once training had started: a reclaim during start-up
    says nothing about the program."""
    state = _streak(state, ended)
    counts = ended.verdict.inferred and not ended.unknown and _training_started(ended.event)
    stalled = state.no_progress_streak + 1 if counts else state.no_progress_streak
    state = replace(
        state, preemptions=state.preemptions + 1, no_progress_streak=0 if ended.made_progress else stalled
    )
    if counts and not ended.made_progress:
        state = state.with_current(stalled=True)
    limit = state.policy.max_preemptions
    if limit is not None and state.preemptions > limit:
        return _fail(
            state, "job_failed", f"preempted {state.preemptions} times, more than maxPreemptions={limit}", now
        )
    state, alerts = _preemption_storm_alert(state, now, config)
    # A reclaim after progress is nobody's fault and says nothing about the next attempt: it
    # starts at once. Reclaims in a row without progress back off as failures do.
    return _restart(state, alerts, now, rng, at_once=ended.made_progress)


def _what(state: JobState, ended: _Ended) -> str:
    verdict = f"{ended.verdict.ending.value} ({ended.verdict.rule})"
    event = ended.event
    return confirm.ending_account(
        state.job_id, ended.number, verdict, ended.evidence, event.error_message, event.replica_exits
    )


def _charge(state: JobState, ended: _Ended) -> JobState:
    state = replace(_streak(state, ended), failures=state.failures + 1)
    if (ended.ran or ended.verdict.ending is Ending.USER_ERROR) and not ended.unknown:
        state = replace(state, no_progress_streak=0 if ended.made_progress else state.no_progress_streak + 1)
        state = state.with_current(stalled=not ended.made_progress)
    return state


def _fail_permanently(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    state = _charge(state, ended)
    return _fail(
        state, "job_failed", f"attempt {ended.number} failed permanently: {_what(state, ended)}", now
    )


def _restart_counted(
    state: JobState, ended: _Ended, now: float, rng: random.Random, config: CoreConfig
) -> Outcome:
    """A failure: spends maxFailures, and the job fails once the budget is spent."""
    state = _charge(state, ended)
    if state.failures > state.policy.max_failures:
        return _fail(
            state,
            "job_failed",
            f"failure budget exhausted ({state.failures} failures, "
            f"maxFailures={state.policy.max_failures}); last: {_what(state, ended)}",
            now,
        )
    return _restart(state, [], now, rng)


def _restart(
    state: JobState, alerts: list[Action], now: float, rng: random.Random, *, at_once: bool = False
) -> Outcome:
    """Back off before the next attempt, unless the attempts keep ending without progress."""
    if state.no_progress_streak >= state.policy.crash_loop_attempts:
        return _fail(
            state,
            "crash_loop",
            f"{state.no_progress_streak} consecutive attempts ended without checkpoint "
            f"progress (crashLoopAttempts={state.policy.crash_loop_attempts})",
            now,
        )
    wake = now if at_once else now + state.policy.backoff.delay(state.retry_streak, rng)
    state = replace(state, phase=Phase.BACKING_OFF, next_attempt_at=wake)
    return state, [*alerts, ScheduleWakeup(wake)]


_Apply = Callable[[JobState, _Ended, float, random.Random, CoreConfig], Outcome]

# What follows an ending, as a table of named actions (JobSet's failure policy names its actions
# the same way). The ending picks the action; a cancel asked for, or a permanent verdict, comes
# first (`action_for`). The appliers that shape the next attempt are named too: "shrink" (a
# smaller gang, `_wait_for_capacity` and `_replace_smaller`) and "spot -> on-demand"
# (`_start_attempt`, after onDemandAfterPreemptions).
ACTION_OF_ENDING: dict[Ending, str] = {
    Ending.SUCCEEDED: "finish",
    Ending.CANCELLED: "cancelled-outside",
    Ending.NO_USABLE_CHECKPOINT: "restart-from-scratch-or-fail",
    Ending.CAPACITY: "wait-for-capacity",
    Ending.PREEMPTED: "restart-not-counted",
    Ending.USER_ERROR: "restart-counted",
    Ending.INFRASTRUCTURE: "restart-counted",
    Ending.TIMEOUT: "restart-counted",
}

ENDING_ACTIONS: dict[str, _Apply] = {
    "stop-as-requested": _stop_as_requested,
    "finish": _finish,
    "cancelled-outside": _cancelled_outside,
    "restart-from-scratch-or-fail": _restart_from_scratch_or_fail,
    "wait-for-capacity": _wait_for_capacity,
    "restart-not-counted": _restart_not_counted,
    "restart-counted": _restart_counted,
    "fail-permanently": _fail_permanently,
}


def _no_usable_checkpoint(
    state: JobState, event: ev.VertexObserved, now: float, rng: random.Random
) -> Outcome:
    """The trainer could load no checkpoint under the job's root: work is lost. Never a user error
    and never silent: an alert names the root and the steps lost, and the policy says whether the
    job fails or trains again from step 0 (the trainer has quarantined what it could not load, so
    an attempt without a resume point starts fresh). No failure budget is spent either way."""
    root = event.checkpoint_root or state.latest_checkpoint_uri or "the job's checkpoint root"
    lost = event.steps_lost if event.steps_lost is not None else state.latest_checkpoint_step
    what = f"no usable checkpoint under {root}; the work up to step {lost} is lost"
    if state.policy.on_no_usable_checkpoint != NO_CHECKPOINT_RESTART:
        return _fail(state, "checkpoint_lost", f"{what} (onNoUsableCheckpoint=fail)", now)
    state = replace(state, latest_checkpoint_step=None, latest_checkpoint_uri=None)
    alert = RaiseAlert(
        "checkpoint_lost",
        "ERROR",
        f"job {state.job_id}: {what}; restarting from step 0 (onNoUsableCheckpoint=restartFromScratch)",
        {**_alert_details(state), "checkpointRoot": root, "stepsLost": lost},
    )
    wake = now + state.policy.backoff.delay(1, rng)
    state = replace(state, phase=Phase.BACKING_OFF, next_attempt_at=wake)
    return state, [alert, ScheduleWakeup(wake)]


# --- helpers ---------------------------------------------------------------------------------


def _attempt(state: JobState, number: int) -> Attempt | None:
    """The current attempt when it is attempt `number`; None for any other (stale, future)."""
    current = state.current
    return current if current is not None and current.number == number else None


def _current(state: JobState) -> Attempt:
    """The current attempt, in a phase that always has one (submitting, queued, running,
    backing off, cancelling after a submission)."""
    current = state.current
    if current is None:
        raise ValueError(f"job {state.job_id} in phase {state.phase.value} has no attempt")
    return current


def _start_attempt(state: JobState, now: float, replicas: elastic.Size | None = None) -> Outcome:
    final = state.final_step
    if (
        final is not None
        and state.latest_checkpoint_step is not None
        and state.latest_checkpoint_step >= final
    ):
        # The final step's checkpoint is committed: an attempt would train 0 steps.
        return _terminal(
            state, Phase.SUCCEEDED, f"completed (checkpoint of the final step {final} committed)"
        )
    switch_after = state.policy.on_demand_after_preemptions
    attempt = Attempt(
        number=len(state.attempts) + 1,
        resume_from_step=state.latest_checkpoint_step,
        resume_from_uri=state.latest_checkpoint_uri,
        on_demand=switch_after is not None and state.preemptions >= switch_after,
        intent_at=now,
        replicas=replicas if replicas is not None else _next_size(state, now),
        strategy=fallback.strategy(state.policy, state.attempts, state.capacity_wait_since, now),
    )
    state = replace(state, attempts=state.attempts + (attempt,), phase=Phase.SUBMITTING, next_attempt_at=None)
    return state, [_submit_action(attempt, create=True, new=True)]


def _submit_action(attempt: Attempt, *, create: bool, new: bool = False) -> SubmitAttempt:
    return SubmitAttempt(
        attempt.number,
        attempt.resume_from_uri,
        attempt.resume_from_step,
        attempt.on_demand,
        create_if_missing=create,
        replicas=attempt.replicas,
        strategy=attempt.strategy,
        new_attempt=new,
    )


# --- shrink to fit (controller/core/elastic.py says when and why) ----------------------------


def _size(state: JobState, attempt: Attempt) -> elastic.Size | None:
    if state.elastic is None:
        return None
    return attempt.replicas if attempt.replicas is not None else state.elastic.full


def _smaller_size(state: JobState) -> elastic.Size | None:
    """The size to try instead of the current attempt's; None when it cannot shrink."""
    current = state.current
    if state.elastic is None or current is None or state.cancel_requested:
        return None
    size = _size(state, current)
    return None if size is None else elastic.smaller(state.elastic, size)


def _shrunk_since(state: JobState) -> float | None:
    """When the trailing run of shrunk attempts began (the job's latest shrink), or None."""
    since = None
    for attempt in reversed(state.attempts):
        if not elastic.is_shrunk(state.elastic, _size(state, attempt)):
            break
        since = attempt.intent_at
    return since


def _next_size(state: JobState, now: float) -> elastic.Size | None:
    """The size of a new attempt that follows the current one in the ordinary way (a backoff
    after a reclaim or a failure; the first attempt): full, unless the job is shrunk and the
    grow-back policy says not yet."""
    policy = state.elastic
    if policy is None:
        return None
    previous = state.current
    if previous is None:
        return policy.full
    size = _size(state, previous) or policy.full
    if previous.started_at is None:
        return size  # it never ran: nothing says the capacity is back
    return elastic.regrown(policy, size, _shrunk_since(state), now)


def _shrink_due(state: JobState, waiting_since: float, now: float) -> bool:
    return state.elastic is not None and now - waiting_since >= state.elastic.shrink_after_seconds


def _waited_too_long(state: JobState, now: float) -> bool:
    """The current attempt sits in Vertex's queue (QUEUED or PENDING) past shrinkAfter."""
    current = state.current
    return (
        state.phase is Phase.QUEUED
        and current is not None
        and current.submitted_at is not None
        and current.started_at is None
        and not current.ended
        and _smaller_size(state) is not None
        and _shrink_due(state, current.submitted_at, now)
    )


def _shrink_check_wakeup(state: JobState) -> list[Action]:
    """A wake-up when the queued attempt's shrinkAfter runs out (the reconcile pass would notice
    too, a pass later)."""
    current = state.current
    if (
        state.elastic is None
        or state.phase is not Phase.QUEUED
        or current is None
        or current.submitted_at is None
        or current.started_at is not None
        or _smaller_size(state) is None
    ):
        return []
    return [ScheduleWakeup(current.submitted_at + state.elastic.shrink_after_seconds)]


def _replace_smaller(state: JobState, now: float, why: str) -> Outcome:
    """End the current (never-run) attempt and start the next one at the smaller size, in one
    state write: the intent is recorded before the old CustomJob is cancelled and the new one
    created. A crash after the write leaves an ended attempt whose live CustomJob the next
    observation cancels as a stray, and a new attempt whose CustomJob is adopted by its labels."""
    current = _current(state)
    smaller = _smaller_size(state)
    assert smaller is not None and state.elastic is not None
    waited_from = current.submitted_at if current.submitted_at is not None else current.intent_at
    since = state.capacity_wait_since if state.capacity_wait_since is not None else waited_from
    state = state.with_current(
        ending=Ending.CAPACITY,
        rule="replaced-by-smaller",
        ended_at=now,
        error_message=f"{why} {now - waited_from:.0f}s (shrinkAfter "
        f"{state.elastic.shrink_after_seconds:.0f}s); replaced by {elastic.describe(smaller)}",
        checkpoint_step_at_end=state.latest_checkpoint_step,
    )
    state = replace(state, capacity_wait_since=since)
    actions: list[Action] = []
    if current.vertex_name is not None:
        actions.append(CancelVertexJob(current.vertex_name, current.number))
    state, submit = _start_attempt(state, now, replicas=smaller)
    return state, actions + submit


def _running_shrunk_alert(state: JobState, now: float) -> Outcome:
    """Ops hear once per shrink, when the smaller gang starts running (not when it is only asked
    for): the job trains, but slower than requested. Growing back resolves it (the shell)."""
    current = _current(state)
    size = _size(state, current)
    since = _shrunk_since(state)
    policy = state.elastic
    if policy is None or size is None or since is None:
        return state, []
    kind = f"running_shrunk:since-{since:.3f}"
    if _has_alerted(state, kind):
        return state, []
    state = _record_alert(state, kind, now)
    alert = RaiseAlert(
        "running_shrunk",
        "WARNING",
        f"job {state.job_id} attempt {current.number} runs shrunk on {elastic.describe(size)} of "
        f"{elastic.nodes(policy.full)} requested: not enough capacity for the full size",
        {
            **_alert_details(state),
            "replicas": list(size),
            "requestedReplicas": list(policy.full),
        },
    )
    return state, [alert]


def _terminal(state: JobState, phase: Phase, reason: str) -> Outcome:
    state = replace(state, phase=phase, terminal_reason=reason, next_attempt_at=None)
    return state, [MarkTerminal(phase.value, reason)]


def _fail(state: JobState, kind: str, reason: str, now: float) -> Outcome:
    state, actions = _terminal(state, Phase.FAILED, reason)
    state = _record_alert(state, kind, now)
    alert = RaiseAlert(kind, "ERROR", f"job {state.job_id} failed: {reason}", _alert_details(state))
    return state, [alert, *actions]


def _has_alerted(state: JobState, kind: str) -> bool:
    return any(a.kind == kind for a in state.alerts)


def _record_alert(state: JobState, kind: str, now: float) -> JobState:
    """Remember that `kind` was raised, so that the alert is sent once (see _has_alerted)."""
    return replace(state, alerts=state.alerts + (Alerted(kind, now),))


def _alert_details(state: JobState) -> dict[str, Any]:
    current = state.current
    return {
        "jobId": state.job_id,
        "attempt": current.number if current else 0,
        "vertexJob": current.vertex_name if current else None,
        "failures": state.failures,
        "preemptions": state.preemptions,
        "latestCheckpointStep": state.latest_checkpoint_step,
    }


def _cancel_if_stray(event: ev.Event) -> list[Action]:
    """A live Vertex job that is not the current attempt's must not keep running."""
    if isinstance(event, ev.VertexObserved) and vertex_is_live(event.vertex_state):
        return [CancelVertexJob(event.vertex_name, event.attempt)]
    if isinstance(event, ev.AttemptSubmitted):
        return [CancelVertexJob(event.vertex_name, event.attempt)]
    return []


def _capacity_wait_alert(state: JobState, now: float, config: CoreConfig) -> Outcome:
    current = state.current
    if state.phase is not Phase.QUEUED or current is None or current.submitted_at is None:
        return state, []
    kind = f"capacity_wait:attempt-{current.number}"
    waited = now - current.submitted_at
    if waited < config.capacity_wait_alert_seconds or _has_alerted(state, kind):
        return state, []
    state = _record_alert(state, kind, now)
    alert = RaiseAlert(
        "capacity_wait",
        "WARNING",
        f"job {state.job_id} attempt {current.number} has waited {waited:.0f}s for capacity",
        {**_alert_details(state), "waitedSeconds": waited},
    )
    return state, [alert]


def _capacity_refused(state: JobState, now: float, message: str) -> Outcome:
    """A create refused for quota, or an attempt that ended for lack of capacity before it ran:
    warn once per run of such refusals (the wait may need a quota increase or another region);
    `capacity_wait` resolves when an attempt runs."""
    since = state.capacity_wait_since if state.capacity_wait_since is not None else now
    state = replace(state, capacity_wait_since=since)
    kind = f"capacity_wait:since-{since:.3f}"
    if _has_alerted(state, kind):
        return state, []
    state = _record_alert(state, kind, now)
    alert = RaiseAlert(
        "capacity_wait",
        "WARNING",
        f"job {state.job_id}: Vertex AI has no capacity or quota for it: {message}".strip(),
        {**_alert_details(state), "waitingSince": since},
    )
    return state, [alert]


def _preemption_storm_alert(state: JobState, now: float, config: CoreConfig) -> Outcome:
    window_start = now - config.preemption_storm_window_seconds
    recent = sum(
        1 for a in state.attempts if a.ending is Ending.PREEMPTED and (a.ended_at or now) >= window_start
    ) + sum(  # restarts in place are reclaims too
        1
        for a in state.attempts
        for r in a.restarts
        if r.counted_as == restarts.COUNTED_PREEMPTION and r.at >= window_start
    )
    already = any(a.kind == "preemption_storm" and a.at >= window_start for a in state.alerts)
    if recent < config.preemption_storm_count or already:
        return state, []
    state = _record_alert(state, "preemption_storm", now)
    alert = RaiseAlert(
        "preemption_storm",
        "WARNING",
        f"job {state.job_id} was preempted {recent} times in the last "
        f"{config.preemption_storm_window_seconds:.0f}s",
        {**_alert_details(state), "recentPreemptions": recent},
    )
    return state, [alert]
