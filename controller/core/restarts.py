"""Restarts in place: Vertex restarting a CustomJob's replicas inside the same CustomJob.

Google documents that a reclaimed Spot job is restarted ("Compute Engine tries to restart the job
up to six times", "Use Spot VMs with training",
https://cloud.google.com/vertex-ai/docs/training/use-spot-vms) and that a replica ending with
some errors is restarted up to three times ("Understand the training service",
https://cloud.google.com/vertex-ai/docs/training/understanding-training-service). Vertex itself
says nothing of such a restart to the controller: the CustomJob stays RUNNING. The trainer does:
every run of a CustomJob's chief writes a run record when it starts, and a run that finds an
earlier one writes what the previous run's exit records said (docs/contracts.md, "Run records").

Each restart is one ending inside the attempt, counted once, by its run number:

| evidence of the previous run                                     | counted as  |
|------------------------------------------------------------------|-------------|
| a record says its program failed (error, config error, OOM kill) | a failure   |
| anything else: `preempted`, `stopped_by_peer`, no record at all   | a preemption |

A failure spends `maxFailures`, a preemption counts toward `maxPreemptions`, the storm alert and
`onDemandAfterPreemptions`, exactly as an ending of a whole attempt would. The time from the
previous run's end to the restart's start is restarting time (goodput), and each run is an
ending for the checkpoint interval's rate book.

Pure: stdlib only, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.core.classify import ReplicaExit
from trainer.layout import REASON_CONFIG_ERROR, REASON_RUNTIME_ERROR

COUNTED_PREEMPTION = "preempted"
COUNTED_FAILURE = "failure"


@dataclass(frozen=True)
class InPlaceRestart:
    """One restart of an attempt's CustomJob, as the restarted run's record tells it."""

    run: int  # the run that began (2 = the first restart)
    started_at: float  # when that run began (epoch seconds)
    # When the run before it stopped, by its exit records; None when it left none (SIGKILL).
    previous_ended_at: float | None = None
    # The previous run's exit reason (the chief's, or the first replica that failed on its own).
    previous_reason: str | None = None
    # The previous run's own records say its program failed (not a reclaim, not its peers).
    previous_failed: bool = False
    previous_step: int | None = None  # the step the previous run stopped at, when recorded
    resume_step: int | None = None  # the committed step the restarted run resumed from
    evidence: str = ""  # bounded text for reasons and the timeline ("workerpool0-0 exit 70 ...")

    @property
    def counted_as(self) -> str:
        return COUNTED_FAILURE if self.previous_failed else COUNTED_PREEMPTION

    @property
    def lost_no_work(self) -> bool:
        """The restarted run resumed from the step the previous one stopped at (its emergency
        save committed): nothing was recomputed."""
        return (
            self.previous_step is not None
            and self.resume_step is not None
            and self.resume_step >= self.previous_step
        )

    @property
    def at(self) -> float:
        """When the restart happened: the previous run's end where known, else the new start."""
        return self.previous_ended_at if self.previous_ended_at is not None else self.started_at

    @property
    def restarting_seconds(self) -> float:
        """Dead time between the two runs (0 when the previous end is unknown)."""
        if self.previous_ended_at is None:
            return 0.0
        return max(0.0, self.started_at - self.previous_ended_at)

    def describe(self) -> str:
        what = "failure" if self.previous_failed else "preemption"
        said = f": {self.evidence}" if self.evidence else ""
        gap = f", {self.restarting_seconds:.1f}s restarting" if self.previous_ended_at is not None else ""
        return f"restarted in place by Vertex (run {self.run}), counted as a {what}{gap}{said}"

    def to_dict(self) -> dict[str, object]:
        return {
            "run": self.run,
            "startedAt": self.started_at,
            "previousEndedAt": self.previous_ended_at,
            "previousReason": self.previous_reason,
            "previousFailed": self.previous_failed,
            "previousStep": self.previous_step,
            "resumeStep": self.resume_step,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> InPlaceRestart:
        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        step, resume = data.get("previousStep"), data.get("resumeStep")
        reason = data.get("previousReason")
        return cls(
            run=int(data["run"]),  # type: ignore[call-overload]
            started_at=float(data["startedAt"]),  # type: ignore[arg-type]
            previous_ended_at=number("previousEndedAt"),
            previous_reason=reason if isinstance(reason, str) else None,
            previous_failed=bool(data.get("previousFailed", False)),
            previous_step=step if isinstance(step, int) else None,
            resume_step=resume if isinstance(resume, int) else None,
            evidence=str(data.get("evidence") or ""),
        )


def from_evidence(
    run: int,
    started_at: float,
    previous_exits: tuple[ReplicaExit, ...],
    chief_reason: str | None,
    chief_ended_at: float | None,
    replica_ended_at: float | None,
    chief_step: int | None = None,
    resume_step: int | None = None,
) -> InPlaceRestart:
    """A restart, from what the previous run's records said (the table in the module's doc):
    a failure when a replica's own record says its program failed, or, with no replica record,
    when the chief's says so; a preemption otherwise. The previous run ended at the newest of
    its records' times."""
    failing = sorted((r for r in previous_exits if r.failed_on_its_own), key=lambda r: r.replica)
    failed = bool(failing) or (
        not previous_exits and chief_reason in (REASON_RUNTIME_ERROR, REASON_CONFIG_ERROR)
    )
    said = failing[0] if failing else next(iter(previous_exits), None)
    if said is not None:
        parts = [said.replica, said.reason]
        if said.exit_code is not None:
            parts.append(f"exit {said.exit_code}")
        if said.signal:
            parts.append(f"signal {said.signal}")
        if said.step is not None:
            parts.append(f"at step {said.step}")
        evidence = " ".join(parts) + (f": {said.detail}" if failing and said.detail else "")
    elif chief_reason is not None:
        evidence = f"chief {chief_reason}" + (f" at step {chief_step}" if chief_step is not None else "")
    else:
        evidence = "the previous run left no exit record (killed without warning)"
    ends = [t for t in (chief_ended_at, replica_ended_at) if t is not None]
    steps = [r.step for r in previous_exits if r.step is not None] + (
        [chief_step] if chief_step is not None else []
    )
    return InPlaceRestart(
        run=run,
        started_at=started_at,
        previous_ended_at=max(ends) if ends else None,
        previous_reason=(failing[0].reason if failing else chief_reason or (said.reason if said else None)),
        previous_failed=failed,
        previous_step=max(steps) if steps else None,
        resume_step=resume_step,
        evidence=evidence,
    )


def unseen(
    counted: Iterable[InPlaceRestart], observed: Iterable[InPlaceRestart]
) -> tuple[InPlaceRestart, ...]:
    """The observed restarts not counted yet, each run once, in run order (a run seen again, or
    a listing that lost one, changes nothing)."""
    known = {r.run for r in counted}
    fresh: dict[int, InPlaceRestart] = {}
    for restart in observed:
        if restart.run >= 2 and restart.run not in known:
            fresh.setdefault(restart.run, restart)
    return tuple(fresh[run] for run in sorted(fresh))
