"""Small helpers for tests and tools that drive the stand-in through the real client."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta

import grpc
from google.cloud.aiplatform_v1 import (
    ContainerSpec,
    CustomJob,
    CustomJobSpec,
    EnvVar,
    JobServiceClient,
    Scheduling,
    WorkerPoolSpec,
)
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport


def job_service_client(host_port: str) -> JobServiceClient:
    """A real JobServiceClient on a plaintext channel (a passed channel skips credentials)."""
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(host_port)))


def command_job(
    display_name: str,
    pools: Sequence[tuple[int, Sequence[str]]],
    *,
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_seconds: float | None = None,
    base_output_directory: str | None = None,
    strategy: str | None = None,
    disable_retries: bool | None = None,
    max_wait_seconds: float | None = None,
) -> CustomJob:
    """A CustomJob whose pool i runs ``pools[i] = (replica_count, command)``; ``strategy`` is a
    Scheduling.Strategy name (unset: Vertex's default, STANDARD)."""
    worker_pools = [
        WorkerPoolSpec(
            replica_count=count,
            container_spec=ContainerSpec(
                image_uri="us-docker.pkg.dev/relaunch-dev/devstack/trainer:latest",
                command=list(command),
                env=[EnvVar(name=k, value=v) for k, v in (env or {}).items()],
            ),
        )
        for count, command in pools
    ]
    spec = CustomJobSpec(worker_pool_specs=worker_pools)
    if timeout_seconds is not None:
        spec.scheduling.timeout = timedelta(seconds=timeout_seconds)
    if strategy is not None:
        spec.scheduling.strategy = Scheduling.Strategy[strategy]
    if disable_retries is not None:
        spec.scheduling.disable_retries = disable_retries
    if max_wait_seconds is not None:
        spec.scheduling.max_wait_duration = timedelta(seconds=max_wait_seconds)
    if base_output_directory is not None:
        spec.base_output_directory = {"output_uri_prefix": base_output_directory}
    return CustomJob(display_name=display_name, labels=dict(labels or {}), job_spec=spec)


def wait_until(predicate, timeout: float, what: str = "condition", interval: float = 0.05) -> None:
    """Wait for something outside the emulator (a file a replica writes) with a deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def process_alive(pid: int) -> bool:
    """True if ``pid`` runs; an unreaped zombie counts as gone (it no longer executes)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The state letter follows the parenthesised command name, which may hold spaces.
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
