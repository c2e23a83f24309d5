"""How fast does the controller replace a preempted attempt? (a benchmark script, not a test)

Runs devstack and `relaunch controller` (as a real process, pulling the Vertex job events that
devstack publishes in Cloud Logging's LogEntry format), submits a job with backoff 0 whose
replicas are the fast torch-free stand-in trainer, preempts it N times, and prints the time from
the preempted job's end (Vertex `end_time`) to the replacement's CreateCustomJob (its
`create_time`), both stamped by the Vertex stand-in's clock.

    .venv/bin/python bench/recovery_latency.py [--preemptions 5] [--reconcile-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FAKE_TRAINER = ROOT / "tests" / "controller" / "fake_trainer.py"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preemptions", type=int, default=5)
    parser.add_argument(
        "--reconcile-seconds",
        type=float,
        default=60.0,
        help="reconcile period; large so that only events drive recovery",
    )
    args = parser.parse_args()

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1, storage

    from devstack.stack import DevStack

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-bench-"))
    stack = DevStack(str(workdir / "devstack")).start()
    env = stack.env()
    os.environ.update(env)
    storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
        "bench"
    )
    port = 18000 + os.getpid() % 1000
    ctl = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller"],
        env={
            **os.environ,
            "PORT": str(port),
            "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
            "RELAUNCH_STATE_STORE": f"sqlite:///{workdir}/state.db",
            "RELAUNCH_RECONCILE_SECONDS": str(args.reconcile_seconds),
        },
        stdout=open(workdir / "controller.log", "wb"),
        stderr=subprocess.STDOUT,
    )

    def job() -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/jobs/bench", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def wait(check, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.02)
        raise SystemExit("timed out")

    try:

        def ready():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return "leader" in r.read().decode()
            except OSError:
                return False

        wait(ready)
        pool = {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": 1,
            "containerSpec": {
                "imageUri": "bench",
                "command": [sys.executable, str(FAKE_TRAINER), "--steps", "100000", "--every", "50"],
            },
        }
        request = {
            "jobId": "bench",
            "jobSpec": {"workerPoolSpecs": [pool]},
            "checkpoint": {"uri": "gs://bench/ckpt"},
            "restartPolicy": {"backoff": {"initialSeconds": 0, "maxSeconds": 0, "jitter": 0}},
        }
        topic = f"projects/{env['GOOGLE_CLOUD_PROJECT']}/topics/relaunch-requests"
        pubsub_v1.PublisherClient().publish(topic, json.dumps(request).encode()).result(timeout=30)

        from controller.adapters.vertex import VertexBackend
        from controller.settings import Settings

        backend = VertexBackend(Settings())
        latencies = []
        for n in range(1, args.preemptions + 1):
            doc = wait(lambda n=n: (d := job()) and d["attempt"] == n and d["phase"] == "running" and d)
            name = doc["attempts"][-1]["vertexJob"]
            stack.preempt(name, grace_seconds=5)
            wait(lambda n=n: (d := job()) and d["attempt"] == n + 1 and d["attempts"][-1]["vertexJob"])
            # Read both jobs back through the real Vertex client, as the controller does.
            old, new = backend.get(name), backend.get(job()["attempts"][-1]["vertexJob"])
            latency = new.create_time.timestamp() - old.end_time.timestamp()
            latencies.append(latency)
            print(
                f"preemption {n}: replacement created {latency * 1000:.0f} ms after the preempted job ended"
            )
        print(
            f"\nrecovery latency over {len(latencies)} preemptions (backoff 0, reconcile every "
            f"{args.reconcile_seconds:.0f}s, so events drove it): min {min(latencies) * 1000:.0f} ms, "
            f"median {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
    finally:
        ctl.terminate()
        ctl.wait(timeout=30)
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
