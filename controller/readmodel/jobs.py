"""The user-facing read model of a job: its status document and its timeline.

Pure functions over stored job documents (`{"request", "fingerprint", "state", "timeline"}`);
the HTTP API, the CLI and the report read jobs only through here, so they never need the engine
or a Google client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controller.core import events as ev
from controller.core.actions import Action
from controller.core.model import JobState, Phase

# A stored job document, a status document, a timeline entry: plain JSON objects.
Json = dict[str, Any]

# A job's timeline keeps its newest entries; older ones are dropped to bound the document.
TIMELINE_LIMIT = 500
# Where a job document keeps the checkpoint interval chosen for each attempt of an `auto`
# request: {"<attempt>": IntervalDecision.to_dict()} (written by controller.service.interval).
INTERVALS_FIELD = "checkpointIntervals"
# The trainer's own figures of each ended attempt, from its exit record and commit markers:
# {"<attempt>": {"stepAtEnd", "lastCommittedStep", "checkpointSaved", "stallSeconds",
# "checkpoints"}} (written by controller.service.interval; read by goodput).
TRAINER_FIGURES_FIELD = "trainerFigures"


def entry(now: float, attempt: int, what: str, **extra: Any) -> Json:
    return {"time": now, "attempt": attempt, "what": what, **extra}


def append_timeline(document: Json, entries: list[Json]) -> list[Json]:
    return (list(document.get("timeline", [])) + entries)[-TIMELINE_LIMIT:]


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
        spot = "on-demand" if current.on_demand else "spot"
        entries.append(
            entry(
                now,
                attempt,
                f"attempt {attempt} requested {where} ({spot})",
                resumeFromStep=current.resume_from_step,
            )
        )
    if new.current and old.current and new.current.number == old.current.number:
        if new.current.vertex_name and not old.current.vertex_name:
            entries.append(entry(now, attempt, f"attempt {attempt} submitted as {new.current.vertex_name}"))
        if new.current.started_at and not old.current.started_at:
            entries.append(entry(new.current.started_at, attempt, f"attempt {attempt} running"))
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
    return entries


def status_document(document: Json, *, with_timeline: bool = True) -> Json:
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
                "checkpointInterval": _interval_of(document, a["number"]),
                "trainerFigures": (document.get(TRAINER_FIGURES_FIELD) or {}).get(str(a["number"])),
                "progressUnknown": a.get("progress_unknown", False),
            }
            for a in attempts
        ],
    }
    if with_timeline:
        out["timeline"] = document.get("timeline", [])
    return out


def _interval_of(document: Json, attempt: int) -> Json | None:
    """The checkpoint interval an attempt was given: the controller's recorded choice (`auto`),
    the request's fixed seconds, or None when the request leaves it to the trainer's flags."""
    chosen = (document.get(INTERVALS_FIELD) or {}).get(str(attempt))
    if chosen is not None:
        return dict(chosen)
    setting = document["request"].get("checkpoint", {}).get("interval")
    if isinstance(setting, (int, float)) and not isinstance(setting, bool):
        return {"seconds": float(setting), "mode": "fixed", "explanation": "fixed by the request"}
    return None
