"""`placements` and `objective`: where else a job's attempts may run, and what to choose them by.

The field models (`PlacementModel`, `OBJECTIVES`) are checked one by one like every field; then
`placement_problems` checks the placements against the jobSpec and each other: every alternative
must be able to resume the checkpoint any other wrote, so each has one pool per workerPoolSpec,
the same accelerators per replica, and a replica count the job may run at (its replicaCount, or,
for a pool with minReplicaCount, anything between: the range shrink-to-fit resumes across with
its batch-size rule). The choice between them is `controller.core.placement`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from controller.core.placement import Objective, Placement, Pool
from controller.core.prices import Priced, PriceTable
from controller.request.aiplatform import aiplatform_v1
from controller.request.fields import _Strict, parse_duration, problems_from_pydantic
from controller.request.problems import Problem

PLACEMENT_NAME_PATTERN = "^[a-z][a-z0-9-]{0,39}$"
REGION_PATTERN = "^[a-z]+-[a-z]+[0-9]+$"
OBJECTIVES = tuple(o.value for o in Objective)

# Dynamic Workload Scheduler (FLEX_START) requirements, from "Schedule training jobs based on
# resource availability" (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws):
# the job requests L4, A100, H100, H200 or B200 GPUs, its timeout is at most 7 days, and every
# worker pool uses the same machine configuration. (maxWaitDuration has no documented upper
# bound: 0 waits indefinitely, unset is 1 day.)
FLEX_START_ACCELERATORS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)
FLEX_START_MAX_TIMEOUT = timedelta(days=7)


class PoolModel(_Strict):
    """One workerPoolSpec's machines in a placement (in the jobSpec's pool order)."""

    machine_type: str = Field(min_length=1, max_length=64, description="e.g. a3-highgpu-8g")
    accelerator_type: str = Field("", max_length=64, description="e.g. NVIDIA_H100_80GB; '' for none")
    accelerator_count: int = Field(0, ge=0, le=16)
    replica_count: int = Field(ge=1, le=1024)

    @field_validator("accelerator_type")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        # The name the CustomJob is rendered with (aiplatform_v1 AcceleratorType).
        if value and value not in aiplatform_v1.AcceleratorType.__members__:
            raise ValueError(f"is not a Vertex AI accelerator type such as NVIDIA_H100_80GB (got {value!r})")
        return value


class PlacementModel(_Strict):
    """One alternative for where and how an attempt runs."""

    name: str = Field(pattern=PLACEMENT_NAME_PATTERN, description="Shown on the timeline.")
    region: str = Field(pattern=REGION_PATTERN, description="Vertex region, e.g. us-central1")
    worker_pools: list[PoolModel] = Field(min_length=1, max_length=4)
    strategy: Literal["SPOT", "FLEX_START", "STANDARD"]
    price_per_node_hour: float | None = Field(
        None,
        ge=0,
        le=10000,
        description="Dollars per replica-hour; omitted: the price table's (RELAUNCH_PRICE_TABLE).",
    )
    max_wait: Any = Field(
        None,
        description="FLEX_START only: how long the Dynamic Workload Scheduler may queue the request "
        "(seconds, or '90s', '15m', '2h').",
        json_schema_extra={"type": ["number", "string"]},
    )

    @field_validator("max_wait")
    @classmethod
    def _valid_max_wait(cls, value: Any) -> Any:
        if value is not None:
            parse_duration(value, "maxWait")
        return value

    def pools(self) -> tuple[Pool, ...]:
        return tuple(
            Pool(p.machine_type, p.accelerator_type, p.accelerator_count, p.replica_count)
            for p in self.worker_pools
        )

    def priced(self, prices: PriceTable) -> Priced | None:
        """The table's price where the request names none; None where it names one (or the
        table has none: `placement_problems` reports that)."""
        if self.price_per_node_hour is not None:
            return None
        return prices.price(self.region, self.pools(), self.strategy)

    def to_placement(self, prices: PriceTable) -> Placement:
        priced = self.priced(prices)
        price = priced.price_per_node_hour if priced is not None else self.price_per_node_hour
        assert price is not None  # placement_problems refused a placement with neither
        return Placement(
            name=self.name,
            region=self.region,
            pools=self.pools(),
            strategy=self.strategy,
            price_per_node_hour=price,
            max_wait_seconds=None if self.max_wait is None else parse_duration(self.max_wait, "maxWait"),
        )


def parse_placements(raw: Any) -> tuple[list[PlacementModel] | None, list[Problem]]:
    """Each written placement checked as a field; (models, problems) with the items' paths."""
    if raw is None or not isinstance(raw, list):
        return None, []  # absent, or not a list: JobRequestModel says so
    models, problems = [], []
    for index, item in enumerate(raw):
        try:
            models.append(PlacementModel.model_validate(item))
        except ValidationError as error:
            problems.extend(
                Problem(f"placements[{index}].{p.field}" if p.field else f"placements[{index}]", p.reason)
                for p in problems_from_pydantic(error, PlacementModel)
            )
    return models, problems


def placement_to_json(placement: Placement, from_table: bool = False) -> dict[str, Any]:
    """The canonical request form of one placement; a price from the table is left out, so the
    request's fingerprint does not change with the controller's configuration."""
    document: dict[str, Any] = {
        "name": placement.name,
        "region": placement.region,
        "workerPools": [
            {
                "machineType": p.machine_type,
                "acceleratorType": p.accelerator_type,
                "acceleratorCount": p.accelerator_count,
                "replicaCount": p.replica_count,
            }
            for p in placement.pools
        ],
        "strategy": placement.strategy,
    }
    if not from_table:
        document["pricePerNodeHour"] = placement.price_per_node_hour
    if placement.max_wait_seconds is not None:
        document["maxWait"] = placement.max_wait_seconds
    return document


def placement_problems(
    placements: list[PlacementModel] | None,
    objective: str | None,
    deadline: str | None,
    spec: Any,
    minimums: dict[int, int],
    prices: PriceTable,
) -> list[Problem]:
    """Problems of the placements against the jobSpec (parsed) and each other."""
    problems: list[Problem] = []
    if not placements:
        if objective is not None:
            problems.append(Problem("objective", "has no effect without placements"))
        if deadline is not None:
            problems.append(Problem("deadline", "has no effect without placements"))
        return problems
    if deadline is not None and not _is_rfc3339(deadline):
        problems.append(
            Problem("deadline", f"must be an RFC 3339 time such as 2026-12-01T18:00:00Z (got {deadline!r})")
        )
    if (objective == Objective.COST_UNDER_DEADLINE.value) != (deadline is not None):
        problems.append(
            Problem(
                "deadline", f"is required with objective {Objective.COST_UNDER_DEADLINE.value}, and only then"
            )
        )
    seen: dict[str, int] = {}
    pools = list(spec.worker_pool_specs)
    for index, placement in enumerate(placements):
        where = f"placements[{index}]"
        if placement.name in seen:
            problems.append(Problem(f"{where}.name", f"repeats placements[{seen[placement.name]}].name"))
        seen.setdefault(placement.name, index)
        if placement.max_wait is not None and placement.strategy != "FLEX_START":
            problems.append(Problem(f"{where}.maxWait", "applies to FLEX_START only"))
        problems.extend(_price_problems(where, placement, prices))
        if placement.strategy == "FLEX_START":
            problems.extend(_flex_start_problems(where, placement, spec))
        if len(placement.worker_pools) != len(pools):
            problems.append(
                Problem(
                    f"{where}.workerPools",
                    f"must have one entry per jobSpec.workerPoolSpecs ({len(pools)}), so that every "
                    f"placement can resume the same checkpoint (got {len(placement.worker_pools)})",
                )
            )
            continue
        for k, (mine, theirs) in enumerate(zip(placement.worker_pools, pools, strict=True)):
            path = f"{where}.workerPools[{k}]"
            spec_count = int(theirs.replica_count)
            per_replica = int(theirs.machine_spec.accelerator_count)
            if mine.accelerator_count != per_replica:
                problems.append(
                    Problem(
                        f"{path}.acceleratorCount",
                        f"must equal jobSpec.workerPoolSpecs[{k}]'s ({per_replica}): a replica's "
                        f"processes are the checkpoint's shards (got {mine.accelerator_count})",
                    )
                )
            low = minimums.get(k, spec_count)
            if not (low <= mine.replica_count <= spec_count):
                rule = (
                    f"between its minReplicaCount ({low}) and replicaCount ({spec_count})"
                    if low != spec_count
                    else f"equal to jobSpec.workerPoolSpecs[{k}].replicaCount ({spec_count}); set "
                    "minReplicaCount there to allow fewer"
                )
                problems.append(Problem(f"{path}.replicaCount", f"must be {rule} (got {mine.replica_count})"))
    return problems


def _flex_start_problems(where: str, placement: PlacementModel, spec: Any) -> list[Problem]:
    """What Vertex requires of a job scheduled by the Dynamic Workload Scheduler (see
    FLEX_START_ACCELERATORS' source), checked here so it is a field error, not a refused attempt."""
    problems = []
    rule = "(Vertex's Dynamic Workload Scheduler requirement)"
    for k, pool in enumerate(placement.worker_pools):
        if pool.accelerator_type not in FLEX_START_ACCELERATORS or pool.accelerator_count < 1:
            problems.append(
                Problem(
                    f"{where}.workerPools[{k}].acceleratorType",
                    f"FLEX_START needs GPUs, one of {', '.join(FLEX_START_ACCELERATORS)} {rule} (got "
                    f"{pool.accelerator_type or 'none'} x {pool.accelerator_count})",
                )
            )
    first = placement.worker_pools[0]
    for k, pool in enumerate(placement.worker_pools[1:], start=1):
        if (pool.machine_type, pool.accelerator_type, pool.accelerator_count) != (
            first.machine_type,
            first.accelerator_type,
            first.accelerator_count,
        ):
            problems.append(
                Problem(
                    f"{where}.workerPools[{k}]",
                    f"FLEX_START needs the same machines in every pool as workerPools[0] "
                    f"({first.machine_type}, {first.accelerator_type or 'no accelerator'} x "
                    f"{first.accelerator_count}) {rule}",
                )
            )
    timeout = spec.scheduling.timeout if "scheduling" in spec else None
    if timeout and timeout > FLEX_START_MAX_TIMEOUT:
        problems.append(
            Problem(
                f"{where}.strategy",
                f"FLEX_START needs jobSpec.scheduling.timeout at most 7 days {rule} (got {timeout})",
            )
        )
    return problems


def _price_problems(where: str, placement: PlacementModel, prices: PriceTable) -> list[Problem]:
    """A placement without pricePerNodeHour needs the table's price for every one of its pools."""
    if placement.price_per_node_hour is not None:
        return []
    missing = prices.missing(placement.region, placement.pools(), placement.strategy)
    if not missing:
        return []
    shapes = ", ".join(
        f"workerPools[{k}] ({placement.worker_pools[k].machine_type}"
        f"{' ' + placement.worker_pools[k].accelerator_type if placement.worker_pools[k].accelerator_type else ''})"
        for k in missing
    )
    return [
        Problem(
            f"{where}.pricePerNodeHour",
            f"is required: the controller's price table (RELAUNCH_PRICE_TABLE) has no {placement.strategy} "
            f"price in {placement.region} for {shapes}",
        )
    ]


def _is_rfc3339(text: str) -> bool:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None
