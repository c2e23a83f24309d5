"""Vertex's late error confirms or corrects an ending decided at once.

Vertex sets a failed CustomJob's `error` about a minute after the job ends (devstack/README.md
names the page). The core does not wait for it: `decide` classifies the ending from the evidence
at hand (Vertex's state and times, the trainer's chief and per-replica exit records, the
committed checkpoints, Spot or not, whether it ran) and marks the attempt `provisional`. Until
`error_settle_seconds` after the end, the attempt's CustomJob is read again now and then; when its
error arrives the ending is classified once more with it:

- the same budget (preemption, failure, neither): confirmed, nothing else changes;
- another budget: the record is corrected (a preemption refunded into a failure charged, or the
  other way), and a timeline entry says why. Never a second resubmission: the attempt that
  followed keeps running, and the budgets judge the next ending.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import replace

from controller.core import events as ev
from controller.core.actions import Action, ReadVertexJob, ScheduleWakeup
from controller.core.classify import Ending, Observation, ReplicaExit, classify
from controller.core.model import Attempt, JobState

# What each ending spends: the preemption count, the failure budget, or neither.
_PREEMPTION = "preemption"
_FAILURE = "failure"
_FREE = "free"


def budget_of(ending: Ending | None) -> str:
    if ending is Ending.PREEMPTED:
        return _PREEMPTION
    if ending in (Ending.USER_ERROR, Ending.INFRASTRUCTURE, Ending.TIMEOUT):
        return _FAILURE
    return _FREE


def pending(state: JobState) -> list[Attempt]:
    """Ended attempts whose ending still waits for Vertex's word."""
    return [a for a in state.attempts if a.ended and a.provisional and a.vertex_name]


def recheck(state: JobState, now: float, settle: float, every: float) -> tuple[JobState, list[Action]]:
    """At a wake-up: read each provisional attempt's CustomJob again, or, past the bound, take
    the ending as final (Vertex never said otherwise). A reclaim inferred without any evidence of
    progress then joins the crash-loop count after all, if nothing ended since: a program that
    dies at once, leaves no record, and whose error never comes is still stopped."""
    actions: list[Action] = []
    for attempt in pending(state):
        due = (attempt.ended_at or now) + settle
        if now >= due:
            state = _replace_attempt(state, replace(attempt, provisional=False))
            if _stalled_unseen(state, attempt) and attempt.ending is Ending.PREEMPTED:
                state = _add_stall(state, attempt)
            continue
        state, reads = _read_again(state, attempt, now, due, every)
        actions += reads
    return state, actions


def confirm(state: JobState, attempt: Attempt, event: ev.VertexObserved, obs: Observation) -> JobState:
    """`event`: attempt's CustomJob read again after its ending was decided. With Vertex's error
    in it, confirm or correct; without, nothing yet. The caller judges the budgets afterwards."""
    if event.error_code == 0 and not event.error_message.strip():
        return state
    verdict = classify(obs)
    settled = replace(
        attempt,
        provisional=False,
        error_code=event.error_code,
        error_message=event.error_message,
    )
    old, new = budget_of(attempt.ending), budget_of(verdict.ending)
    if old == new or verdict.ending is Ending.SUCCEEDED or attempt.ending is Ending.SUCCEEDED:
        return _replace_attempt(state, settled)
    settled = replace(settled, ending=verdict.ending, rule=verdict.rule)
    state = _replace_attempt(state, settled)
    preemptions, failures = state.preemptions, state.failures
    if old == _PREEMPTION:
        preemptions -= 1
    if old == _FAILURE:
        failures -= 1
    if new == _PREEMPTION:
        preemptions += 1
    if new == _FAILURE:
        failures += 1
        if _stalled_unseen(state, settled) and (
            settled.started_at is not None or verdict.ending is Ending.USER_ERROR
        ):
            state = _add_stall(state, settled)
    return replace(state, preemptions=max(0, preemptions), failures=max(0, failures))


def recheck_finished(
    state: JobState, now: float, settle: float, every: float
) -> tuple[JobState, list[Action]]:
    """`recheck` for a job that has ended (FAILED on an ending decided before Vertex's error):
    its provisional ending is still read again until the bound, so that the error can refine
    the record and the reason; past the bound it stands. Nothing else: no budget, no stall."""
    actions: list[Action] = []
    for attempt in pending(state):
        due = (attempt.ended_at or now) + settle
        if now >= due:
            state = _replace_attempt(state, replace(attempt, provisional=False))
            continue
        state, reads = _read_again(state, attempt, now, due, every)
        actions += reads
    return state, actions


def refine_finished(
    state: JobState, attempt: Attempt, event: ev.VertexObserved, obs: Observation
) -> tuple[JobState, str]:
    """A finished job's provisional ending read again: with Vertex's error in it, the attempt's
    record takes the error, the rule it now matches and the evidence, and the job's reason says
    what the error added (the replica, its code, the step). The job stays as it ended: never a
    new attempt, never a changed phase; a budget the error would move is only recorded.
    Returns the state and the refined account of the ending ("" when nothing changed)."""
    if event.error_code == 0 and not event.error_message.strip():
        return state, ""
    verdict = classify(obs)
    ending, rule = attempt.ending, attempt.rule
    if verdict.ending is not Ending.SUCCEEDED and attempt.ending is not Ending.SUCCEEDED:
        ending, rule = verdict.ending, verdict.rule
    evidence = (
        describe(obs.replica_exits, obs.own_failure(), state.job_id, attempt.number) or attempt.evidence
    )
    settled = replace(
        attempt,
        provisional=False,
        error_code=event.error_code,
        error_message=event.error_message,
        ending=ending,
        rule=rule,
        evidence=evidence,
    )
    state = _replace_attempt(state, settled)
    old, new = budget_of(attempt.ending), budget_of(ending)
    if old != new:  # recorded as Vertex says; the finished job is not reopened for it
        preemptions = state.preemptions + (new == _PREEMPTION) - (old == _PREEMPTION)
        failures = state.failures + (new == _FAILURE) - (old == _FAILURE)
        state = replace(state, preemptions=max(0, preemptions), failures=max(0, failures))
    account = account_of(state.job_id, settled, event, obs)
    return _with_reason(state, attempt.number, account), account


def account_of(job_id: str, settled: Attempt, event: ev.VertexObserved, obs: Observation) -> str:
    """How an ending settled by Vertex's error reads in the job's reason, whether the job goes
    on or has finished (`ending_account` with the settled record)."""
    ending = settled.ending.value if settled.ending else "?"
    return ending_account(
        job_id,
        settled.number,
        f"{ending} ({settled.rule})",
        settled.evidence,
        event.error_message,
        obs.replica_exits,
    )


def ending_account(
    job_id: str,
    number: int,
    verdict: str,
    evidence: str,
    error_message: str,
    replicas: tuple[ReplicaExit, ...],
) -> str:
    """The one wording of an ending in a job's reason, whether Vertex's error was there at the
    ending's first read or corrected it later: the ending and its rule, the evidence and the
    error, where the gang stood (the step) and the command that opens the log of the replica
    the error names (a worker killed for memory leaves no record of its own to name it)."""
    said = "; ".join(x for x in (evidence, error_message.strip()) if x)
    account = f"{verdict}: {said}".strip().rstrip(":")
    step = _newest_step(replicas)
    if step is not None and f"step {step}" not in account:  # where the gang stood when it died
        account += f" at step {step}"
    named = _NAMED_REPLICA.search(error_message)
    if named and "relaunch logs" not in account:
        account += f" (relaunch logs {job_id} --attempt {number} --replica {named.group(1)})"
    return account


# Vertex's error names the replica that failed ("The replica workerpool1-0 ran out of memory ...").
_NAMED_REPLICA = re.compile(r"\breplica (workerpool\d+-\d+)\b")


def _newest_step(replicas: tuple[ReplicaExit, ...]) -> int | None:
    return max((r.step for r in replicas if r.step is not None), default=None)


def _with_reason(state: JobState, number: int, account: str) -> JobState:
    """The job's reason with the ending's account refined: what followed "last: " (the budget
    reasons) replaced, else the account added."""
    reason = state.terminal_reason or ""
    marker = "last: "
    if marker in reason:
        reason = reason[: reason.rindex(marker)] + marker + account
    else:
        reason = f"{reason}; attempt {number} refined by Vertex's error: {account}".lstrip("; ")
    return replace(state, terminal_reason=reason)


def _read_again(
    state: JobState, attempt: Attempt, now: float, due: float, every: float
) -> tuple[JobState, list[Action]]:
    """Read the attempt's CustomJob again if `every` has passed since the last read (the ending's
    own read counts), else only wake when it has: a job's other looks in between (its next
    attempt's events) read nothing, so that pending confirmations never hold its key long."""
    last = attempt.rechecked_at if attempt.rechecked_at is not None else attempt.ended_at
    if last is not None and now < last + every:
        return state, [ScheduleWakeup(min(due, last + every))]
    state = _replace_attempt(state, replace(attempt, rechecked_at=now))
    return state, [
        ReadVertexJob(attempt.vertex_name or "", attempt.number),
        ScheduleWakeup(min(due, now + every)),
    ]


def _stalled_unseen(state: JobState, attempt: Attempt) -> bool:
    """The attempt made no checkpoint progress, its stall is not counted yet, and no attempt
    that ended after it made progress (which reset the streak: this stall is no longer part of
    the run of stalls it counts)."""
    later = any(_progressed(a) for a in state.attempts if a.number > attempt.number and a.ended)
    return not later and not _progressed(attempt) and not attempt.stalled and not attempt.progress_unknown


def _progressed(attempt: Attempt) -> bool:
    return attempt.checkpoint_step_at_end is not None and (
        attempt.resume_from_step is None or attempt.checkpoint_step_at_end > attempt.resume_from_step
    )


def _add_stall(state: JobState, attempt: Attempt) -> JobState:
    current = next(a for a in state.attempts if a.number == attempt.number)
    state = _replace_attempt(state, replace(current, stalled=True))
    return replace(state, no_progress_streak=state.no_progress_streak + 1)


def describe(replicas: tuple[ReplicaExit, ...], failed: ReplicaExit | None, job_id: str, attempt: int) -> str:
    """The replica, code, step and exception a failure reason names, with the command that
    opens that replica's log; "" when no record names one."""
    chosen = failed or next((r for r in replicas if r.reason not in ("preempted", "stopped_by_peer")), None)
    if chosen is None:
        return ""
    parts = [chosen.replica]
    if chosen.exit_code is not None:
        parts.append(f"exit {chosen.exit_code}")
    if chosen.signal:
        parts.append(f"signal {chosen.signal}")
    if chosen.worker_signal and chosen.worker_signal not in (chosen.signal or ""):
        parts.append(f"(worker killed by {chosen.worker_signal})")
    elif chosen.worker_exit_code is not None and chosen.worker_exit_code != chosen.exit_code:
        parts.append(f"(worker exit {chosen.worker_exit_code})")
    # A replica killed before it could report (its launcher's record has no step) failed where
    # the rest of the gang stood: the newest step another replica recorded.
    step = (
        chosen.step
        if chosen.step is not None
        else max((r.step for r in replicas if r.step is not None), default=None)
    )
    if step is not None:
        parts.append(f"at step {step}")
    text = " ".join(parts)
    if chosen.detail:
        text += f": {chosen.detail}"
    return f"{text} (relaunch logs {job_id} --attempt {attempt} --replica {chosen.replica})"


def _replace_attempt(state: JobState, attempt: Attempt) -> JobState:
    attempts = tuple(attempt if a.number == attempt.number else a for a in state.attempts)
    return replace(state, attempts=attempts)
