"""Fault-injection run, long: controllers as real processes against a devstack of its own, with
kill -9, SIGSTOP past the lease, preemptions, Vertex API faults and outages, GCS outages,
duplicate publishes and racing cancels (tests/support/faults.py), judged from Vertex's side.

    python bench/fault_run.py --seeds 1 2 3 --duration 300

Prints one JSON line per seed (faults injected, jobs, attempts, violations, wall time) and a
total; every violation is printed too. Exit status 1 if any seed had a violation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of faults per seed")
    parser.add_argument("--controllers", type=int, default=2)
    parser.add_argument("--jobs-per-minute", type=float, default=12.0)
    parser.add_argument("--mean-fault-gap", type=float, default=2.0, help="mean seconds between faults")
    parser.add_argument("--steps", type=int, default=80, help="steps of 0.1 s per job (checkpoint every 10)")
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="start each controller as a fresh `relaunch controller` process (default: fork it from a "
        "parent that has imported it, so a kill costs no re-import; see tests/support/forked.py)",
    )
    parser.add_argument("--weights", default=None, help='fault weights, e.g. "kill=4,pause=2,preempt=2"')
    parser.add_argument("--workdir", default=None, help="keep logs and checkpoints here")
    args = parser.parse_args()

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from devstack.stack import DevStack
    from tests.support.faults import FaultConfig, FaultRun

    weights = {}
    if args.weights:
        pairs = [item.split("=") for item in args.weights.split(",")]
        weights["weights"] = tuple((kind.strip(), float(value)) for kind, value in pairs)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="relaunch-faults-"))
    stack = DevStack(str(workdir / "devstack"), provisioning_seconds=0.2, kill_grace_seconds=2.0).start()
    os.environ.update(stack.env())
    totals: Counter = Counter()
    violations = 0
    started = time.monotonic()
    try:
        client = storage.Client(project=stack.project, credentials=AnonymousCredentials())
        for seed in args.seeds:
            bucket = f"faults-{seed}-{uuid.uuid4().hex[:6]}"
            client.create_bucket(bucket)
            config = FaultConfig(
                seed=seed,
                duration_seconds=args.duration,
                controllers=args.controllers,
                jobs_per_minute=args.jobs_per_minute,
                mean_fault_gap_seconds=args.mean_fault_gap,
                steps=args.steps,
                every=10,
                forked=not args.spawn,
                **weights,
            )
            report = FaultRun(stack, workdir / f"seed-{seed}", config, bucket=bucket).run()
            print(json.dumps(report.summary()), flush=True)
            for violation in report.violations:
                print(f"  VIOLATION seed {seed}: {violation}", flush=True)
            totals.update(report.counts)
            totals["jobs"] += report.jobs
            totals["attempts"] += report.attempts
            violations += len(report.violations)
    finally:
        stack.stop()
    print(
        json.dumps(
            {
                "seeds": args.seeds,
                "totals": dict(sorted(totals.items())),
                "violations": violations,
                "wall_seconds": round(time.monotonic() - started, 1),
                "workdir": str(workdir),
            }
        )
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
