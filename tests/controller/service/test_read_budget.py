"""The Vertex read budget serves a recovery first: the read of a running attempt (whose only next
state is its end) may spend the reserve that routine reads leave, while the reads of an attempt
still starting are routine. On devstack with the real controller; the budget's grants recorded."""

from __future__ import annotations

from controller.adapters.ratelimit import RateLimiter
from tests.controller.service.test_endings_devstack import ENDLESS, QUICK_BACKOFF
from tests.support.engine import accept, drive, request, terminal


class RecordedBudget(RateLimiter):
    """The controller's read budget (lifted, so nothing waits), noting each grant's kind."""

    def __init__(self) -> None:
        super().__init__(1_000_000, burst=100_000, reserve=1_000)
        self.kinds: list[bool] = []

    def acquire(self, timeout: float | None = None, *, urgent: bool = False) -> bool:
        self.kinds.append(urgent)
        return super().acquire(timeout, urgent=urgent)


def test_a_reclaimed_running_attempt_is_read_urgently_and_a_starting_one_routinely(
    devstack, bucket, make_engine
):
    engine = make_engine()
    budget = engine.vertex.reads = RecordedBudget()
    accept(engine, request("urgent-1", bucket, args=ENDLESS, policy={"backoff": QUICK_BACKOFF}), {})
    doc = drive(engine, "urgent-1", lambda d: d["phase"] == "running")
    # Until it ran, each read (the passes' listings, the starting attempt's Gets) was routine.
    assert budget.kinds and not any(budget.kinds)

    budget.kinds.clear()
    assert devstack.vertex.preempt(doc["attempts"][0]["vertexJob"], grace_seconds=0, end_job=True)
    engine.on_hint(doc["attempts"][0]["vertexJob"].rsplit("/", 1)[-1])  # the ending's event

    # The look that read the ending spent the reserve; the reclaim was decided from that read.
    assert budget.kinds[:1] == [True]
    doc = drive(engine, "urgent-1", lambda d: d["attempt"] == 2)
    assert doc["attempts"][0]["ending"] == "preempted" and doc["preemptions"] == 1
    engine.cancel("urgent-1")
    assert drive(engine, "urgent-1", terminal)["phase"] == "cancelled"
