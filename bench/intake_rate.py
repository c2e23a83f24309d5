"""How many requests per second does the controller accept durably? (a benchmark, not a test)

Starts devstack, creates the request subscription, publishes N requests (a backlog), then starts
`relaunch controller` as a real process and times the intake: from the first to the last
"job accepted" log line (each is written only after the job's record is durable in the state
store). At the end the store is read back to check that every request has its record.

The create quota is set to 1 per minute so that the intake, not the Vertex stand-in running
replicas, is what is measured.

    .venv/bin/python bench/intake_rate.py [--counts 500 2000 10000] [--stores sqlite gcs] [--controller-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GOAL_SQLITE = 500.0  # requests per second, on 2 cores


def request_body(job_id: str) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {"imageUri": "bench", "command": [sys.executable, "-c", "pass"]},
    }
    return json.dumps(
        {
            "jobId": job_id,
            "jobSpec": {"workerPoolSpecs": [pool]},
            "checkpoint": {"uri": f"gs://bench/ckpt/{job_id}"},
        }
    ).encode()


ACCEPTED = re.compile(rb'"message": "job accepted", "time": "([^"]+)"')


def accepted_times(log_path: Path) -> list[float]:
    # Searched for in the whole text, not line by line: the libraries' own warnings (stderr, the
    # same file) can land inside a JSON line and would hide its accept from a line parser.
    times = []
    with open(log_path, "rb") as log:
        for found in ACCEPTED.finditer(log.read()):
            stamp = found.group(1).decode().replace("Z", "+00:00")
            times.append(datetime.fromisoformat(stamp).timestamp())
    return times


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a running process has used so far (Linux /proc), or NaN.

    The controller's CPU at the last accept, start-up included: two runs of different counts
    give its CPU per request by difference (`(cpu_3000 - cpu_1000) / 2000`)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(count: int, store_kind: str, workdir: Path, controller_tree: Path = ROOT) -> dict:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1, storage

    from controller.adapters.pubsub import ensure_topology
    from controller.settings import Settings
    from devstack.stack import DevStack

    stack = DevStack(str(workdir / "devstack")).start()
    env = stack.env()
    os.environ.update(env)
    gcs = storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
    gcs.create_bucket("bench")
    state_store = f"sqlite:///{workdir}/state.db" if store_kind == "sqlite" else "gs://bench/state"
    settings_env = {
        "RELAUNCH_STATE_STORE": state_store,
        "RELAUNCH_CREATES_PER_MINUTE": "1",
        "RELAUNCH_RECONCILE_SECONDS": "3600",
        "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
    }
    os.environ.update(settings_env)
    settings = Settings()
    publisher = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=500, max_latency=0.05)
    )
    ensure_topology(settings, publisher, pubsub_v1.SubscriberClient())
    topic = settings.topic_path(settings.requests_topic)
    futures = [publisher.publish(topic, request_body(f"bench-{i:05d}")) for i in range(count)]
    for future in futures:
        future.result(timeout=120)
    log_path = workdir / "controller.log"
    command = [sys.executable, "-m", "controller.cli", "controller"]
    if os.environ.get("BENCH_PROFILER"):  # e.g. "py-spy record -r 200 --format raw -o /tmp/x.raw --"
        command = [*os.environ["BENCH_PROFILER"].split(), *command]
    ctl = subprocess.Popen(
        command,
        env={**os.environ, "PORT": str(18500 + os.getpid() % 1000), "PYTHONUNBUFFERED": "1"},
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
        cwd=controller_tree,  # `python -m` imports the controller from its working directory
    )
    started = time.time()
    own_cpu = time.process_time()  # this process: the stand-ins' threads (and this poll)
    try:
        deadline = time.monotonic() + max(300.0, count / 5)
        times: list[float] = []
        while time.monotonic() < deadline:
            times = accepted_times(log_path)
            if len(times) >= count or ctl.poll() is not None:
                break
            time.sleep(1.0)  # polling another process's log
        # Read before the store is counted and the controller is stopped: its start and the intake.
        controller_cpu = process_cpu_seconds(ctl.pid)
        stand_ins_cpu = time.process_time() - own_cpu
        if len(times) < count:
            raise SystemExit(f"only {len(times)} of {count} accepted; see {log_path}")
        prefix = "state/jobs/" if store_kind == "gcs" else None
        if prefix:
            stored = sum(1 for _ in gcs.list_blobs("bench", prefix=prefix))
        else:
            import sqlite3

            db = sqlite3.connect(f"{workdir}/state.db")
            stored = db.execute("SELECT count(*) FROM documents WHERE key LIKE 'jobs/%'").fetchone()[0]
            db.close()
        span = max(times) - min(times)
        return {
            "count": count,
            "store": store_kind,
            "rate": (count - 1) / span if span > 0 else float("inf"),
            "span": span,
            "from_start": max(times) - started,
            "stored": stored,
            "controller_cpu": controller_cpu,
            "stand_ins_cpu": stand_ins_cpu,
        }
    finally:
        ctl.terminate()
        try:
            ctl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ctl.kill()
        publisher.stop()
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", type=int, nargs="+", default=[500, 2000, 10000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "gcs"], choices=["sqlite", "gcs"])
    parser.add_argument(
        "--controller-tree",
        type=Path,
        default=ROOT,
        help="run the controller of another checkout (e.g. a worktree of an older commit) against this "
        "tree's stand-ins, so that a comparison measures the controllers alone",
    )
    args = parser.parse_args()
    rows = []
    for store_kind in args.stores:
        for count in args.counts:
            workdir = Path(tempfile.mkdtemp(prefix="relaunch-intake-"))
            row = run_once(count, store_kind, workdir, args.controller_tree.resolve())
            rows.append(row)
            print(
                f"{store_kind:6} {count:6d} requests: {row['rate']:7.1f} req/s accepted durably "
                f"(first to last accept {row['span']:.1f} s; {row['from_start']:.1f} s from controller start; "
                f"{row['stored']} job records in the store; "
                f"CPU: controller {row['controller_cpu']:.2f} s, stand-ins {row['stand_ins_cpu']:.2f} s)",
                flush=True,
            )
    print(
        f"\n| store | requests | accepted/s | records | goal (SQLite >= {GOAL_SQLITE:.0f}/s on {os.cpu_count()} cores) |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        goal = (
            ("met" if row["rate"] >= GOAL_SQLITE else "NOT met") if row["store"] == "sqlite" else "(reported)"
        )
        print(f"| {row['store']} | {row['count']} | {row['rate']:.1f} | {row['stored']} | {goal} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
