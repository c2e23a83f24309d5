"""Shrink to fit: the size of each attempt of a job whose worker pools have an elastic range.

On Spot GPUs a stockout can last hours during which the full gang is not to be had while a
smaller one is. A request may give a pool a `minReplicaCount` below its `replicaCount`; then
Relaunch runs the job on fewer nodes rather than wait, and grows it back later. Pure data and
arithmetic (stdlib only); `decide` asks these questions and records the answers on each attempt.

A size is a tuple of replica counts, one per worker pool in the request's order (0 for an empty
pool). Decisions, and why:

- **When to shrink.** (1) An attempt has waited for capacity (Vertex shows it QUEUED or PENDING,
  which one is not documented) for `shrink_after_seconds` since Vertex took it: it is replaced by
  an attempt at the smaller size. (2) An attempt ended for lack of capacity before it ran
  (Vertex's documented stockout ending, after its own retries): the next attempt is smaller at
  once, no `shrinkAfter` wait, since Vertex has already waited and said no. (3) Creates refused
  with 429 RESOURCE_EXHAUSTED for `shrink_after_seconds`: a smaller gang asks for less quota.
  Which of (1) and (2) a real stockout looks like is *unknown*; both lead to the same size.
- **How far.** Straight to the minimum, not halving. Vertex tells nothing about how much
  capacity there is, so each intermediate size would be a blind guess costing another
  `shrinkAfter` of the whole gang idle; the minimum is the size the user declared worth
  running, and growing back is tried anyway (below). Never below the minimum, never below one
  replica in the chief's pool (the request validation guarantees minimum >= 1).
- **When to grow back.** Only at a new attempt, never by stopping a running job (stopping costs
  the work since the last checkpoint and may not get the capacity back). `everyAttempt`: every
  attempt after one that ran shrunk (it was reclaimed, or failed) first asks for the full size,
  and is shrunk again by the rules above if the capacity is still missing. `after`: the same,
  once the job has run shrunk for `grow_back_after_seconds`; earlier attempts keep the shrunk
  size. `never`: once shrunk, the job stays at the minimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROW_EVERY_ATTEMPT = "everyAttempt"
GROW_AFTER = "after"
GROW_NEVER = "never"
GROW_BACK_MODES = (GROW_EVERY_ATTEMPT, GROW_AFTER, GROW_NEVER)

DEFAULT_SHRINK_AFTER_SECONDS = 900.0  # 15 minutes: far beyond a normal provisioning wait

Size = tuple[int, ...]


@dataclass(frozen=True)
class ElasticPolicy:
    """The job's elastic range and when to use it."""

    full: Size  # replicaCount of every pool, as requested
    minimum: Size  # minReplicaCount of every pool (= replicaCount where none is given)
    shrink_after_seconds: float = DEFAULT_SHRINK_AFTER_SECONDS
    grow_back: str = GROW_EVERY_ATTEMPT
    grow_back_after_seconds: float | None = None  # with GROW_AFTER only

    def __post_init__(self) -> None:
        if len(self.full) != len(self.minimum):
            raise ValueError("full and minimum sizes name different numbers of pools")
        if any(low > high or low < 0 for low, high in zip(self.minimum, self.full, strict=True)):
            raise ValueError(f"minimum {self.minimum} must lie between 0 and the full size {self.full}")
        if self.grow_back not in GROW_BACK_MODES:
            raise ValueError(f"grow_back must be one of {GROW_BACK_MODES}")

    @property
    def can_shrink(self) -> bool:
        return self.minimum != self.full

    def to_dict(self) -> dict[str, Any]:
        return {
            "full": list(self.full),
            "minimum": list(self.minimum),
            "shrink_after_seconds": self.shrink_after_seconds,
            "grow_back": self.grow_back,
            "grow_back_after_seconds": self.grow_back_after_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElasticPolicy:
        return cls(
            full=tuple(data["full"]),
            minimum=tuple(data["minimum"]),
            shrink_after_seconds=float(data.get("shrink_after_seconds", DEFAULT_SHRINK_AFTER_SECONDS)),
            grow_back=data.get("grow_back", GROW_EVERY_ATTEMPT),
            grow_back_after_seconds=data.get("grow_back_after_seconds"),
        )

    def to_request_json(self) -> dict[str, Any]:
        """The request's `elastic` block (canonical form; the per-pool minimums live in jobSpec)."""
        if self.grow_back == GROW_AFTER:
            grow: str = f"after:{self.grow_back_after_seconds:g}s"
        else:
            grow = self.grow_back
        return {"shrinkAfter": f"{self.shrink_after_seconds:g}s", "growBack": grow}


def nodes(size: Size) -> int:
    return sum(size)


def is_shrunk(policy: ElasticPolicy | None, size: Size | None) -> bool:
    return policy is not None and size is not None and size != policy.full


def smaller(policy: ElasticPolicy, size: Size) -> Size | None:
    """The size to try after `size` found no capacity; None when it is the minimum already."""
    return policy.minimum if size != policy.minimum else None


def regrown(policy: ElasticPolicy, previous: Size, shrunk_since: float | None, now: float) -> Size:
    """The size of an attempt that follows one that ran at `previous` (a reclaim, a failure):
    the full size when the policy says to grow back now, else `previous`."""
    if previous == policy.full or policy.grow_back == GROW_NEVER:
        return previous
    if policy.grow_back == GROW_AFTER:
        after = policy.grow_back_after_seconds or 0.0
        if shrunk_since is not None and now - shrunk_since < after:
            return previous
    return policy.full


def describe(size: Size) -> str:
    """'2 replicas (workerpool0: 1, workerpool1: 1)' for logs, alerts and the timeline."""
    pools = ", ".join(f"workerpool{index}: {count}" for index, count in enumerate(size) if count)
    return f"{nodes(size)} replicas ({pools})"
