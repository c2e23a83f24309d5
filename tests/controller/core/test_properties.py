"""Property-based tests: random, duplicated and reordered event sequences never break the rules."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core import events as ev
from controller.core.actions import ScheduleWakeup, SubmitAttempt
from controller.core.classify import Ending
from controller.core.decide import CoreConfig, decide, new_job
from controller.core.model import Phase
from controller.core.policy import Backoff, RestartPolicy
from tests.support.core_driver import PREEMPTED, STOCKOUT, USER_ERROR, vname

ATTEMPTS = st.integers(1, 5)
ENDINGS = st.sampled_from(
    [
        ("SUCCEEDED", 0, "", None),
        ("FAILED", 14, PREEMPTED, None),
        ("FAILED", 3, USER_ERROR, None),
        ("FAILED", 3, USER_ERROR, "preempted"),
        ("FAILED", 8, STOCKOUT, None),
        ("FAILED", 0, "", None),
        ("FAILED", 0, "", "preempted"),
        ("FAILED", 13, "Internal error occurred for the current attempt.", None),
        ("FAILED", 4, "Job exceeded its timeout of 60s.", None),
        ("FAILED", 3, "exited with a non-zero status of 64.", "config_error"),
        ("CANCELLED", 1, "CANCELED", None),
    ]
)
LIVE = st.sampled_from(["QUEUED", "PENDING", "RUNNING", "CANCELLING"])
NAMES = st.builds(lambda n, dup: vname(n) + ("-dup" if dup else ""), ATTEMPTS, st.booleans())

EVENTS = st.one_of(
    st.just(ev.RequestAccepted()),
    st.builds(ev.AttemptSubmitted, ATTEMPTS, NAMES),
    st.builds(ev.AttemptNotFound, ATTEMPTS),
    st.builds(ev.SubmitFailed, ATTEMPTS, st.just("boom"), st.booleans(), st.booleans()),
    st.builds(
        lambda n, name, s, spot: ev.VertexObserved(n, name, s, spot=spot),
        ATTEMPTS,
        NAMES,
        LIVE,
        st.booleans(),
    ),
    st.builds(
        lambda n, name, e, spot: ev.VertexObserved(n, name, e[0], e[1], e[2], exit_reason=e[3], spot=spot),
        ATTEMPTS,
        NAMES,
        ENDINGS,
        st.booleans(),
    ),
    st.builds(ev.VertexJobMissing, ATTEMPTS, NAMES),
    st.builds(lambda s: ev.CheckpointObserved(s, f"gs://b/c/step-{s}"), st.integers(0, 500)),
    st.just(ev.TimerFired()),
    st.just(ev.CancelRequested()),
)

POLICIES = st.builds(
    RestartPolicy,
    max_failures=st.integers(0, 4),
    max_preemptions=st.one_of(st.none(), st.integers(0, 4)),
    backoff=st.builds(
        Backoff,
        initial_seconds=st.floats(1, 60),
        multiplier=st.floats(1, 3),
        max_seconds=st.floats(60, 600),
        jitter=st.floats(0, 0.5),
    ),
    crash_loop_attempts=st.integers(1, 4),
    on_demand_after_preemptions=st.one_of(st.none(), st.integers(0, 3)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=POLICIES,
    steps=st.lists(st.tuples(EVENTS, st.floats(0, 900), st.booleans()), max_size=60),
    seed=st.integers(0, 2**32),
)
def test_invariants_hold_for_any_event_sequence(policy, steps, seed):
    rng = random.Random(seed)
    now = 0.0
    state = new_job("job-1", policy, now)
    state = decide(state, ev.RequestAccepted(), now, rng).state
    delivered = []
    cancelled_at_attempt = None
    highest_submitted = 1
    for event, advance, replay in steps:
        # Sometimes deliver an earlier event again (duplicate / out of order) instead.
        if replay and delivered:
            event = delivered[rng.randrange(len(delivered))]
        delivered.append(event)
        now += advance
        before = state
        decision = decide(state, event, now, rng)
        state = decision.state

        # Terminal is final: nothing is created, the phase and the attempts stay; only Vertex's
        # late error may refine a provisional ending's record and the reason (core/confirm.py).
        if before.phase.terminal:
            assert state.phase is before.phase and len(state.attempts) == len(before.attempts)
            assert state == before or any(a.provisional for a in before.attempts)
            assert not any(isinstance(a, SubmitAttempt) for a in decision.actions)

        # Never two live attempts; attempt numbers are 1, 2, 3, ... in order.
        assert [a.number for a in state.attempts] == list(range(1, len(state.attempts) + 1))
        assert all(a.ended for a in state.attempts[:-1])

        for action in decision.actions:
            if isinstance(action, SubmitAttempt):
                # Only the current attempt is ever submitted, and numbers never go back.
                assert action.attempt == state.current.number >= highest_submitted
                highest_submitted = action.attempt
                if cancelled_at_attempt is not None:
                    assert action.attempt == cancelled_at_attempt and not action.create_if_missing

        # Budgets: exceeding one ends the job.
        if state.failures > policy.max_failures or (
            policy.max_preemptions is not None and state.preemptions > policy.max_preemptions
        ):
            assert state.phase.terminal

        # Backoff wake-ups after an ending stay within the configured bounds (a stockout before
        # start waits from 0 up to the capacity retry, with a fifth of jitter: core/stockout.py).
        if before.phase is not Phase.BACKING_OFF and state.phase is Phase.BACKING_OFF:
            wait = state.next_attempt_at - now
            ceiling = policy.backoff.max_seconds
            floor = policy.backoff.initial_seconds
            if state.current.ending is Ending.CAPACITY:
                ceiling = max(ceiling, CoreConfig().capacity_retry_seconds * 1.2)
                floor = 0.0 if state.current.started_at is None else floor
            resumed = state.current.resume_from_step
            if state.current.ending is Ending.PREEMPTED and (
                state.latest_checkpoint_step is not None
                and (resumed is None or state.latest_checkpoint_step > resumed)
            ):
                floor = 0.0  # a reclaim after checkpoint progress restarts at once
            assert floor - 1e-6 <= wait <= ceiling + 1e-6
            assert ScheduleWakeup(state.next_attempt_at) in decision.actions

        # Cancel always wins: no new attempt, never failed or running again.
        if (
            isinstance(event, ev.CancelRequested)
            and not before.phase.terminal
            and cancelled_at_attempt is None
        ):
            cancelled_at_attempt = state.current.number if state.current else 0
        if cancelled_at_attempt is not None:
            assert state.phase in (Phase.CANCELLING, Phase.CANCELLED, Phase.SUCCEEDED)
            assert len(state.attempts) == max(cancelled_at_attempt, len(before.attempts))


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(EVENTS, max_size=40), seed=st.integers(0, 2**32))
def test_delivering_every_event_twice_in_a_row_equals_delivering_it_once(steps, seed):
    """Idempotency: an immediate duplicate of any event changes no state."""
    policy = RestartPolicy()
    once = twice = decide(new_job("j", policy, 0), ev.RequestAccepted(), 0, random.Random(seed)).state
    rng_once, rng_twice = random.Random(seed), random.Random(seed)
    for i, event in enumerate(steps):
        once = decide(once, event, float(i), rng_once).state
        twice = decide(twice, event, float(i), rng_twice).state
        twice = decide(twice, event, float(i), rng_twice).state
        assert twice == once
