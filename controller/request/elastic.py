"""`minReplicaCount` in a workerPoolSpec and the `elastic` block: a job's elastic range.

Vertex's WorkerPoolSpec has no `minReplicaCount`, so it is taken out of the jobSpec before the
Vertex library validates the rest (an unknown field there is a typo) and never reaches Vertex;
`render` sets each pool's `replicaCount` to the size the controller chose for the attempt.
"""

from __future__ import annotations

from typing import Any

from controller.core.elastic import ElasticPolicy
from controller.request.fields import ElasticModel, parse_grow_back
from controller.request.problems import Problem, format_path, short_repr

MIN_REPLICA_FIELD = "minReplicaCount"
# The proto spelling, accepted as every Vertex field's is.
MIN_REPLICA_SPELLINGS = (MIN_REPLICA_FIELD, "min_replica_count")


def split_min_replicas(spec_rest: Any) -> tuple[Any, dict[int, int], list[Problem]]:
    """(the jobSpec without minReplicaCount, {pool index: minimum}, problems)."""
    if not isinstance(spec_rest, dict) or not isinstance(spec_rest.get("workerPoolSpecs"), list):
        return spec_rest, {}, []
    pools = []
    minimums: dict[int, int] = {}
    problems: list[Problem] = []
    for index, pool in enumerate(spec_rest["workerPoolSpecs"]):
        spelling = next(
            (name for name in MIN_REPLICA_SPELLINGS if isinstance(pool, dict) and name in pool), None
        )
        if spelling is None:
            pools.append(pool)
            continue
        value = pool[spelling]
        path = format_path(("jobSpec", "workerPoolSpecs", index, spelling))
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(Problem(path, f"must be an integer (got {short_repr(value)})"))
        elif value < 1:
            problems.append(
                Problem(path, f"must be at least 1: a pool cannot shrink to nothing (got {value})")
            )
        else:
            minimums[index] = value
        pools.append({key: item for key, item in pool.items() if key not in MIN_REPLICA_SPELLINGS})
    return {**spec_rest, "workerPoolSpecs": pools}, minimums, problems


def elastic_policy(
    spec: Any, minimums: dict[int, int], block: ElasticModel | None, block_written: bool
) -> tuple[ElasticPolicy | None, list[Problem]]:
    """The job's elastic range from the parsed CustomJobSpec and the pools' minimums."""
    if not minimums:
        if block_written:
            return None, [
                Problem(
                    "elastic",
                    f"has no effect: no workerPoolSpec sets {MIN_REPLICA_FIELD} (e.g. "
                    f"{MIN_REPLICA_FIELD}: 1 beside replicaCount: 4 in workerPoolSpecs[1])",
                )
            ]
        return None, []
    full = tuple(int(pool.replica_count) for pool in spec.worker_pool_specs)
    problems = []
    for index, minimum in sorted(minimums.items()):
        path = format_path(("jobSpec", "workerPoolSpecs", index, MIN_REPLICA_FIELD))
        count = full[index] if index < len(full) else 0
        if count == 0:
            problems.append(Problem(path, "is set on an empty pool (no replicaCount)"))
        elif minimum > count:
            problems.append(Problem(path, f"must not exceed replicaCount ({count}) (got {minimum})"))
    if problems:
        return None, problems
    minimum_size = tuple(minimums.get(index, count) for index, count in enumerate(full))
    block = block or ElasticModel()
    grow, after = parse_grow_back(block.grow_back)
    return (
        ElasticPolicy(
            full=full,
            minimum=minimum_size,
            shrink_after_seconds=block.shrink_after_seconds,
            grow_back=grow,
            grow_back_after_seconds=after,
        ),
        [],
    )


def with_min_replicas(spec_rest: dict, policy: ElasticPolicy | None) -> dict:
    """The canonical jobSpec with each elastic pool's minReplicaCount put back."""
    if policy is None:
        return spec_rest
    pools = []
    for index, pool in enumerate(spec_rest.get("workerPoolSpecs", [])):
        if index < len(policy.full) and policy.minimum[index] != policy.full[index]:
            pool = {**pool, MIN_REPLICA_FIELD: policy.minimum[index]}
        pools.append(pool)
    return {**spec_rest, "workerPoolSpecs": pools}
