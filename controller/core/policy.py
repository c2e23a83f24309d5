"""Restart policy: how many failures a job may spend, and how long to wait between attempts.

Pure data and arithmetic. The request schema (`controller/request/fields.py`) builds these objects
from the user's `restartPolicy`; the decision core reads them. The two serialised forms live here
and nowhere else: `to_dict`/`from_dict` (snake_case, inside the stored job state) and
`to_request_json` (camelCase, the canonical request the fingerprint is taken of).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with multiplicative jitter, capped at `max_seconds`.

    The delay before retry k (k = 1 for the first retry) is
    ``min(max, initial * multiplier ** (k - 1))`` scaled by a factor drawn uniformly from
    ``[1 - jitter, 1 + jitter]`` and clamped again to ``[initial, max]`` so the bounds a user
    wrote are never crossed.
    """

    initial_seconds: float = 30.0
    multiplier: float = 2.0
    max_seconds: float = 1800.0
    jitter: float = 0.2

    def delay(self, retry: int, rng: random.Random) -> float:
        if retry < 1:
            raise ValueError(f"retry counts from 1 (got {retry})")
        # Cap the exponent so huge retry counts cannot overflow a float.
        base = self.initial_seconds * (self.multiplier ** min(retry - 1, 64))
        base = min(base, self.max_seconds)
        if self.jitter:
            base *= rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(self.initial_seconds, min(self.max_seconds, base))


# What to do when the trainer finds no checkpoint it can load where one was expected (all of them
# failed verification, or the bucket lost them): a data loss either way, always alerted.
NO_CHECKPOINT_FAIL = "fail"  # stop, so a person decides whether days of compute are worth redoing
NO_CHECKPOINT_RESTART = "restartFromScratch"  # train again from step 0
NO_CHECKPOINT_ANSWERS = (NO_CHECKPOINT_FAIL, NO_CHECKPOINT_RESTART)


@dataclass(frozen=True)
class RestartPolicy:
    """What the user allows Relaunch to do when an attempt ends without success.

    - `max_failures`: endings that are not preemptions (user errors, infrastructure errors,
      timeouts) that may be retried before the job fails for good.
    - `max_preemptions`: None means unlimited; preemptions never consume `max_failures`.
    - `crash_loop_attempts`: give up after this many consecutive attempts that ended without
      advancing the latest committed checkpoint step.
    - `on_demand_after_preemptions`: after this many preemptions, submit with ON_DEMAND
      scheduling instead of SPOT (None = never switch).
    - `on_no_usable_checkpoint`: `fail` (default) or `restartFromScratch` when the trainer
      reports that no checkpoint under the job's root can be loaded.
    - `fallback_strategy`, `fallback_after_seconds`: after a stockout before start that lasted
      this long, ask for this strategy instead (`STANDARD` or `FLEX_START`;
      `controller.core.fallback`); None = never.
    """

    max_failures: int = 3
    max_preemptions: int | None = None
    backoff: Backoff = field(default_factory=Backoff)
    crash_loop_attempts: int = 3
    on_demand_after_preemptions: int | None = None
    on_no_usable_checkpoint: str = NO_CHECKPOINT_FAIL
    fallback_strategy: str | None = None
    fallback_after_seconds: float | None = None

    # --- the two serialised forms ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RestartPolicy:
        # Policies stored before a field existed get its default.
        return cls(**{**data, "backoff": Backoff(**data["backoff"])})

    def to_request_json(self) -> dict[str, Any]:
        backoff = self.backoff
        return {
            "maxFailures": self.max_failures,
            "maxPreemptions": self.max_preemptions,
            "backoff": {
                "initialSeconds": float(backoff.initial_seconds),
                "multiplier": float(backoff.multiplier),
                "maxSeconds": float(backoff.max_seconds),
                "jitter": float(backoff.jitter),
            },
            "crashLoopAttempts": self.crash_loop_attempts,
            "onDemandAfterPreemptions": self.on_demand_after_preemptions,
            "onNoUsableCheckpoint": self.on_no_usable_checkpoint,
            # Only when set: the canonical form (and so the fingerprint) of requests without it
            # stays what it was.
            **(
                {
                    "fallbackAfterStockout": {
                        "strategy": self.fallback_strategy,
                        "after": float(self.fallback_after_seconds or 0.0),
                    }
                }
                if self.fallback_strategy is not None
                else {}
            ),
        }
