"""A flood of hostile request messages with valid ones mixed in, against a real controller on
devstack: how fast is each rejected and each valid one accepted? (a benchmark, not a test)

Starts devstack, then `relaunch controller` as a real process, publishes N hostile messages
(mutated and type-confused examples, huge numbers, lone surrogates, deep nesting, random bytes,
messages of 4.3 to 9.5 MB) and M valid requests among them with the real Pub/Sub client, plus
one message over Pub/Sub's 10 MB limit, and prints: how many were dead-lettered with a reason,
how many accepted, latencies from publish to the dead-letter copy / to "job accepted", intake
pauses, failed deliveries, what is left on the subscription, /healthz polls, the controller's
peak RSS, and the load average. `--compare-with REV` runs the same flood first on the
controller of another commit (its tree exported with `git archive`), side by side.

    .venv/bin/python bench/hostile_flood.py [--hostile 2000] [--valid 20] [--compare-with HEAD~3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def export_tree(revision: str) -> Path:
    """The controller source of `revision`, in a temporary directory."""
    target = Path(tempfile.mkdtemp(prefix="relaunch-flood-rev-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def run(label: str, args, controller_root: str | None) -> dict:
    from devstack.stack import DevStack
    from tests.support.flood import FloodConfig, HostileFlood, load_average

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-flood-"))
    stack = DevStack(str(workdir / "devstack"), provisioning_seconds=0.2).start()
    os.environ.update(stack.env())
    try:
        config = FloodConfig(
            hostile=args.hostile,
            valid=args.valid,
            seed=args.seed,
            timeout_seconds=args.timeout,
            controller_root=controller_root,
        )
        load_before = load_average()
        report = HostileFlood(stack, workdir, config).run()
        return {"label": label, "report": report, "load_before": load_before, "load_after": load_average()}
    finally:
        stack.stop()


def print_run(row: dict) -> None:
    from tests.support.flood import summary

    report = row["report"]
    print(f"== {row['label']}")
    print(f"  published: {report.hostile} hostile (3 of 4.3-9.5 MB), {report.valid} valid, 1 over 10 MB")
    print(f"  over 10 MB refused by Pub/Sub at publish: {report.over_limit_refused_by_pubsub}")
    print(
        f"  dead-lettered with a reason: {report.dead_lettered_with_reason}/{report.hostile}"
        f" (without a reason: {report.dead_lettered_without_reason}, never: {len(report.missing_hostile)})"
    )
    print(f"  valid accepted: {report.accepted}/{report.valid}")
    print(f"  publish -> dead-letter copy: {summary(report.hostile_latencies)}")
    print(f"  publish -> dead-letter copy, messages over 4 MiB: {summary(report.large_latencies)}")
    print(f"  publish -> job accepted: {summary(report.valid_latencies)}")
    print(
        f"  intake pauses: {report.intake_pauses}; deliveries left for redelivery: {report.handling_failures}"
    )
    print(f"  left on the requests subscription afterwards: {report.backlog_after}")
    print(f"  /healthz: {report.healthz_ok} ok, {report.healthz_failed} failed")
    print(f"  controller peak RSS: {report.controller_max_rss_mib:.0f} MiB; run {report.seconds:.1f} s")
    print(f"  load average before / after: {row['load_before']} / {row['load_after']}")
    print(f"  problems: {report.problems or 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hostile", type=int, default=2000)
    parser.add_argument("--valid", type=int, default=20)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every message")
    parser.add_argument("--compare-with", default=None, help="also run the controller of this commit, first")
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    if args.compare_with:
        rows.append(run(f"controller at {args.compare_with}", args, str(export_tree(args.compare_with))))
    rows.append(run("controller of this tree", args, None))
    for row in rows:
        print_run(row)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if not rows[-1]["report"].problems else 1


if __name__ == "__main__":
    sys.exit(main())
