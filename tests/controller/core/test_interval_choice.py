"""The checkpoint interval is chosen by the core where an attempt's SubmitAttempt is emitted: from
the facts the shell gathered (estimate, C), recorded on the attempt in the same state, and carried
unchanged by every later SubmitAttempt of that attempt (a retried or adopted submission)."""

from __future__ import annotations

from controller.core import events as ev
from controller.core.actions import SubmitAttempt
from controller.core.adaptive_interval import CheckpointCost, IntervalSetting
from controller.core.checkpoint_interval import CapacityClass, RateEstimate
from controller.core.decide import decide, new_job
from controller.core.interval_choice import IntervalInputs, wanted
from controller.core.model import JobState
from tests.support.core_driver import Run, make_policy

SPOT = CapacityClass("us-central1", "a2-highgpu-1g", "NVIDIA_TESLA_A100", "SPOT")
ON_DEMAND = CapacityClass("us-central1", "a2-highgpu-1g", "NVIDIA_TESLA_A100", "ON_DEMAND")


def inputs(spot_mtbf: float = 3600.0, on_demand_mtbf: float = 360_000.0) -> IntervalInputs:
    return IntervalInputs(
        IntervalSetting(auto=True, min_seconds=1.0, max_seconds=86_400.0),
        (SPOT, RateEstimate(alpha=1.0, beta=spot_mtbf)),
        (ON_DEMAND, RateEstimate(alpha=1.0, beta=on_demand_mtbf)),
        CheckpointCost(10.0, 30.0, "commit markers (3)"),
    )


def submits(actions) -> list[SubmitAttempt]:
    return [a for a in actions if isinstance(a, SubmitAttempt) and a.create_if_missing]


def start(given: IntervalInputs | None):
    run = Run(new_job("job-1", make_policy(on_demand_after_preemptions=1), 1000.0))
    decision = decide(run.state, ev.RequestAccepted(), run.now, run.rng, run.config, given)
    run.state = decision.state
    return run, list(decision.actions)


def test_the_first_attempt_gets_its_interval_with_its_submit_and_it_is_stored_on_the_attempt():
    run, actions = start(inputs())
    (submit,) = submits(actions)
    chosen = run.state.attempts[0].checkpoint_interval
    assert chosen is not None and chosen["mode"] == "auto" and chosen["capacity"] == SPOT.key()
    assert submit.checkpoint_interval_seconds == chosen["seconds"]
    assert not wanted(actions)
    # The choice is part of the stored state: a new leader reads it back.
    assert JobState.from_dict(run.state.to_dict()).attempts[0].checkpoint_interval == chosen


def test_without_the_facts_nothing_is_chosen_and_the_shell_is_asked_for_them():
    run, actions = start(None)
    (submit,) = submits(actions)
    assert submit.checkpoint_interval_seconds is None
    assert run.state.attempts[0].checkpoint_interval is None
    assert wanted(actions)


def test_a_retried_create_carries_the_recorded_interval_even_when_the_book_has_moved():
    run, actions = start(inputs())
    first = submits(actions)[0].checkpoint_interval_seconds
    # The look-up found no CustomJob: create again, now with a very different estimate at hand.
    retried = decide(run.state, ev.AttemptNotFound(1), run.now, run.rng, run.config, inputs(spot_mtbf=60.0))
    (submit,) = submits(retried.actions)
    assert submit.checkpoint_interval_seconds == first
    assert retried.state.attempts[0].checkpoint_interval == run.state.attempts[0].checkpoint_interval


def test_an_on_demand_attempt_is_given_the_interval_of_its_own_capacity_class():
    run, actions = start(inputs())
    spot_seconds = submits(actions)[0].checkpoint_interval_seconds
    run.submitted(1)
    run.preempted(1)
    run.now = max(run.now, run.state.next_attempt_at or run.now)
    decision = decide(run.state, ev.TimerFired(), run.now, run.rng, run.config, inputs())
    (submit,) = submits(decision.actions)
    second = decision.state.attempts[1]
    assert second.on_demand and second.checkpoint_interval is not None
    assert second.checkpoint_interval["capacity"] == ON_DEMAND.key()
    # Rarer work-losing endings on demand: a longer interval than the Spot attempt's.
    assert submit.checkpoint_interval_seconds == second.checkpoint_interval["seconds"] > spot_seconds
