"""Random walks through the decision core that record every phase transition they see.

The walks favour events about the job's current attempt (what the shell mostly delivers), mixed
with stale, duplicated and foreign ones, so that a few thousand walks reach every phase.
"""

from __future__ import annotations

import functools
import random

from controller.core import events as ev
from controller.core.decide import CoreConfig, decide, new_job
from controller.core.elastic import ElasticPolicy
from controller.core.policy import Backoff, RestartPolicy
from controller.core.restarts import InPlaceRestart
from tests.support.core_driver import PREEMPTED, STOCKOUT, USER_ERROR, vname

ENDINGS = (
    ("SUCCEEDED", 0, "", None),
    ("FAILED", 14, PREEMPTED, None),
    ("FAILED", 3, USER_ERROR, None),
    ("FAILED", 3, USER_ERROR, "preempted"),
    ("FAILED", 8, STOCKOUT, None),
    ("FAILED", 4, "Job exceeded its timeout of 60s.", None),
    ("FAILED", 3, "exited with a non-zero status of 64.", "config_error"),
    ("CANCELLED", 1, "CANCELED", None),
)
LIVE = ("QUEUED", "PENDING", "RUNNING", "CANCELLING")


def random_event(rng: random.Random, current: int) -> ev.Event:
    attempt = current if current and rng.random() < 0.8 else rng.randint(1, max(1, current + 1))
    name = vname(attempt) + ("-dup" if rng.random() < 0.1 else "")
    kind = rng.randrange(10)
    if kind == 0:
        return ev.RequestAccepted()
    if kind == 1:
        return ev.AttemptSubmitted(attempt, name)
    if kind == 2:
        return ev.AttemptNotFound(attempt)
    if kind == 3:
        permanent = rng.random() < 0.3
        return ev.SubmitFailed(attempt, "boom", permanent, capacity=not permanent and rng.random() < 0.3)
    if kind == 4:
        return ev.VertexObserved(attempt, name, rng.choice(LIVE))
    if kind == 5:
        state, code, message, exit_reason = rng.choice(ENDINGS)
        return ev.VertexObserved(attempt, name, state, code, message, exit_reason=exit_reason)
    if kind == 6:
        return ev.VertexJobMissing(attempt, name)
    if kind == 7:
        step = rng.randint(0, 500)
        return ev.CheckpointObserved(step, f"gs://b/c/step-{step}")
    if kind == 8:
        return ev.TimerFired()
    draw = rng.random()
    if draw < 0.3:
        return ev.CancelRequested()
    if draw < 0.5:  # the trainer's run records: a restart in place, a reclaim or a failure
        restart = InPlaceRestart(rng.randint(2, 4), 0.0, previous_failed=rng.random() < 0.5)
        return ev.RestartsObserved(attempt, name, (restart,))
    return ev.TimerFired()


@functools.cache
def observed_transitions(walks: int = 3000, steps: int = 40, seed: int = 7) -> set[tuple[str, str, str]]:
    """(from phase, event class name, to phase) for every event that changed the phase."""
    rng = random.Random(seed)
    seen: set[tuple[str, str, str]] = set()
    for _ in range(walks):
        policy = RestartPolicy(
            max_failures=rng.randint(0, 3),
            max_preemptions=rng.choice([None, 1, 3]),
            backoff=Backoff(initial_seconds=10, multiplier=2, max_seconds=100, jitter=0.2),
            crash_loop_attempts=rng.randint(1, 3),
        )
        # Every other walk is an elastic job (shrink to fit): its replacements are transitions too.
        elastic = ElasticPolicy((1, 3), (1, 1), shrink_after_seconds=300.0) if rng.random() < 0.5 else None
        # A third of the walks list placements: a refusal then moves the next attempt at once.
        placements = ("spot-a", "spot-b") if rng.random() < 0.3 else ()
        state = new_job("walk", policy, 0.0, elastic, placements)
        now = 0.0
        for _ in range(steps):
            current = state.current.number if state.current else 0
            event = random_event(rng, current)
            now += rng.choice((1.0, 30.0, 200.0))
            decision = decide(state, event, now, rng, CoreConfig())
            if decision.state.phase != state.phase:
                seen.add((state.phase.value, type(event).__name__, decision.state.phase.value))
            state = decision.state
    return seen
