"""From a reclaimed CustomJob's end to its replacement's create, every setting at its default
(a benchmark script, not a test).

devstack as Google documents it: a reclaim gives 15 s of grace, and the failed job's `error` is
set about a minute after its end. One 2-node Spot job (two pools of one replica) of simulated replicas (no process), the
controller as its own process with default settings and the request's default restart policy.
Before each reclaim the script commits a checkpoint one step further, as a trainer would (a
simulated replica trains nothing), so every reclaim follows progress. The latency is the
reclaimed job's `end_time` to the replacement's `create_time`, both stamped by the Vertex
stand-in's clock.

    .venv/bin/python bench/reclaim_decision.py [--reclaims 10]
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


def measure(reclaims: int) -> list[float]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from controller.settings import Settings
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
    latencies = []
    try:
        controller.wait_leader()
        os.environ.update(common)
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
                lambda a=attempt: jobs_by_attempt(stack).get((JOB, a + 1)), 300, "the replacement", every=0.05
            )
            old = jobs_by_attempt(stack)[(JOB, attempt)]
            latencies.append(new.create_time.timestamp() - old.end_time.timestamp())
            print(f"reclaim {attempt}: end -> replacement create {latencies[-1]:.2f} s", flush=True)
        return latencies
    finally:
        controller.stop()
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reclaims", type=int, default=10)
    args = parser.parse_args()
    seconds = measure(args.reclaims)
    print(
        f"\n{len(seconds)} reclaims of a 2-node job, defaults: p50 {statistics.median(seconds):.2f} s, "
        f"max {max(seconds):.2f} s (goal p50 <= 2 s, max <= 10 s); load {os.getloadavg()[0]:.2f}, "
        f"{os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
