"""The checkpoint interval of an attempt, chosen where its SubmitAttempt is emitted.

`decide` calls `choose` on every action it returns: a SubmitAttempt that may create a CustomJob
carries the interval its attempt was given. The first time, the interval is chosen from the
facts the shell gathered (`IntervalInputs`: the request's setting, the rate estimate of each
capacity class the attempt may run on, the measured checkpoint cost) and recorded on the attempt
in the same state; every later SubmitAttempt of that attempt (a retried or adopted submission)
carries the recorded value, so a CustomJob always renders the interval the job shows.

Without inputs (a request whose interval is not `auto`, or a look where none was needed) nothing
is chosen: the render then uses the request's fixed seconds, or leaves the trainer's flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from controller.core.actions import Action, SubmitAttempt
from controller.core.adaptive_interval import CheckpointCost, IntervalSetting, decide_interval
from controller.core.checkpoint_interval import CapacityClass, RateEstimate
from controller.core.model import JobState


@dataclass(frozen=True)
class IntervalInputs:
    """What the shell knows when an `auto` job may submit an attempt."""

    setting: IntervalSetting
    spot: tuple[CapacityClass, RateEstimate]  # the class a Spot attempt runs on, its estimate
    on_demand: tuple[CapacityClass, RateEstimate]  # the same for an on-demand attempt
    cost: CheckpointCost
    # A job with placements: the class and estimate of each placement, by name. An attempt's
    # placement is chosen before its interval (`decide`), so the interval is chosen for the
    # capacity the attempt will run on.
    placed: dict[str, tuple[CapacityClass, RateEstimate]] = field(default_factory=dict)


def wanted(actions: tuple[Action, ...] | list[Action]) -> bool:
    """Whether a SubmitAttempt that may create still lacks its interval (the shell then gathers
    `IntervalInputs` and decides again)."""
    return any(
        isinstance(a, SubmitAttempt) and a.create_if_missing and a.checkpoint_interval_seconds is None
        for a in actions
    )


def choose(
    state: JobState, actions: list[Action], inputs: IntervalInputs | None
) -> tuple[JobState, list[Action]]:
    out: list[Action] = []
    for action in actions:
        if isinstance(action, SubmitAttempt) and action.create_if_missing:
            state, action = _with_interval(state, action, inputs)
        out.append(action)
    return state, out


def _with_interval(
    state: JobState, action: SubmitAttempt, inputs: IntervalInputs | None
) -> tuple[JobState, SubmitAttempt]:
    index = next((i for i, a in enumerate(state.attempts) if a.number == action.attempt), None)
    if index is None:
        return state, action
    attempt = state.attempts[index]
    chosen = attempt.checkpoint_interval
    if chosen is None and inputs is not None and inputs.setting.auto:
        where = inputs.placed.get(str(attempt.placement["chosen"])) if attempt.placement else None
        capacity, estimate = where or (inputs.on_demand if attempt.on_demand else inputs.spot)
        chosen = decide_interval(inputs.setting, capacity, estimate, inputs.cost).to_dict()
        attempts = list(state.attempts)
        attempts[index] = replace(attempt, checkpoint_interval=chosen)
        state = replace(state, attempts=tuple(attempts))
    if chosen is None:
        return state, action
    return state, replace(action, checkpoint_interval_seconds=float(chosen["seconds"]))
