"""From a CustomJob's end to the controller's answer, every setting at its default (a benchmark
script, not a test): for a reclaim, to the replacement's create; for a user error, to the final
decision; for a stockout before start, to the decision and to the next attempt's create (the first
retry after a stockout is created at once: controller/core/stockout.py).

devstack as Google documents it: a reclaim gives 15 s of grace, and the failed job's `error` is
set about a minute after its end. One 2-node Spot job (two pools of one replica) of simulated replicas (no process), the
controller as its own process with default settings and the request's default restart policy.
Before each reclaim the script commits a checkpoint one step further, as a trainer would (a
simulated replica trains nothing), so every reclaim follows progress. The latency is the
reclaimed job's `end_time` to the replacement's `create_time`, both stamped by the Vertex
stand-in's clock.

User errors: a 2-node job whose chief fails as the trainer does when the model raises, with the
chief's and its replica's exit records (bench/failing_replica.py, no torch), maxFailures 0; with
--user-error-retries, the same with maxFailures 1, all at once, to the next attempt's create.
Stockouts: devstack's documented stockout ending (provisioning retried, then FAILED before the
job ran) of one-node jobs, all at once. Decisions are read from the controller's HTTP API every
50 ms against the Vertex stand-in's `end_time` (one clock: both on this machine).

    .venv/bin/python bench/reclaim_decision.py [--reclaims 10] [--user-errors 10] [--stockouts 10]
        [--user-error-retries 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_stack import Controller, jobs_by_attempt, publish_all, simulated_pool, wait

JOB = "reclaim-bench"
ROOT = f"gs://bench/ckpt/{JOB}"
FAILING_REPLICA = Path(__file__).resolve().parent / "failing_replica.py"


def two_node_request() -> bytes:
    pool = simulated_pool()
    return json.dumps(
        {
            "jobId": JOB,
            "jobSpec": {"workerPoolSpecs": [pool, pool], "scheduling": {"strategy": "SPOT"}},
            "checkpoint": {"uri": ROOT},
        }
    ).encode()


def commit_checkpoint(step: int, attempt: int) -> None:
    """What a trainer leaves when it commits step `step`: its shard, then the commit marker."""
    from trainer import layout, storage

    store = storage.open_storage(ROOT)
    payload = json.dumps({"step": step}).encode()
    store.write_bytes(f"{layout.step_dir_name(step)}/shard-0.bin", payload)
    marker = layout.CommitMarker(
        step=step,
        world_size=2,
        engine="bench",
        job_id=JOB,
        attempt=attempt,
        wall_time=layout.utc_now(),
        files=(layout.FileEntry(path="shard-0.bin", size=len(payload), sha256="0" * 64),),
    )
    store.create_only(f"{layout.step_dir_name(step)}/{layout.COMMIT_MARKER_NAME}", marker.to_json().encode())


def user_error_request(job_id: str, max_failures: int = 0) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "bench",
            "command": [sys.executable, str(FAILING_REPLICA), "1.5"],
            "env": [{"name": "PYTHONPATH", "value": str(FAILING_REPLICA.parent.parent)}],
        },
    }
    return json.dumps(
        {
            "jobId": job_id,
            "jobSpec": {"workerPoolSpecs": [pool, pool], "scheduling": {"strategy": "SPOT"}},
            "checkpoint": {"uri": f"gs://bench/ckpt/{job_id}"},
            "restartPolicy": {"maxFailures": max_failures},
        }
    ).encode()


def stockout_request(job_id: str) -> bytes:
    return json.dumps(
        {
            "jobId": job_id,
            "jobSpec": {"workerPoolSpecs": [simulated_pool()], "scheduling": {"strategy": "SPOT"}},
            "checkpoint": {"uri": f"gs://bench/ckpt/{job_id}"},
        }
    ).encode()


def decided_at(controller: Controller, job_id: str, attempt: int) -> float:
    """The wall-clock time the controller's API first shows the attempt's ending."""

    def decided() -> float | None:
        doc = controller.http(f"/v1/jobs/{job_id}")
        attempts = (doc or {}).get("attempts") or []
        return time.time() if len(attempts) >= attempt and attempts[attempt - 1]["ending"] else None

    return wait(decided, 300, f"the decision on {job_id} attempt {attempt}", every=0.05)


def decided_together(
    controller: Controller, job_ids: list[str], attempt: int
) -> dict[str, tuple[float, dict]]:
    """For jobs that end together: when the API first showed each one's ending (all polled in
    one loop, so a late one is not measured late), with the document seen then."""
    seen: dict[str, tuple[float, dict]] = {}

    def all_decided() -> bool | None:
        for job_id in job_ids:
            if job_id in seen:
                continue
            doc = controller.http(f"/v1/jobs/{job_id}") or {}
            attempts = doc.get("attempts") or []
            if len(attempts) >= attempt and attempts[attempt - 1]["ending"]:
                seen[job_id] = (time.time(), doc)
        return len(seen) == len(job_ids) or None

    wait(all_decided, 300, f"the decisions on {len(job_ids)} jobs", every=0.05)
    return seen


def measure_reclaims(stack, reclaims: int) -> list[float]:
    from controller.settings import Settings

    latencies = []
    publish_all(Settings(), [two_node_request()])
    for attempt in range(1, reclaims + 1):
        job = wait(
            lambda a=attempt: (
                (j := jobs_by_attempt(stack).get((JOB, a))) and j.state.name == "JOB_STATE_RUNNING" and j
            ),
            300,
            f"attempt {attempt} to run",
            every=0.1,
        )
        commit_checkpoint(attempt * 10, attempt)
        time.sleep(1.0)  # the trainer runs on after its commit (not synchronisation)
        stack.preempt(job.name, end_job=True)
        new = wait(
            lambda a=attempt: jobs_by_attempt(stack).get((JOB, a + 1)), 300, "the replacement", every=0.25
        )
        old = jobs_by_attempt(stack)[(JOB, attempt)]
        latencies.append(new.create_time.timestamp() - old.end_time.timestamp())
        print(f"reclaim {attempt}: end -> replacement create {latencies[-1]:.2f} s", flush=True)
    return latencies


def measure_user_errors(stack, controller: Controller, count: int) -> list[float]:
    from controller.settings import Settings

    latencies = []
    for index in range(1, count + 1):
        job_id = f"user-error-{index}"
        publish_all(Settings(), [user_error_request(job_id)])
        ended = wait(
            lambda j=job_id: (job := jobs_by_attempt(stack).get((j, 1))) and job.end_time and job,
            300,
            f"{job_id} to end",
            every=0.05,
        )
        latencies.append(decided_at(controller, job_id, 1) - ended.end_time.timestamp())
        doc = controller.http(f"/v1/jobs/{job_id}")
        print(
            f"user error {index}: end -> final decision {latencies[-1]:.2f} s "
            f"({doc['phase']}: {doc['terminalReason'][:90]})",
            flush=True,
        )
    return latencies


def measure_user_error_retries(stack, controller: Controller, count: int) -> dict[str, list[float]]:
    """User errors of jobs whose error budget allows a retry (maxFailures 1), all at once: the
    decision, the next attempt's create, and the part of it that is the restart policy's own
    backoff (the request's default: 30 s, a fifth of jitter) against what the controller adds."""
    from controller.settings import Settings

    jobs = [f"user-error-retry-{index}" for index in range(1, count + 1)]
    publish_all(Settings(), [user_error_request(job_id, max_failures=1) for job_id in jobs])
    decided = decided_together(controller, jobs, 1)
    figures: dict[str, list[float]] = {"decision": [], "create": [], "beyond the backoff": []}
    for job_id in jobs:
        end = jobs_by_attempt(stack)[(job_id, 1)].end_time.timestamp()
        at, doc = decided[job_id]
        due = doc["nextAttemptAt"] or at
        replacement = wait(
            lambda j=job_id: jobs_by_attempt(stack).get((j, 2)), 300, f"{job_id}'s next attempt", every=0.25
        )
        created = replacement.create_time.timestamp()
        figures["decision"].append(at - end)
        figures["create"].append(created - end)
        figures["beyond the backoff"].append(created - max(due, end))
        print(
            f"{job_id}: end -> decision {at - end:.2f} s; end -> next attempt's create "
            f"{created - end:.2f} s, of which the policy's backoff {max(due, end) - end:.2f} s",
            flush=True,
        )
    return figures


def measure_stockouts(stack, controller: Controller, count: int) -> tuple[list[float], list[float]]:
    from controller.settings import Settings

    stack.stockout(fail=True)
    jobs = [f"stockout-{index}" for index in range(1, count + 1)]
    publish_all(Settings(), [stockout_request(job_id) for job_id in jobs])
    latencies, creates = [], []
    decided = decided_together(controller, jobs, 1)
    for job_id in jobs:
        end = jobs_by_attempt(stack)[(job_id, 1)].end_time.timestamp()
        at, doc = decided[job_id]
        latencies.append(at - end)
        replacement = wait(
            lambda j=job_id: jobs_by_attempt(stack).get((j, 2)), 300, f"{job_id}'s next attempt", every=0.25
        )
        creates.append(replacement.create_time.timestamp() - end)
        ending = doc["attempts"][0]
        print(
            f"{job_id}: end -> decision {latencies[-1]:.2f} s ({ending['ending']}, {ending['rule']}); "
            f"end -> next attempt's create {creates[-1]:.2f} s",
            flush=True,
        )
    stack.stockout()
    return latencies, creates


def measure(
    reclaims: int, user_errors: int, stockouts: int, user_error_retries: int = 0
) -> dict[str, list[float]]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from devstack.stack import DevStack

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-reclaim-"))
    stack = DevStack(str(workdir / "devstack")).start()
    env = stack.env()
    os.environ.update(env)
    storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
        "bench"
    )
    common = {
        "RELAUNCH_STATE_STORE": f"sqlite:///{workdir}/state.db",
        "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
    }
    controller = Controller(workdir, common, "controller.log")
    figures: dict[str, list[float]] = {}
    try:
        controller.wait_leader()
        os.environ.update(common)
        if reclaims:
            figures["reclaim: end -> replacement create"] = measure_reclaims(stack, reclaims)
        if user_errors:
            figures["user error: end -> final decision"] = measure_user_errors(stack, controller, user_errors)
        if user_error_retries:
            retried = measure_user_error_retries(stack, controller, user_error_retries)
            for what, seconds in retried.items():
                figures[f"user error, a retry allowed: end -> {what}"] = seconds
        if stockouts:
            decided, creates = measure_stockouts(stack, controller, stockouts)
            figures["stockout before start: end -> decision"] = decided
            figures["stockout before start: end -> next attempt's create"] = creates
        return figures
    finally:
        controller.stop()
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reclaims", type=int, default=10)
    parser.add_argument("--user-errors", type=int, default=10)
    parser.add_argument("--stockouts", type=int, default=10)
    parser.add_argument("--user-error-retries", type=int, default=10)
    args = parser.parse_args()
    figures = measure(args.reclaims, args.user_errors, args.stockouts, args.user_error_retries)
    print("\nDefaults everywhere, devstack's documented late error (goal p50 <= 2 s, max <= 10 s):")
    for what, seconds in figures.items():
        print(f"  {what}: n={len(seconds)} p50 {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
