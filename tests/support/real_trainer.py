"""Requests that run the real trainer (`python -m trainer`, DDP on gloo, CPU) in devstack's
replicas, and what a test reads back from it: the chief's log, the commit markers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainer import storage

REPO = Path(__file__).resolve().parents[2]
PACED = "tests.support.paced_model:build_model"


def trainer_request(
    job_id: str,
    bucket: str,
    *,
    steps: int,
    every: int = 3,
    replicas: int = 1,
    policy: dict | None = None,
    env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
    fields: dict | None = None,
) -> bytes:
    """A Spot job of `replicas` nodes (one process each) training the paced tiny GPT; every commit
    kept, so a test can tell which attempt committed which step. `worker_env` is added to the
    workers' pool (workerpool1) only; `fields` are further request fields (e.g. placements)."""
    command = [sys.executable, "-m", "trainer", "--model", PACED, "--nproc-per-node", "1"]
    args = ["--steps", str(steps), "--checkpoint-every-steps", str(every), "--keep-last", "100000"]
    args += ["--batch-size", "4", "--log-every", "1", "--rendezvous-timeout", "120"]
    variables = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": command,
            "args": args,
            "env": [{"name": k, "value": v} for k, v in variables.items()],
        },
    }
    pools = [pool]
    if replicas > 1:
        workers = {**variables, **(worker_env or {})}
        container = {**pool["containerSpec"], "env": [{"name": k, "value": v} for k, v in workers.items()]}
        pools.append({**pool, "replicaCount": replicas - 1, "containerSpec": container})
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": pools, "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
        "restartPolicy": policy or {"maxFailures": 0},
        **(fields or {}),
    }
    return json.dumps(body).encode()


def checkpoint_root(bucket: str, job_id: str) -> str:
    return f"gs://{bucket}/{job_id}"


def committed_by_attempt(root: str) -> dict[int, int]:
    """Every committed step, with the attempt whose commit marker it is."""
    store = storage.open_storage(root)
    found = {}
    for step in storage.list_committed_steps(store):
        marker = storage.read_marker(store, step)
        if marker is not None:
            found[step] = marker.attempt
    return found


def newest_committed_by(root: str, attempt: int) -> int | None:
    """The newest step whose commit marker an attempt up to `attempt` wrote."""
    return max((step for step, by in committed_by_attempt(root).items() if by <= attempt), default=None)


def chief_records(devstack, vertex_job: str, vertex=None) -> list[dict]:
    """The JSON log records of the chief replica (launcher and rank 0) of one CustomJob; `vertex`:
    the stand-in that ran it, when not the session devstack's (another region's)."""
    path = (vertex or devstack.vertex).replica_log(vertex_job)
    records = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def resumed_from(devstack, vertex_job: str, vertex=None) -> int | None:
    """The step the trainer says it resumed from; None if it started fresh (or not yet)."""
    for record in chief_records(devstack, vertex_job, vertex):
        if record.get("message") == "resumed":
            return record["from_step"]
    return None


def trained_steps(devstack, vertex_job: str) -> list[int]:
    return [r["step"] for r in chief_records(devstack, vertex_job) if r.get("message") == "train"]
