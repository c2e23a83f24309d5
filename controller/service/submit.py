"""Carrying out one SubmitAttempt: adopt the attempt's CustomJob, or create it.

Called by the reconcile of the job that wants it, holding the create slot the Vertex adapter's
lane gave it (or none, for a look-up that never creates). The outcome comes back as events for
the core (AttemptSubmitted, AttemptNotFound, SubmitFailed); nothing here writes job state. The
attempt's checkpoint interval comes with the action (the core chose it and the reconcile stored
it with the intent), so a retried submission renders the same value.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters.create_lane import CreateLane
from controller.adapters.vertex import CreateQuotaExceeded, SubmitRejected, VertexBackend
from controller.core import events as ev
from controller.core.actions import SubmitAttempt
from controller.core.model import JobState, Phase
from controller.request import JobRequest
from controller.request.aiplatform import aiplatform_v1
from controller.request.render import build_custom_job, placement_named

log = logs.get("relaunch.submit")


def ready_at(state: JobState) -> float:
    """When the job became ready to submit: the end of the attempt it replaces (the
    preemption), else the first attempt's intent. The create lane serves oldest first."""
    if len(state.attempts) > 1 and state.attempts[-2].ended_at is not None:
        return state.attempts[-2].ended_at
    current = state.current
    return current.intent_at if current is not None else state.created_at


def submit(
    state: JobState,
    request: JobRequest,
    action: SubmitAttempt,
    *,
    vertex: VertexBackend,
    guard: Callable[[str], float],
    clock: Callable[[], float],
    metrics: Any | None,
    slot_taken: bool,
) -> list[ev.Event]:
    job_id = state.job_id
    bound = log.bind(job_id=job_id, attempt=action.attempt)
    # The attempt's placement (recorded with its intent): where it is looked up and created.
    placement = placement_named(request, action.placement)

    def build() -> aiplatform_v1.CustomJob:
        return build_custom_job(
            request,
            action.attempt,
            resume_from=action.resume_from_uri,
            on_demand=action.on_demand,
            checkpoint_interval_seconds=action.checkpoint_interval_seconds,
            replicas=action.replicas,
            strategy=action.strategy,
            placement=placement,
        )

    crash_point("after-intent")
    try:
        submission = vertex.ensure_attempt(
            job_id,
            action.attempt,
            build,
            create=action.create_if_missing,
            guard=guard,
            slot_taken=slot_taken,
            region=placement.region if placement is not None else None,
            look_up=not (action.new_attempt and action.create_if_missing),
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
        crash_point("after-create")
        if metrics is not None:
            metrics.attempt_submitted()
            previous = state.attempts[-2] if len(state.attempts) > 1 else None
            if previous is not None and previous.ended_at is not None:
                metrics.recovered(max(0.0, clock() - previous.ended_at))
        bound.info(
            "attempt submitted",
            vertex_job=submission.job.name,
            resume_from=action.resume_from_uri,
            on_demand=action.on_demand,
            replicas=list(action.replicas) if action.replicas is not None else None,
            placement=action.placement,
        )
    else:
        bound.info("adopted existing vertex job", vertex_job=submission.job.name)
    return [
        ev.AttemptSubmitted(action.attempt, name) for name in (submission.job.name, *submission.duplicates)
    ]


def crash_point(name: str) -> None:
    """Fault injection for the crash-safety tests: die here, as `kill -9` would.

    `RELAUNCH_FAULT_CRASH_POINT=after-intent` kills the process after the attempt's intent is
    stored and before CreateCustomJob; `after-create` right after CreateCustomJob returned and
    before its result is stored; `after-terminal-write` after a job's terminal state is stored and
    before its last ending reaches the checkpoint interval's ledger. Unset in production.
    """
    if os.environ.get("RELAUNCH_FAULT_CRASH_POINT") == name:
        log.warning("fault injection: crashing", crash_point=name)
        os.kill(os.getpid(), signal.SIGKILL)


def first_create_wait(state: JobState, facts: list[ev.Event], lane: CreateLane) -> float:
    """For a job never submitted, with nothing new to decide on: the seconds until its turn in the
    create lane (0.0: decide now). Until its turn it has nothing to record, since its first
    attempt's intent is written when the turn comes, before the create; so a backlog of new jobs
    costs no decision and no write per job while it waits."""
    if state.phase is not Phase.ACCEPTED or state.attempts or state.cancel_requested:
        return 0.0
    if any(not isinstance(fact, ev.TimerFired) for fact in facts):
        return 0.0
    return lane.turn_in(state.job_id, ready_at(state))
