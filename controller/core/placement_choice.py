"""The placement of an attempt, chosen where its SubmitAttempt is emitted.

For a job with placements, `decide` calls `choose` on every action it returns, as it does for the
checkpoint interval (`interval_choice`): the first time a SubmitAttempt that may create is seen
for an attempt, the placement is chosen by `controller.core.placement.choose` and recorded on the
attempt (`Attempt.placement`: the name, the reason and every figure compared); every later
SubmitAttempt of that attempt (a retried or adopted submission) carries the recorded name, so a
CustomJob always goes where the job's timeline says.

What the choice reads, and where it comes from:
- the placements, the objective, the deadline, the rate book's estimate per placement, the job's
  checkpoint costs and where its checkpoint lives: the shell gathers them (`PlacementInputs`)
  when a SubmitAttempt lacks its placement (`wanted`), as it does for the interval;
- waits and speeds per placement: the job's own attempts, here (pure, from the state), each
  weighted by age at the configured half-life (`PlacementInputs.half_life_seconds`; 12 h by
  default) so an old wait or an old speed fades. A placement whose latest attempts were refused
  waits the rest of its stockout instead, as the job's own refusals (its attempts in the stored
  record, so a restarted controller expects the same) predict: `core.stockout_spells`, with its
  prior and fading on the same half-life; the reason says what that estimate rests on. A
  speed belongs to the machines, not to the region: placements with the same pools (machine
  type, accelerators, replicas) share one measured speed, so two regions of one shape are
  compared by price and reclaims, not by the noise of two start-ups;
- the placements that just refused the job (`refused`): the trailing run of attempts that ended
  for capacity or quota before they ran. They are passed over at once; once an attempt has run,
  the run is broken and every placement is eligible again, so a cheaper one that refused earlier
  is tried again at the next attempt.

When the choice is to wait for a placement that refused (`Choice.wait`: the others cost too
much more), the new attempt's submission waits `capacity_retry_seconds`, as a refused attempt
of a job without placements does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from controller.core.actions import Action, ScheduleWakeup, SubmitAttempt
from controller.core.checkpoint_interval import RateEstimate
from controller.core.classify import Ending
from controller.core.model import Attempt, JobState, Phase
from controller.core.placement import Choice, Evidence, JobCosts, Objective, Placement, Transfer, choose
from controller.core.stockout_spells import PRIOR_STOCKOUT_SECONDS, Stockouts, watch_gap

# Evidence from the job's own attempts (waits, speeds) counts half as much per this much age:
# the same scale as the rate book's forgetting (`checkpoint_interval.DEFAULT_HALF_LIFE_SECONDS`).
EVIDENCE_HALF_LIFE_SECONDS = 12 * 3600.0
# The training left when no exit record has said the final step yet (units of the speed, i.e.
# steps): only the deadline objective's finish estimate depends on it; a long job is assumed.
DEFAULT_REMAINING_UNITS = 1e6
# The capacity retry (`CoreConfig.capacity_retry_seconds`, RELAUNCH_CAPACITY_RETRY_SECONDS) when
# none is given: how often a job waiting for a refused placement asks it again.
DEFAULT_RETRY_SECONDS = 120.0


@dataclass(frozen=True)
class PlacementInputs:
    """What the shell knows when a job with placements may submit an attempt."""

    placements: tuple[Placement, ...]
    objective: Objective
    deadline_at: float | None  # epoch seconds (objective lowest-cost-under-deadline)
    rates: dict[str, RateEstimate]  # by placement name; absent: the strategy's prior
    costs: JobCosts  # C, W, R measured; remaining_units replaced from the state when known
    transfer: Transfer  # where the latest checkpoint is (None: a multi- or dual-region root)
    # How fast old evidence fades, for the job's own waits and speeds and for the placement
    # choice's rates: the configured RELAUNCH_ESTIMATE_HALF_LIFE_SECONDS, as the rate book's.
    half_life_seconds: float = EVIDENCE_HALF_LIFE_SECONDS
    # Where each placement's price came from when not the request: name -> the price table's
    # date and source (`controller.core.prices`). The reason names every price's origin.
    price_sources: dict[str, str] = field(default_factory=dict)


def wanted(actions: Iterable[Action]) -> bool:
    """Whether a SubmitAttempt that may create still lacks its placement."""
    return any(isinstance(a, SubmitAttempt) and a.create_if_missing and a.placement is None for a in actions)


def refused(state: JobState, before: int) -> frozenset[str]:
    """Placements that refused the attempts just before attempt `before`: the trailing run of
    attempts that ended for capacity or quota without running."""
    names: set[str] = set()
    for attempt in reversed([a for a in state.attempts if a.number < before]):
        if attempt.ending is not Ending.CAPACITY or attempt.started_at is not None:
            break
        if attempt.placement is not None:
            names.add(str(attempt.placement["chosen"]))
    return frozenset(names)


def evidence(
    state: JobState,
    now: float,
    shapes: dict[str, object] | None = None,
    half_life_seconds: float = EVIDENCE_HALF_LIFE_SECONDS,
    retry_seconds: float = DEFAULT_RETRY_SECONDS,
) -> dict[str, Evidence]:
    """Waits and speeds each placement showed this job (rates come from the book: the shell).
    `shapes`: placement name -> its machines; the speed of one is the speed of all its shape's.
    Each attempt that ran weighs half as much per `half_life_seconds` since it ended. A placement
    whose latest attempts were refused (its stockout not seen to end) waits the rest of its
    stockout as the job's own refusals predict (`stockouts`, `core.stockout_spells`)."""
    shapes = shapes or {}
    waits: dict[str, list[tuple[float, float]]] = {}
    speeds: dict[str, list[tuple[float, float]]] = {}
    for attempt in state.attempts:
        if attempt.placement is None or attempt.started_at is None:
            continue
        name = str(attempt.placement["chosen"])
        weight = _weight(attempt, now, half_life_seconds)
        waits.setdefault(name, []).append((weight, max(0.0, attempt.started_at - _asked(attempt))))
        speed = _speed(attempt)
        if speed is not None:
            speeds.setdefault(str(shapes.get(name, name)), []).append((weight, speed))
    spells = stockouts(state, half_life_seconds, retry_seconds)
    placed = {str(a.placement["chosen"]) for a in state.attempts if a.placement is not None}
    names = placed | set(shapes)
    return {
        name: Evidence(
            wait_seconds=_or(spells.remaining(name, now), _mean(waits.get(name))),
            units_per_second=_mean(speeds.get(str(shapes.get(name, name)))),
        )
        for name in names
    }


def stockouts(
    state: JobState,
    half_life_seconds: float = EVIDENCE_HALF_LIFE_SECONDS,
    retry_seconds: float = DEFAULT_RETRY_SECONDS,
) -> Stockouts:
    """The stockouts this job watched, from its attempts in the stored record: an attempt refused
    before it ran (capacity or quota) is a refusal of its placement, from its request to its
    ending; one that started ends its placement's open stockout at its request. An attempt still
    in flight says nothing yet. `retry_seconds`: the configured capacity retry (a longer one
    stretches the gap that still counts as watching, `stockout_spells.watch_gap`)."""
    spells = Stockouts(half_life_seconds=half_life_seconds, watch_gap_seconds=watch_gap(retry_seconds))
    for attempt in state.attempts:
        if attempt.placement is None:
            continue
        name = str(attempt.placement["chosen"])
        if attempt.started_at is not None:
            spells = spells.started(name, _asked(attempt))
        elif attempt.ending is Ending.CAPACITY:
            at = attempt.ended_at if attempt.ended_at is not None else _asked(attempt)
            spells = spells.refused(name, at, asked_at=_asked(attempt))
    return spells


def choose_placements(
    state: JobState,
    actions: list[Action],
    inputs: PlacementInputs | None,
    now: float,
    retry_seconds: float,
) -> tuple[JobState, list[Action]]:
    out: list[Action] = []
    for action in actions:
        if isinstance(action, SubmitAttempt) and action.create_if_missing and state.placements:
            state, placed = _placed(state, action, inputs, now, retry_seconds)
            out.extend(placed)
        elif isinstance(action, SubmitAttempt) and action.placement is None:
            # A look-up that never creates (a cancel before the create was recorded) searches
            # where its attempt was placed, so a CustomJob made there is found and stopped.
            recorded = next((a.placement for a in state.attempts if a.number == action.attempt), None)
            out.append(replace(action, placement=str(recorded["chosen"])) if recorded else action)
        else:
            out.append(action)
    return state, out


def _placed(
    state: JobState, action: SubmitAttempt, inputs: PlacementInputs | None, now: float, retry_seconds: float
) -> tuple[JobState, list[Action]]:
    index = next((i for i, a in enumerate(state.attempts) if a.number == action.attempt), None)
    if index is None:
        return state, [action]
    attempt = state.attempts[index]
    if attempt.placement is None:
        if inputs is None:
            return state, [action]  # the shell gathers the inputs and decides again
        choice = with_price_sources(_choose(state, attempt, inputs, now, retry_seconds), inputs)
        attempts = list(state.attempts)
        attempts[index] = attempt = replace(attempt, placement=choice.to_dict())
        state = replace(state, attempts=tuple(attempts))
        if choice.wait and state.phase is Phase.SUBMITTING and attempt.number == len(state.attempts):
            # Waiting for the placement that refused: submit after the capacity backoff.
            retry_at = now + retry_seconds
            return replace(state, next_attempt_at=retry_at), [ScheduleWakeup(retry_at)]
    assert attempt.placement is not None
    return state, [replace(action, placement=str(attempt.placement["chosen"]))]


def _choose(
    state: JobState, attempt: Attempt, inputs: PlacementInputs, now: float, retry_seconds: float
) -> Choice:
    choice = _compare(state, attempt, inputs, now, retry_seconds)
    return with_stockouts(choice, stockouts(state, inputs.half_life_seconds, retry_seconds), now)


def with_stockouts(choice: Choice, spells: Stockouts, now: float) -> Choice:
    """The reason, followed by the wait each placement still refusing is expected to have and
    where that came from (nothing when none is)."""
    open_spells = [
        f"{name} refused {_hours(now - last)} ago: {_hours(spells.remaining(name, now) or 0.0)} expected yet"
        for name, last in spells.refused_at.items()
    ]
    if not open_spells:
        return choice
    basis = (
        f"stockouts last {_hours(spells.mean(now))} on average by this job's refusals (the prior, "
        f"{_hours(PRIOR_STOCKOUT_SECONDS)}, as one seen to end; {_hours(spells.kept(now) * spells.watched)} "
        f"watched, {spells.kept(now) * spells.ended:.2g} seen to end, weighing half per "
        f"{_hours(spells.half_life_seconds)}); one refused s ago is expected back in mean x exp(-s/mean)"
    )
    return replace(choice, reason=f"{choice.reason}; {basis}; {'; '.join(open_spells)}")


def _compare(
    state: JobState, attempt: Attempt, inputs: PlacementInputs, now: float, retry_seconds: float
) -> Choice:
    shapes: dict[str, object] = {p.name: p.pools for p in inputs.placements}
    seen = evidence(state, now, shapes, inputs.half_life_seconds, retry_seconds)
    per_placement = {
        p.name: replace(seen.get(p.name, Evidence()), rates=inputs.rates.get(p.name))
        for p in inputs.placements
    }
    costs = inputs.costs
    if state.final_step is not None:
        done = state.latest_checkpoint_step or 0
        costs = replace(costs, remaining_units=float(max(1, state.final_step - done)))
    deadline = None if inputs.deadline_at is None else max(0.0, inputs.deadline_at - now)
    objective = inputs.objective
    if objective is Objective.COST_UNDER_DEADLINE and deadline is None:
        objective = Objective.LOWEST_COST
    return choose(
        inputs.placements,
        per_placement,
        costs,
        inputs.transfer,
        objective,
        seconds_to_deadline=deadline,
        refused=refused(state, attempt.number),
        half_life_seconds=inputs.half_life_seconds,
    )


def with_price_sources(choice: Choice, inputs: PlacementInputs) -> Choice:
    """The reason, followed by where the prices it compared came from."""
    by_source: dict[str, list[str]] = {}
    for p in inputs.placements:
        origin = inputs.price_sources.get(p.name, "the request")
        by_source.setdefault(origin, []).append(f"{p.name} ${p.price_per_node_hour:.4g}")
    prices = "; ".join(f"from {origin}: {', '.join(names)}" for origin, names in by_source.items())
    return replace(choice, reason=f"{choice.reason}; prices per node hour {prices}")


def _speed(attempt: Attempt) -> float | None:
    """Steps per second of an attempt that trained: steps committed over its time running (its
    start-up included, which makes every measured placement a little slow, alike)."""
    if attempt.started_at is None or attempt.ended_at is None or attempt.checkpoint_step_at_end is None:
        return None
    steps = attempt.checkpoint_step_at_end - (attempt.resume_from_step or 0)
    seconds = attempt.ended_at - attempt.started_at
    return steps / seconds if steps > 0 and seconds > 0 else None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.1f} h"


def _asked(attempt: Attempt) -> float:
    return attempt.submitted_at if attempt.submitted_at is not None else attempt.intent_at


def _or(first: float | None, second: float | None) -> float | None:
    return second if first is None else first


def _weight(attempt: Attempt, now: float, half_life_seconds: float) -> float:
    at = attempt.ended_at if attempt.ended_at is not None else now
    return math.pow(0.5, max(0.0, now - at) / half_life_seconds)


def _mean(pairs: list[tuple[float, float]] | None) -> float | None:
    if not pairs:
        return None
    total = sum(w for w, _ in pairs)
    return sum(w * v for w, v in pairs) / total if total > 0 else None
