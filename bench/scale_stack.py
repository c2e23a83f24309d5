"""Shared set-up of the scale benchmarks: devstack, a controller process, many cheap jobs.

Jobs run devstack's simulated replicas (no process; the same JobService lifecycle and log
events), so a thousand of them fit on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def simulated_pool() -> dict[str, Any]:
    """One replica that devstack simulates (no process) and runs until it is stopped."""
    return {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "bench",
            "command": ["true"],
            "env": [{"name": "DEVSTACK_SIMULATED_RUN_SECONDS", "value": "forever"}],
        },
    }


def simulated_request(job_id: str, bucket: str = "bench") -> bytes:
    pool = simulated_pool()
    return json.dumps(
        {
            "jobId": job_id,
            "jobSpec": {"workerPoolSpecs": [pool], "scheduling": {"strategy": "SPOT"}},
            "checkpoint": {"uri": f"gs://{bucket}/ckpt/{job_id}"},
            "restartPolicy": {"backoff": {"initialSeconds": 0, "maxSeconds": 0, "jitter": 0}},
        }
    ).encode()


def wait(check: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)  # polling other processes
    raise SystemExit(f"timed out waiting for {what}")


class Controller:
    """`relaunch controller` as a process of its own."""

    def __init__(
        self, workdir: Path, env: dict[str, str], log_name: str = "controller.log", root: Path = ROOT
    ):
        """`root`: the checkout whose controller runs (another commit's, for a side-by-side bench)."""
        self.port = 18000 + (os.getpid() + len(log_name) * 7) % 2000
        self.log_path = workdir / log_name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "controller"],
            env={
                **os.environ,
                **env,
                "PORT": str(self.port),
                "PYTHONUNBUFFERED": "1",
                **({} if root == ROOT else {"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}),
            },
            stdout=open(self.log_path, "wb"),
            stderr=subprocess.STDOUT,
            cwd=root,
        )

    def http(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as reply:
                body = reply.read()
                return json.loads(body) if path.startswith("/v1") else body.decode()
        except OSError:
            return None

    def wait_leader(self, timeout: float = 120.0) -> None:
        def leader() -> bool:
            if self.proc.poll() is not None:
                raise SystemExit(f"controller exited; see {self.log_path}")
            return "leader" in (self.http("/readyz") or "")

        wait(leader, timeout, "the controller to lead")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def jobs_by_attempt(stack: Any) -> dict[tuple[str, int], Any]:
    """Every Relaunch CustomJob devstack holds, by (job id, attempt)."""
    found = {}
    for job in stack.vertex.jobs():
        job_id, attempt = job.labels.get("relaunch-job"), job.labels.get("relaunch-attempt")
        if job_id and attempt:
            found[(job_id, int(attempt))] = job
    return found


def publish_all(settings: Any, bodies: list[bytes]) -> None:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=500, max_latency=0.05)
    )
    topic = settings.topic_path(settings.requests_topic)
    for future in [publisher.publish(topic, body) for body in bodies]:
        future.result(timeout=120)
    publisher.stop()
