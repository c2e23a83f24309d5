"""A zone-wide reclaim: how long until every job has its replacement, and in which order?
(a benchmark script, not a test)

Starts devstack with simulated replicas and a controller, gets N jobs running (set-up with the
create quota lifted), then restarts the controller with the create quota under test (default:
the controller's own default, `RELAUNCH_CREATES_PER_MINUTE`), reclaims every job at once (in a
shuffled order, so that job names say nothing about the order) and prints:
  - the time from the first reclaim until every job's attempt 2 exists (its CreateCustomJob);
  - the order of the resubmissions against the order of the reclaims (rank correlation, and how
    many were resubmitted before a job reclaimed earlier).
Timestamps are the Vertex stand-in's own (`end_time` of the reclaimed job, `create_time` of the
replacement).

    .venv/bin/python bench/mass_recovery.py [--jobs 1000] [--creates-per-minute 60] [--store sqlite|gcs]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_stack import Controller, jobs_by_attempt, publish_all, simulated_request, wait


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out

    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--creates-per-minute", type=int, default=None, help="default: the controller's")
    parser.add_argument("--store", choices=["sqlite", "gcs"], default="sqlite")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from controller.settings import Settings
    from devstack.stack import DevStack

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-mass-"))
    stack = DevStack(str(workdir / "devstack")).start()
    # A reclaimed job's error (the stockout) is set at once instead of Vertex's documented ~1 min:
    # simulated replicas write no exit record, so with the delay every job would wait out the
    # controller's error settling first and the figure would measure that wait, not recovery.
    stack.configure(failed_error_delay_seconds=0.0)
    env = stack.env()
    os.environ.update(env)
    storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
        "bench"
    )
    state_store = f"sqlite:///{workdir}/state.db" if args.store == "sqlite" else "gs://bench/state"
    common = {
        "RELAUNCH_STATE_STORE": state_store,
        "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
        "RELAUNCH_RECONCILE_SECONDS": "600",
        "RELAUNCH_READS_PER_MINUTE": os.environ.get("RELAUNCH_READS_PER_MINUTE", "600"),
    }
    quota = args.creates_per_minute or Settings.model_fields["creates_per_minute"].default
    controller = Controller(
        workdir,
        {**common, "RELAUNCH_CREATES_PER_MINUTE": "1000000", "RELAUNCH_READS_PER_MINUTE": "1000000"},
        "setup.log",
    )
    try:
        controller.wait_leader()
        os.environ.update(common)
        publish_all(Settings(), [simulated_request(f"mass-{i:05d}") for i in range(args.jobs)])

        def all_running() -> bool:
            jobs = jobs_by_attempt(stack)
            running = sum(1 for (_, a), j in jobs.items() if a == 1 and j.state.name == "JOB_STATE_RUNNING")
            print(f"  set-up: {running}/{args.jobs} jobs running", flush=True)
            return running >= args.jobs

        wait(all_running, args.timeout, "every job to run", every=5.0)
        controller.stop()
        controller = Controller(
            workdir, {**common, "RELAUNCH_CREATES_PER_MINUTE": str(quota)}, "controller.log"
        )
        controller.wait_leader()

        first = jobs_by_attempt(stack)
        names = [first[(f"mass-{i:05d}", 1)].name for i in range(args.jobs)]
        random.Random(7).shuffle(names)
        print(f"reclaiming {len(names)} jobs at once (create quota {quota}/min)", flush=True)
        started = time.time()
        for name in names:
            stack.preempt(name, end_job=True)

        def replaced() -> bool:
            jobs = jobs_by_attempt(stack)
            done = sum(1 for (_, a) in jobs if a == 2)
            print(f"  {time.time() - started:6.0f} s: {done}/{args.jobs} replacements created", flush=True)
            return done >= args.jobs

        wait(replaced, args.timeout, "every replacement", every=10.0)
        jobs = jobs_by_attempt(stack)
        ended = {job_id: jobs[(job_id, 1)].end_time.timestamp() for (job_id, a) in jobs if a == 1}
        created = {job_id: jobs[(job_id, 2)].create_time.timestamp() for (job_id, a) in jobs if a == 2}
        ids = sorted(created)
        t0 = min(ended.values())
        total = max(created.values()) - t0
        waits = [created[j] - ended[j] for j in ids]
        by_creation = sorted(ids, key=lambda j: created[j])
        by_reclaim = sorted(ids, key=lambda j: ended[j])
        rank_of_reclaim = {j: r for r, j in enumerate(by_reclaim)}
        overtaken = 0
        latest_reclaim_rank = -1
        for j in by_creation:  # a job created after one reclaimed later than it was overtaken
            if rank_of_reclaim[j] < latest_reclaim_rank:
                overtaken += 1
            latest_reclaim_rank = max(latest_reclaim_rank, rank_of_reclaim[j])
        rho = spearman([ended[j] for j in ids], [created[j] for j in ids])
        ideal = max(0.0, (args.jobs - quota) / quota * 60.0)
        print(
            f"\n{args.jobs} jobs reclaimed, create quota {quota}/min, {args.store} store:\n"
            f"  every replacement created {total:.1f} s after the first reclaim "
            f"(the quota alone allows it in {ideal:.0f} s)\n"
            f"  wait per job: median {statistics.median(waits):.1f} s, max {max(waits):.1f} s\n"
            f"  order: Spearman rank correlation reclaim vs resubmission {rho:.3f} (1 = strictly oldest "
            f"reclaim first); {overtaken} jobs resubmitted after one reclaimed later than them\n"
            f"  first 10 resubmitted (reclaim rank): "
            + ", ".join(str(rank_of_reclaim[j]) for j in by_creation[:10])
            + "\n  last 10 resubmitted (reclaim rank): "
            + ", ".join(str(rank_of_reclaim[j]) for j in by_creation[-10:])
        )
    finally:
        controller.stop()
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
