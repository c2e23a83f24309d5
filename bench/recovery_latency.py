"""How fast does the controller replace a preempted attempt, with 10, 100 or 1,000 jobs active?
(a benchmark script, not a test)

For each count N: devstack with simulated replicas (no process; the same JobService lifecycle
and Cloud Logging events), N jobs brought to RUNNING by a set-up controller with the quotas
lifted, then the measured controller (default settings: quotas, reconcile every 60 s, so passes
run during the measurement) restarted on the same state, once the set-up controller has served its backlog of job events
(no GetCustomJob for 10 s). Then K of the jobs, spread over the N,
are reclaimed one at a time, each once its predecessor's replacement exists, and the latency is
the time from the reclaimed job's end (Vertex `end_time`) to its replacement's CreateCustomJob
(`create_time`), both stamped by the Vertex stand-in's clock.

A reclaimed simulated job ends FAILED with the stockout error set at once (devstack's documented
one-minute delay for `error` is set to 0: a simulated replica writes no exit record, so the
controller would otherwise wait for the error to classify the ending; real trainers write one).

    .venv/bin/python bench/recovery_latency.py [--active 10 100 1000] [--preemptions 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_stack import Controller, jobs_by_attempt, publish_all, simulated_request, wait

GOAL_P99_MS = 50.0  # at 1,000 active jobs


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(active: int, preemptions: int, store: str) -> list[float]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from controller.settings import Settings
    from devstack.stack import DevStack

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-latency-"))
    stack = DevStack(str(workdir / "devstack")).start()
    stack.configure(failed_error_delay_seconds=0.0)
    env = stack.env()
    os.environ.update(env)
    storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
        "bench"
    )
    common = {
        "RELAUNCH_STATE_STORE": f"sqlite:///{workdir}/state.db" if store == "sqlite" else "gs://bench/state",
        "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
    }
    lifted = {"RELAUNCH_CREATES_PER_MINUTE": "1000000", "RELAUNCH_READS_PER_MINUTE": "1000000"}
    controller = Controller(workdir, {**common, **lifted}, "setup.log")
    try:
        controller.wait_leader()
        os.environ.update(common)
        job_ids = [f"lat-{i:05d}" for i in range(active)]
        publish_all(Settings(), [simulated_request(j) for j in job_ids])

        def all_running() -> bool:
            jobs = jobs_by_attempt(stack)
            return (
                sum(1 for (_, a), j in jobs.items() if a == 1 and j.state.name == "JOB_STATE_RUNNING")
                >= active
            )

        wait(all_running, 1800, "every job to run", every=2.0)
        # Every job's QUEUED, PENDING and RUNNING events are hints the controller reads with a
        # Get; the set-up controller (read budget lifted) serves them all before it stops, or the
        # measured one (600 reads/min) would spend minutes on that backlog first, in bursts of
        # 600 a minute (so "no Get for a while" does not show it is done under the budget).
        wait(lambda: _quiet(stack, 10.0), 1800, "the set-up's event backlog to be served", every=1.0)
        controller.stop()
        controller = Controller(workdir, common, "controller.log")
        controller.wait_leader()
        step = max(1, active // preemptions)
        victims = [job_ids[(i * step) % active] for i in range(preemptions)]
        latencies = []
        for job_id in victims:
            attempt = max(a for (j, a) in jobs_by_attempt(stack) if j == job_id)
            old = jobs_by_attempt(stack)[(job_id, attempt)]
            stack.preempt(old.name, end_job=True)
            new = wait(
                lambda job_id=job_id, attempt=attempt: jobs_by_attempt(stack).get((job_id, attempt + 1)),
                300,
                f"{job_id}'s replacement",
                every=0.05,
            )
            old = jobs_by_attempt(stack)[(job_id, attempt)]
            latencies.append(new.create_time.timestamp() - old.end_time.timestamp())
            time.sleep(0.2)  # spacing between reclaims (not synchronisation)
        return latencies
    finally:
        controller.stop()
        stack.stop()


_last_gets: dict[str, float] = {}


def _quiet(stack, seconds: float) -> bool:
    """True once the Vertex stand-in has received no GetCustomJob for `seconds`."""
    gets = stack.vertex.calls.counts().get("GetCustomJob", 0)
    now = time.monotonic()
    if _last_gets.get("count") != gets:
        _last_gets.update(count=gets, since=now)
        return False
    return now - _last_gets["since"] >= seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--active", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--preemptions", type=int, default=20)
    parser.add_argument("--store", choices=["sqlite", "gcs"], default="sqlite")
    args = parser.parse_args()
    rows = []
    for active in args.active:
        latencies = measure(active, args.preemptions, args.store)
        ms = [x * 1000 for x in latencies]
        row = (active, statistics.median(ms), percentile(ms, 0.99), max(ms))
        rows.append(row)
        print(
            f"{active:5d} active jobs: p50 {row[1]:.0f} ms, p99 {row[2]:.0f} ms, max {row[3]:.0f} ms",
            flush=True,
        )
    print(f"\n| active jobs | p50 ms | p99 ms | max ms | goal p99 <= {GOAL_P99_MS:.0f} ms at 1,000 |")
    print("|---|---|---|---|---|")
    for active, p50, p99, worst in rows:
        goal = ("met" if p99 <= GOAL_P99_MS else "NOT met") if active >= 1000 else ""
        print(f"| {active} | {p50:.0f} | {p99:.0f} | {worst:.0f} | {goal} |")
    print(f"({args.preemptions} reclaims per row, {args.store} store, {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
