"""A tiny harness that feeds events to the decision core the way the shell does."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from controller.core import events as ev
from controller.core.actions import Action
from controller.core.decide import CoreConfig, decide, new_job
from controller.core.model import JobState
from controller.core.policy import Backoff, RestartPolicy

# A reclaimed Spot job "fails with a STOCKOUT error" (Vertex docs); the documented stockout text.
STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."
PREEMPTED = STOCKOUT  # what a reclaim of a started Spot attempt reads like
USER_ERROR = "The replica workerpool1-0 exited with a non-zero status of 1. Termination reason: Error."


@dataclass
class Run:
    state: JobState
    now: float = 1000.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    config: CoreConfig = CoreConfig()
    actions: list[Action] = field(default_factory=list)

    @classmethod
    def start(cls, **policy) -> Run:
        run = cls(new_job("job-1", make_policy(**policy), 1000.0))
        run.feed(ev.RequestAccepted())
        return run

    def feed(self, event, *, at: float | None = None) -> list[Action]:
        if at is not None:
            self.now = at
        decision = decide(self.state, event, self.now, self.rng, self.config)
        self.state = decision.state
        self.actions.extend(decision.actions)
        return list(decision.actions)

    # Convenience: the usual life of attempt n.
    def submitted(self, n: int) -> list[Action]:
        return self.feed(ev.AttemptSubmitted(n, vname(n)))

    def running(self, n: int, *, spot: bool = True) -> list[Action]:
        return self.feed(ev.VertexObserved(n, vname(n), "RUNNING", start_time=self.now, spot=spot))

    def ended(
        self,
        n: int,
        state: str = "FAILED",
        code: int = 0,
        message: str = "",
        exit_reason: str | None = None,
        *,
        spot: bool = True,
        **evidence: Any,
    ) -> list[Action]:
        """`evidence`: the trainer's records (exit_step, final_step, replica_exits, ...)."""
        return self.feed(
            ev.VertexObserved(
                n,
                vname(n),
                state,
                code,
                message,
                end_time=self.now,
                exit_reason=exit_reason,
                spot=spot,
                **evidence,
            )
        )

    def preempted(self, n: int) -> list[Action]:
        """Attempt n runs, then its Spot VMs are reclaimed (Vertex's STOCKOUT-style ending)."""
        self.running(n)
        return self.ended(n, "FAILED", 8, PREEMPTED)

    def wake(self) -> list[Action]:
        """Jump to the scheduled wake-up and fire the timer."""
        if self.state.next_attempt_at is not None:
            self.now = max(self.now, self.state.next_attempt_at)
        return self.feed(ev.TimerFired())


def make_policy(**overrides) -> RestartPolicy:
    backoff = overrides.pop("backoff", Backoff(initial_seconds=10, multiplier=2, max_seconds=100, jitter=0.2))
    return RestartPolicy(backoff=backoff, **overrides)


def vname(n: int) -> str:
    return f"projects/p/locations/us-central1/customJobs/{1000 + n}"
