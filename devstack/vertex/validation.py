"""Checks CreateCustomJob applies before accepting a job, with messages in Vertex's spirit.

Besides Vertex's own rules, devstack refuses what it cannot run: a pool without an explicit
``command`` (there is no image whose entrypoint could run) and ``python_package_spec`` pools.
"""

from __future__ import annotations

import re

from google.cloud.aiplatform_v1 import CustomJob, WorkerPoolSpec

MAX_DISPLAY_NAME = 128
MAX_LABELS = 64
MAX_ENV_ENTRIES = 100
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def _label_problem(labels) -> str | None:
    if len(labels) > MAX_LABELS:
        return f"A resource may have at most {MAX_LABELS} labels, got {len(labels)}."
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            return f"Invalid label key {key!r}: lowercase letters, digits, '_' and '-', starting with a letter, at most 63 characters."
        if not _LABEL_VALUE.fullmatch(value):
            return f"Invalid value {value!r} for label {key!r}: lowercase letters, digits, '_' and '-', at most 63 characters."
    return None


def _is_empty_pool(pool: WorkerPoolSpec) -> bool:
    # Vertex lets a caller skip a pool (say pool 2) by sending an empty spec in its place.
    return pool.replica_count == 0 and "container_spec" not in pool and "python_package_spec" not in pool


def _pool_problem(index: int, pool: WorkerPoolSpec) -> str | None:
    where = f"job_spec.worker_pool_specs[{index}]"
    if "python_package_spec" in pool:
        return f"{where}.python_package_spec is not emulated by devstack; use container_spec with a command."
    if "container_spec" not in pool:
        return f"{where}.container_spec is required."
    if pool.replica_count < 1:
        return f"{where}.replica_count must be at least 1."
    if index == 0 and pool.replica_count != 1:
        return f"{where}.replica_count must be 1: worker pool 0 holds exactly the primary replica."
    container = pool.container_spec
    if not container.image_uri:
        return f"{where}.container_spec.image_uri is required."
    if not container.command:
        return (
            f"{where}.container_spec.command is required by devstack (it cannot run an image's entrypoint)."
        )
    if len(container.env) > MAX_ENV_ENTRIES:
        return f"{where}.container_spec.env may hold at most {MAX_ENV_ENTRIES} entries."
    return None


def validate_custom_job(job: CustomJob) -> str | None:
    """None if ``job`` may be created, else the INVALID_ARGUMENT message."""
    if not job.display_name:
        return "custom_job.display_name is required."
    if len(job.display_name) > MAX_DISPLAY_NAME:
        return f"custom_job.display_name must be at most {MAX_DISPLAY_NAME} characters."
    problem = _label_problem(job.labels)
    if problem:
        return problem
    pools = list(job.job_spec.worker_pool_specs)
    if not pools or _is_empty_pool(pools[0]):
        return "job_spec.worker_pool_specs[0] is required: it describes the primary replica."
    for index, pool in enumerate(pools):
        if index > 0 and _is_empty_pool(pool):
            continue
        problem = _pool_problem(index, pool)
        if problem:
            return problem
    if job.job_spec.scheduling.timeout.total_seconds() < 0:
        return "job_spec.scheduling.timeout must not be negative."
    return None
