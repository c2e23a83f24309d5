"""The user-facing read model of a job: its status document and its timeline.

Pure functions over stored job records (`controller.jobrecord.JobRecord`, or the documents it reads);
the HTTP API, the CLI and the report read jobs only through here, so they never need the engine
or a Google client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controller.core import elastic
from controller.core import events as ev
from controller.core.actions import Action
from controller.core.model import JobState, Phase
from controller.jobrecord import JobRecord

# A stored job document, a status document, a timeline entry: plain JSON objects.
Json = dict[str, Any]

# A job's timeline keeps its newest entries; older ones are dropped to bound the document.
TIMELINE_LIMIT = 500


def entry(now: float, attempt: int, what: str, **extra: Any) -> Json:
    return {"time": now, "attempt": attempt, "what": what, **extra}


def _newly_set(old: JobState, new: JobState, field: str) -> Any:
    """The current attempt's `field` when this transition set it (None before, or a new attempt);
    None otherwise."""
    value = getattr(new.current, field) if new.current else None
    same = old.current is not None and new.current is not None and old.current.number == new.current.number
    was = getattr(old.current, field) if same else None
    return value if was is None else None


def transition_entries(
    old: JobState, new: JobState, event: ev.Event, actions: Iterable[Action], now: float
) -> list[Json]:
    """Timeline entries a person would want to read for one stored transition."""
    entries = []
    attempt = new.current.number if new.current else 0
    if new.latest_checkpoint_step != old.latest_checkpoint_step:
        entries.append(
            entry(
                now,
                attempt,
                f"checkpoint at step {new.latest_checkpoint_step} committed",
                step=new.latest_checkpoint_step,
                uri=new.latest_checkpoint_uri,
            )
        )
    if len(new.attempts) > len(old.attempts) and new.current is not None:
        current = new.current
        where = (
            f"from checkpoint step {current.resume_from_step}"
            if current.resume_from_step is not None
            else "from scratch"
        )
        # With placements the strategy is the placement's: the "placed on" entry says which.
        spot = "" if current.placement else (" (on-demand)" if current.on_demand else " (spot)")
        if current.strategy is not None and not current.on_demand and not current.placement:
            spot = f" ({current.strategy}, the fallback after a stockout)"
        size = ""
        if new.elastic is not None and current.replicas is not None:
            size = f" on {elastic.describe(current.replicas)}"
            if current.replicas != new.elastic.full:
                size += f", shrunk from {elastic.nodes(new.elastic.full)}"
        entries.append(
            entry(
                now,
                attempt,
                f"attempt {attempt} requested {where}{spot}{size}",
                resumeFromStep=current.resume_from_step,
                **({"replicas": list(current.replicas)} if current.replicas is not None else {}),
            )
        )
    chosen = _newly_set(old, new, "checkpoint_interval")
    if chosen is not None:
        entries.append(
            entry(
                now,
                attempt,
                f"attempt {attempt} checkpoint interval {float(chosen['seconds']):.1f} s (auto)",
                checkpointInterval=chosen["seconds"],
                explanation=chosen.get("explanation", ""),
            )
        )
    placed = _newly_set(old, new, "placement")
    if placed is not None:
        # The choice and every figure it compared (`controller.core.placement.Choice`).
        entries.append(
            entry(
                now,
                attempt,
                f"attempt {attempt} placed on {placed['chosen']}: {placed['reason']}",
                placement=placed["chosen"],
                objective=placed["objective"],
                figures=placed["figures"],
            )
        )
    if new.current and old.current and new.current.number == old.current.number:
        if new.current.vertex_name and not old.current.vertex_name:
            entries.append(entry(now, attempt, f"attempt {attempt} submitted as {new.current.vertex_name}"))
        if new.current.started_at and not old.current.started_at:
            entries.append(
                entry(new.current.started_at, attempt, f"attempt {attempt} running{_size_note(new)}")
            )
        c = new.current
        if c.ended and c.ending is not None and not old.current.ended:
            entries.append(
                entry(
                    c.ended_at or now,
                    attempt,
                    f"attempt {attempt} ended: {c.ending.value} ({c.rule})"
                    + ("; progress unknown (checkpoint root unreadable)" if c.progress_unknown else ""),
                    ending=c.ending.value,
                    error=c.error_message,
                    checkpointStep=c.checkpoint_step_at_end,
                )
            )
    entries += _corrections(old, new, now)
    entries += _restarts_in_place(old, new)
    entries += _held_back(old, new, now)
    if (
        new.phase is Phase.BACKING_OFF
        and old.phase is not Phase.BACKING_OFF
        and new.next_attempt_at is not None
    ):
        entries.append(
            entry(
                now,
                attempt,
                f"backing off {new.next_attempt_at - now:.1f}s before the next attempt",
                nextAttemptAt=new.next_attempt_at,
            )
        )
    if new.cancel_requested and not old.cancel_requested:
        entries.append(entry(now, attempt, "cancel requested"))
    if new.phase.terminal and not old.phase.terminal:
        entries.append(entry(now, attempt, f"job {new.phase.value}: {new.terminal_reason}"))
    elif new.phase.terminal and new.terminal_reason != old.terminal_reason:  # core/confirm.refine_finished
        entries.append(
            entry(
                now,
                attempt,
                f"job {new.phase.value}; reason refined by Vertex's error: {new.terminal_reason}",
            )
        )
    return entries


def _corrections(old: JobState, new: JobState, now: float) -> list[Json]:
    """An ending decided before Vertex's error, which the error then changed (core/confirm.py)."""
    before = {a.number: a for a in old.attempts}
    out = []
    for a in new.attempts:
        was = before.get(a.number)
        if was is None or was.ending is None or a.ending is None or was.ending == a.ending:
            continue
        out.append(
            entry(
                now,
                a.number,
                f"attempt {a.number}'s ending corrected by Vertex's error: {was.ending.value} ({was.rule}) "
                f"-> {a.ending.value} ({a.rule}); now {new.preemptions} preemptions, "
                f"{new.failures} failures",
                ending=a.ending.value,
                correctedFrom=was.ending.value,
                error=a.error_message,
            )
        )
    return out


def _restarts_in_place(old: JobState, new: JobState) -> list[Json]:
    """Each restart of an attempt's CustomJob in place, once, when it is counted (core/restarts.py)."""
    before = {a.number: len(a.restarts) for a in old.attempts}
    out = []
    for a in new.attempts:
        for restart in a.restarts[before.get(a.number, 0) :]:
            out.append(
                entry(
                    restart.at,
                    a.number,
                    f"attempt {a.number} {restart.describe()}; now {new.preemptions} preemptions, "
                    f"{new.failures} failures",
                    restart=restart.to_dict(),
                    countedAs=restart.counted_as,
                )
            )
    return out


def _held_back(old: JobState, new: JobState, now: float) -> list[Json]:
    """An ending held back for Vertex's error (core/decide.py `_settle_unexplained_failure`)."""
    c, was = new.current, old.current
    if c is None or c.decision_due_at is None or (was is not None and was.decision_due_at is not None):
        return []
    return [
        entry(
            c.vertex_ended_at or now,
            c.number,
            f"attempt {c.number} ended {c.vertex_state or 'FAILED'}; deciding how once Vertex sets its "
            f"error, at most {max(0.0, c.decision_due_at - now):.0f}s from now",
            decisionDueAt=c.decision_due_at,
        )
    ]


def pending_note(view: Json, now: float) -> str | None:
    """Between an attempt's end and its decision (Vertex's error awaited, core/decide.py
    `_settle_unexplained_failure`): what the phase shows, with the time left; None otherwise."""
    attempts = view.get("attempts") or []
    last = attempts[-1] if attempts else None
    if last is None or last.get("ending") or last.get("decisionDueAt") is None:
        return None
    left = max(0.0, float(last["decisionDueAt"]) - now)
    return (
        f"attempt {last['number']} ended {last.get('vertexState') or 'FAILED'}; deciding how "
        f"(Vertex's error awaited, at most {left:.0f}s more)"
    )


def _size_note(state: JobState) -> str:
    """' shrunk to 2 of 4 replicas' / ' grown back to 4 replicas' for an elastic job's start."""
    policy, current = state.elastic, state.current
    if policy is None or current is None or current.replicas is None:
        return ""
    if current.replicas != policy.full:
        return f" shrunk to {elastic.nodes(current.replicas)} of {elastic.nodes(policy.full)} replicas"
    ran_shrunk = any(
        a.started_at is not None and a.replicas is not None and a.replicas != policy.full
        for a in state.attempts[:-1]
    )
    return f" grown back to {elastic.nodes(policy.full)} replicas" if ran_shrunk else ""


def requested_replicas(record: JobRecord) -> list[int]:
    """replicaCount of each pool as the request wrote it (0 for an empty pool)."""
    pools = (record.request.get("jobSpec") or {}).get("workerPoolSpecs") or []
    return [int(pool.get("replicaCount", 0) or 0) if isinstance(pool, dict) else 0 for pool in pools]


def status_document(document: Json | JobRecord, *, with_timeline: bool = True) -> Json:
    """The JSON a user sees for one job (HTTP API, `relaunch status`), from its stored record."""
    record = document if isinstance(document, JobRecord) else JobRecord.from_dict(document)
    state = record.state
    current = state.current
    requested = requested_replicas(record)
    choices = record.interval_choices
    out = {
        "jobId": state.job_id,
        "displayName": record.request.get("displayName"),
        "phase": state.phase.value,
        "attempt": current.number if current else 0,
        "preemptions": state.preemptions,
        "failures": state.failures,
        "latestCheckpointStep": state.latest_checkpoint_step,
        "latestCheckpointUri": state.latest_checkpoint_uri,
        "nextAttemptAt": state.next_attempt_at,
        "createdAt": state.created_at,
        "updatedAt": state.updated_at,
        "terminalReason": state.terminal_reason,
        "checkpointUri": record.request["checkpoint"]["uri"],
        "requestedReplicas": requested,
        "elastic": _elastic_view(state),
        "attempts": [
            {
                "number": a.number,
                "vertexJob": a.vertex_name,
                "vertexState": a.vertex_state,
                "onDemand": a.on_demand,
                "resumeFromStep": a.resume_from_step,
                "requestedAt": a.intent_at,
                "submittedAt": a.submitted_at,
                "startedAt": a.started_at,
                "endedAt": a.ended_at,
                "ending": a.ending.value if a.ending is not None else None,
                "rule": a.rule,
                "errorCode": a.error_code,
                "errorMessage": a.error_message,
                "checkpointStepAtEnd": a.checkpoint_step_at_end,
                "checkpointInterval": _interval_of(record, choices.get(str(a.number))),
                "trainerFigures": record.trainer_figures.get(str(a.number)),
                "progressUnknown": a.progress_unknown,
                # What the trainer's records say failed (replica, code, step, exception, the logs
                # command), and whether Vertex's error may still correct the ending.
                "evidence": a.evidence,
                "provisional": a.provisional,
                # Replicas per pool this attempt asked for (the request's unless it was shrunk).
                "replicas": list(a.replicas or requested),
                "shrunk": a.replicas is not None and list(a.replicas) != requested,
                # Restarts of its CustomJob in place (core/restarts.py), each counted once.
                "restarts": [r.to_dict() for r in a.restarts],
                "strategy": a.strategy,
                "vertexEndedAt": a.vertex_ended_at,
                "decisionDueAt": a.decision_due_at,
                # Where it runs and why (a job with placements): the name chosen, the reason
                # and the figures compared (`controller.core.placement.Choice`).
                "placement": a.placement,
            }
            for a in state.attempts
        ],
    }
    if with_timeline:
        out["timeline"] = [with_kind(item) for item in record.timeline]
    return out


def _elastic_view(state: JobState) -> Json | None:
    policy = state.elastic
    if policy is None:
        return None
    return {
        "minReplicas": list(policy.minimum),
        "shrinkAfterSeconds": policy.shrink_after_seconds,
        "growBack": policy.grow_back,
        "growBackAfterSeconds": policy.grow_back_after_seconds,
    }


def _interval_of(record: JobRecord, chosen: Json | None) -> Json | None:
    """The checkpoint interval an attempt was given: the controller's recorded choice (`auto`),
    the request's fixed seconds, or None when the request leaves it to the trainer's flags."""
    if chosen is not None:
        return dict(chosen)
    setting = record.interval_setting
    if isinstance(setting, (int, float)) and not isinstance(setting, bool):
        return {"seconds": float(setting), "mode": "fixed", "explanation": "fixed by the request"}
    return None


# What kind of thing a timeline entry records, for scripts (`relaunch events --json`): read from
# the entry's own fields, so that entries stored before kinds existed get one too.
EVENT_KINDS = (
    "accepted",
    "attempt-requested",
    "attempt-submitted",
    "attempt-running",
    "attempt-ended",
    "checkpoint",
    "checkpoint-interval",
    "backing-off",
    "cancel-requested",
    "job-ended",
    "note",
)


def event_kind(item: Json) -> str:
    what = str(item.get("what", ""))
    if "ending" in item:
        return "attempt-ended"
    if "step" in item and what.startswith("checkpoint"):
        return "checkpoint"
    if "checkpointInterval" in item:
        return "checkpoint-interval"
    if "nextAttemptAt" in item:
        return "backing-off"
    if what == "request accepted":
        return "accepted"
    if what == "cancel requested":
        return "cancel-requested"
    if what.startswith(("job ", "cancelled:")):
        return "job-ended"
    if what.startswith("attempt "):
        for marker, kind in ((" requested ", "attempt-requested"), (" submitted as ", "attempt-submitted")):
            if marker in what:
                return kind
        if " running" in what:
            return "attempt-running"
    return "note"


def with_kind(item: Json) -> Json:
    return {**item, "kind": item.get("kind") or event_kind(item)}
