"""The capacity class an attempt draws on, read from its rendered CustomJob.

Attempts in one class (region, machine type, accelerator, scheduling strategy) share a pool of
machines and so a reclaim rate (`controller.core.checkpoint_interval.CapacityClass`). A job's
pools may differ; the class is that of its first non-empty pool (the chief's), since a gang
ends when any node is reclaimed and the chief's pool is the one users size first. A job with a
GPU worker pool behind a CPU chief gets the first pool that has an accelerator.
"""

from __future__ import annotations

from controller.core.checkpoint_interval import CapacityClass
from controller.request.aiplatform import aiplatform_v1 as vertex


def capacity_class(job: vertex.CustomJob, region: str) -> CapacityClass:
    spec = job.job_spec
    pools = [pool for pool in spec.worker_pool_specs if pool.replica_count > 0 or "machine_spec" in pool]
    with_accelerator = [
        p
        for p in pools
        if p.machine_spec.accelerator_type != vertex.AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED
    ]
    chosen = (with_accelerator or pools or [None])[0]
    machine_type = chosen.machine_spec.machine_type if chosen is not None else ""
    accelerator = (
        vertex.AcceleratorType(chosen.machine_spec.accelerator_type).name
        if chosen is not None and chosen.machine_spec.accelerator_type
        else ""
    )
    strategy = vertex.Scheduling.Strategy(spec.scheduling.strategy).name
    return CapacityClass(
        region=region,
        machine_type=machine_type,
        accelerator=accelerator,
        scheduling_strategy="STANDARD" if strategy == "ON_DEMAND" else strategy,
    )
