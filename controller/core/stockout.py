"""How long to wait after a stockout before start: the first retry at once, then backing off.

A stockout is a fact about the moment of the request, not a state that lasts a known time.
Google's "Troubleshoot resource availability errors" page
(https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability) says
a resource error applies only to the new request, for the resources it named, when it was made,
that capacity changes often, and that the request may be tried again later; the "View Spot VM
availability" page (https://cloud.google.com/compute/docs/instances/view-vm-availability) scores
a Spot request's chance from the capacity available in real time. Vertex AI's "Use Spot VMs with
training" page (https://cloud.google.com/vertex-ai/docs/training/use-spot-vms) applies Compute
Engine's Spot rules to training jobs. Nothing is reserved for a refused request and nothing is
learnt by waiting a fixed time, and Vertex has already retried provisioning before it ended the
attempt (devstack/README.md, "stockout"). So the first attempt after a stockout is created at once.

A stockout that lasts must not become a create loop (each refused create spends quota and a
Vertex call): each further stockout in a row waits twice as long as the one before, starting at
an eighth of `capacity_retry_seconds`, up to it, with jitter (up to a fifth more, as a create
refused for quota waits), so that many jobs refused together do not all ask again together. With
the defaults: 0 s, 15 s, 30 s, 60 s, then 120 s (each up to a fifth more). The count is read from
the attempts themselves (the stored record), so a restarted controller keeps it, and the wait is
`JobState.next_attempt_at`, persisted like every backoff.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Protocol

from controller.core.classify import Ending

FIRST_WAIT_SHARE = 1 / 8  # of capacity_retry_seconds: the wait after the second stockout in a row
JITTER = 0.2  # up to this share more, drawn per wait


class _Attempt(Protocol):
    @property
    def ending(self) -> Ending | None: ...
    @property
    def started_at(self) -> float | None: ...


def in_a_row(attempts: Iterable[_Attempt]) -> int:
    """How many of the newest attempts ended for lack of capacity before they ran, in a row (an
    attempt that ran, or ended otherwise, ends the run)."""
    count = 0
    for attempt in reversed(tuple(attempts)):
        if attempt.ending is not Ending.CAPACITY or attempt.started_at is not None:
            break
        count += 1
    return count


def wait_seconds(stockouts: int, capacity_retry_seconds: float, rng: random.Random) -> float:
    """The wait before the next attempt after `stockouts` stockouts before start in a row (the
    one just decided included): 0 after the first."""
    if stockouts <= 1:
        return 0.0
    ceiling: float = capacity_retry_seconds * FIRST_WAIT_SHARE * 2.0 ** min(stockouts - 2, 32)
    return min(ceiling, capacity_retry_seconds) * rng.uniform(1.0, 1.0 + JITTER)
