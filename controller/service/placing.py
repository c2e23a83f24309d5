"""The shell of the placement choice: the facts the core chooses a job's placement from.

The core (`controller.core.placement_choice`) chooses; this module only reads what it needs from
outside the job's state, once per attempt that wants a placement: the rate book's estimate for
each placement's capacity class (the same discounted book the checkpoint interval reads), the
job's checkpoint cost from its commit markers, and the request's placements and objective.

Where the checkpoint lives: the job's checkpoint root is one location for every placement, and
a multi-region or dual-region bucket is what keeps it readable from every region a placement
names without a copy (docs/multi-region.md). So the choice is told there is nothing to copy
(`Transfer(None)`); reading across regions costs egress, which the price per node hour of a
placement far from the bucket can carry.
"""

from __future__ import annotations

from datetime import datetime

from controller.core.adaptive_interval import estimate_for
from controller.core.placement import JobCosts, Objective, Transfer
from controller.core.placement_choice import DEFAULT_REMAINING_UNITS, PlacementInputs
from controller.request import JobRequest
from controller.service.interval import IntervalKeeper

# Start-up and restore of an attempt (R) before any is measured: provisioning the machines,
# pulling the image, loading the checkpoint. A few minutes on Vertex; the same for every
# placement, so it shifts no comparison much.
DEFAULT_RESTART_SECONDS = 300.0


def placement_inputs(request: JobRequest, intervals: IntervalKeeper) -> PlacementInputs | None:
    """None for a job without placements (it runs as its jobSpec says)."""
    if not request.placements:
        return None
    book = intervals.ledger().book
    rates = {
        p.name: estimate_for(book, p.capacity_class(), intervals.prior(p.capacity_class()))
        for p in request.placements
    }
    cost = intervals.cost(request)
    deadline_at = (
        datetime.fromisoformat(request.deadline.replace("Z", "+00:00")).timestamp()
        if request.deadline is not None
        else None
    )
    return PlacementInputs(
        placements=request.placements,
        objective=request.objective or Objective.LOWEST_COST,
        deadline_at=deadline_at,
        rates=rates,
        costs=JobCosts(
            checkpoint_stall=cost.stall_seconds,
            checkpoint_write=cost.write_seconds,
            restart=DEFAULT_RESTART_SECONDS,
            remaining_units=DEFAULT_REMAINING_UNITS,
        ),
        transfer=Transfer(checkpoint_region=None),
        half_life_seconds=intervals.settings.estimate_half_life_seconds,
        price_sources=dict(request.price_sources),
    )
