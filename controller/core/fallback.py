"""Fall back from Spot after a stockout that lasts: the request's `restartPolicy.fallbackAfterStockout`.

A stockout before start (Vertex ended the attempt before it ran for lack of capacity, or refused
the create for quota: `JobState.capacity_wait_since` marks the start of such a run of refusals)
can last hours. `onDemandAfterPreemptions` only helps once a job has run and been reclaimed; this
rule helps a job that never gets to run: once the refusals have lasted the stated wait, the next
attempt (or the refused create, tried again) asks for the fallback strategy, `STANDARD`
(on-demand) or `FLEX_START` (Dynamic Workload Scheduler: the whole gang provisioned together).

Once an attempt has fallen back, later attempts keep the fallback strategy: the capacity that was
missing for that long is not assumed to be back, and a job that runs on the fallback has no
stockout left to wait out. Pure: no clock, `now` is passed in.
"""

from __future__ import annotations

from typing import Protocol

FALLBACK_STRATEGIES = ("STANDARD", "FLEX_START")


class _Attempt(Protocol):
    @property
    def strategy(self) -> str | None: ...


class _Policy(Protocol):
    @property
    def fallback_strategy(self) -> str | None: ...
    @property
    def fallback_after_seconds(self) -> float | None: ...


def due_at(policy: _Policy, waiting_since: float | None) -> float | None:
    """When the fallback is due for a run of capacity refusals that began at `waiting_since`;
    None when the request has no fallback or nothing is waiting for capacity."""
    if policy.fallback_strategy is None or policy.fallback_after_seconds is None or waiting_since is None:
        return None
    return waiting_since + policy.fallback_after_seconds


def strategy(
    policy: _Policy, attempts: tuple[_Attempt, ...], waiting_since: float | None, now: float
) -> str | None:
    """The strategy the next attempt (or a create tried again) asks for: an earlier fallback's,
    or the fallback once the wait for capacity has lasted `fallback_after_seconds`; None: the
    request's own."""
    for attempt in reversed(attempts):
        if attempt.strategy is not None:
            return attempt.strategy
    due = due_at(policy, waiting_since)
    if due is not None and now >= due:
        return policy.fallback_strategy
    return None
