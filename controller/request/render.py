"""Render the Vertex AI CustomJob that Relaunch submits for one attempt of a job request.

The controller daemon and `relaunch render` both use `build_custom_job`, so what the CLI prints
is exactly what would be created. Rules (also in docs/requests.md):

- the user's jobSpec is copied, never changed in place;
- labels: the request's labels plus `relaunch-job`, `relaunch-attempt`, `managed-by`;
- display name: `<displayName or jobId> [attempt N]`, cut to Vertex's 128 characters;
- every non-empty pool's container gets RELAUNCH_JOB_ID, RELAUNCH_ATTEMPT,
  RELAUNCH_CHECKPOINT_URI and RELAUNCH_RESUME_FROM (empty = start fresh or from the latest
  committed checkpoint), replacing any user value of the same name; with a checkpoint interval
  (the request's fixed seconds, or the controller's choice for `auto`) also
  RELAUNCH_CHECKPOINT_INTERVAL_SECONDS, replacing the user's; without one the user's is kept;
- a placement (the one chosen for the attempt from the request's `placements`): each pool's
  machine type, accelerator type and count and replica count, and the scheduling strategy
  (FLEX_START with the placement's maxWait) are the placement's; the region is where the
  CustomJob is created (the submit's, not the spec's);
- replica counts: the attempt's own size where the controller chose one (an elastic job,
  `minReplicaCount`, which Vertex does not know and never sees; with a placement too, the
  smaller of the two per pool), else the placement's, else the request's;
- scheduling strategy: STANDARD (on-demand; `ON_DEMAND` is deprecated) when `on_demand` is set;
  the stockout fallback's (`restartPolicy.fallbackAfterStockout`) once it fell due;
  SPOT when the user set none (Relaunch exists for Spot capacity, and Vertex's own default would
  be STANDARD); the user's otherwise;
- Vertex's own retries: `disableRetries: true` unless the request sets `disableRetries` or
  `restartJobOnWorkerRestart` itself, so that every restart is one Relaunch sees, counts and
  resumes from the latest committed checkpoint (reasoning in docs/contracts.md).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2, json_format

from controller.core.placement import Placement
from controller.request import RELAUNCH_ENV_NAMES, JobRequest
from controller.request.aiplatform import aiplatform_v1 as vertex
from controller.request.labels import labels_for
from controller.request.limits import EXPLICIT_SCHEDULING_FIELDS
from trainer.layout import CHECKPOINT_INTERVAL_ENV

VERTEX_MAX_DISPLAY_NAME = 128

__all__ = ["build_custom_job", "custom_job_to_rest", "display_name_for", "labels_for"]


def display_name_for(request: JobRequest, attempt: int) -> str:
    """`<displayName or jobId> [attempt N]`, at most 128 characters.

    The suffix is kept whole (it is what tells attempts apart in the console); the name is cut.
    """
    suffix = f" [attempt {attempt}]"
    name = request.display_name or request.job_id
    return name[: max(0, VERTEX_MAX_DISPLAY_NAME - len(suffix))] + suffix


def _relaunch_env(request: JobRequest, attempt: int, resume_from: str | None) -> list[vertex.EnvVar]:
    values = {
        "RELAUNCH_JOB_ID": request.job_id,
        "RELAUNCH_ATTEMPT": str(attempt),
        "RELAUNCH_CHECKPOINT_URI": request.checkpoint_uri,
        "RELAUNCH_RESUME_FROM": resume_from or "",
    }
    return [vertex.EnvVar(name=name, value=values[name]) for name in RELAUNCH_ENV_NAMES]


def _with_relaunch_env(env: Any, ours: list[vertex.EnvVar]) -> list:
    """The user's variables (in their order) minus any of the names we set, then ours."""
    replaced = set(RELAUNCH_ENV_NAMES) | {entry.name for entry in ours}
    kept = [vertex.EnvVar(name=entry.name, value=entry.value) for entry in env if entry.name not in replaced]
    return kept + ours


def interval_env_value(seconds: float) -> str:
    """The variable's text: whole seconds when whole, else millisecond precision."""
    return f"{seconds:.0f}" if float(seconds).is_integer() else f"{seconds:.3f}"


def _user_set_vertex_retries(request: JobRequest) -> bool:
    """Whether the request itself says how Vertex should retry (false included, which a proto3
    bool cannot tell from unset: hence the request as written)."""
    scheduling = request.job_spec_rest.get("scheduling") or {}
    return any(name in scheduling for names in EXPLICIT_SCHEDULING_FIELDS.values() for name in names)


def build_custom_job(
    request: JobRequest,
    attempt: int,
    *,
    resume_from: str | None = None,
    on_demand: bool = False,
    checkpoint_interval_seconds: float | None = None,
    replicas: tuple[int, ...] | None = None,
    strategy: str | None = None,
    placement: Placement | None = None,
) -> vertex.CustomJob:
    """The CustomJob for attempt `attempt` (1-based) of `request`.

    `checkpoint_interval_seconds` is what the controller chose for this attempt (for an `auto`
    request); None renders the request's fixed interval, if it has one. `replicas`: the attempt's
    replica count per pool (an elastic job's chosen size); None keeps the request's. `strategy`:
    the stockout fallback's (`STANDARD` or `FLEX_START`, controller/core/fallback.py), unless
    `on_demand` asks for STANDARD anyway."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt counts from 1 (got {attempt!r})")
    spec = vertex.CustomJobSpec.deserialize(vertex.CustomJobSpec.serialize(request.job_spec))

    ours = _relaunch_env(request, attempt, resume_from)
    setting = request.checkpoint_interval
    if checkpoint_interval_seconds is None and setting is not None and not setting.auto:
        checkpoint_interval_seconds = setting.fixed_seconds
    if checkpoint_interval_seconds is not None:
        ours.append(
            vertex.EnvVar(name=CHECKPOINT_INTERVAL_ENV, value=interval_env_value(checkpoint_interval_seconds))
        )
    if placement is not None:
        _place(spec, placement)
        if replicas is not None and len(replicas) == len(placement.pools):
            # An elastic job's size and the placement's: the smaller of the two, pool by pool.
            replicas = tuple(min(n, p.replica_count) for n, p in zip(replicas, placement.pools, strict=True))
    if replicas is not None:
        if len(replicas) != len(spec.worker_pool_specs):
            raise ValueError(
                f"replicas {replicas} name {len(replicas)} pools, the job has {len(spec.worker_pool_specs)}"
            )
        for pool, count in zip(spec.worker_pool_specs, replicas, strict=True):
            if pool.replica_count > 0:  # an empty placeholder pool stays empty
                pool.replica_count = count
    for pool in spec.worker_pool_specs:
        # Empty `{}` pools are placeholders Vertex skips; giving them env would make them real.
        if "container_spec" in pool:
            pool.container_spec.env = _with_relaunch_env(pool.container_spec.env, ours)
        elif "python_package_spec" in pool:
            pool.python_package_spec.env = _with_relaunch_env(pool.python_package_spec.env, ours)

    strategies = vertex.Scheduling.Strategy
    if placement is not None:
        pass  # the placement set the strategy
    elif on_demand or strategy == "STANDARD":
        spec.scheduling.strategy = strategies.STANDARD
        # maxWaitDuration applies to FLEX_START only; Vertex rejects it with STANDARD.
        spec.scheduling.max_wait_duration = None
    elif strategy == "FLEX_START":
        spec.scheduling.strategy = (
            strategies.FLEX_START
        )  # maxWaitDuration: the request's, or Vertex's default
    elif spec.scheduling.strategy == strategies.STRATEGY_UNSPECIFIED:
        spec.scheduling.strategy = strategies.SPOT
    if not _user_set_vertex_retries(request):
        spec.scheduling.disable_retries = True

    return vertex.CustomJob(
        display_name=display_name_for(request, attempt),
        job_spec=spec,
        labels={**request.labels, **labels_for(request.job_id, attempt)},
    )


def placement_named(request: JobRequest, name: str | None) -> Placement | None:
    """The request's placement of that name (None: none asked for)."""
    if name is None:
        return None
    for placement in request.placements:
        if placement.name == name:
            return placement
    raise ValueError(f"job {request.job_id} has no placement {name!r}")


def _place(spec: vertex.CustomJobSpec, placement: Placement) -> None:
    """The placement's machines, sizes and strategy, pool by pool (validation made sure there is
    one placement pool per workerPoolSpec)."""
    if len(placement.pools) != len(spec.worker_pool_specs):
        raise ValueError(
            f"placement {placement.name} names {len(placement.pools)} pools, the job has "
            f"{len(spec.worker_pool_specs)}"
        )
    for pool, mine in zip(spec.worker_pool_specs, placement.pools, strict=True):
        if pool.replica_count == 0 and "machine_spec" not in pool:
            continue  # an empty placeholder pool stays empty
        pool.machine_spec.machine_type = mine.machine_type
        pool.machine_spec.accelerator_type = (
            vertex.AcceleratorType[mine.accelerator_type]
            if mine.accelerator_type
            else vertex.AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED
        )
        pool.machine_spec.accelerator_count = mine.accelerator_count
        pool.replica_count = mine.replica_count
    strategy = vertex.Scheduling.Strategy
    spec.scheduling.strategy = strategy[placement.strategy]
    if placement.strategy == "FLEX_START":
        if placement.max_wait_seconds is not None:
            spec.scheduling.max_wait_duration = duration_pb2.Duration(seconds=int(placement.max_wait_seconds))
    else:
        # maxWaitDuration applies to FLEX_START only; Vertex rejects it with the others.
        spec.scheduling.max_wait_duration = None


def custom_job_to_rest(job: vertex.CustomJob) -> dict:
    """The CustomJob as Vertex's REST API shows it: camelCase JSON, int64 values as strings."""
    return json_format.MessageToDict(vertex.CustomJob.pb(job))
