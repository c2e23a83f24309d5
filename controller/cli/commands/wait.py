"""`relaunch wait JOB_ID [--for checkpoint|running|end]`: follow a job until something happens."""

from __future__ import annotations

import argparse

from controller.cli import common as view
from controller.cli.following import EXIT_TIMEOUT, add_wait_options, follow

EXAMPLE = """\
Follows a job in the state store (a live line on a terminal, one line per change when piped)
until it ends (the default), until an attempt runs (--for running), or until a checkpoint
is committed (--for checkpoint). Exit status: 0 when that happened (for `end`: the job
succeeded), 1 when the job failed, was cancelled or does not exist, 124 after --timeout.

Example:
  relaunch wait demo-gpt --for checkpoint
  relaunch wait demo-gpt --timeout 3600
"""

CONDITIONS = {
    "running": lambda s: s["phase"] == "running" or s["phase"] in ("succeeded", "failed", "cancelled"),
    "checkpoint": lambda s: (
        s["latestCheckpointStep"] is not None or s["phase"] in ("succeeded", "failed", "cancelled")
    ),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "wait",
        help="follow a job until it ends (or runs, or commits a checkpoint)",
        description="Wait for a job to end, to run, or to commit a checkpoint.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.add_argument(
        "--for",
        dest="condition",
        choices=["end", "running", "checkpoint"],
        default="end",
        help="what to wait for",
    )
    add_wait_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    client = view.client()
    if args.condition == "end":
        return follow(client, args.job_id, timeout=args.timeout, poll=args.poll, must_exist=True)
    from controller.cli.progress import Progress
    from controller.client import WaitTimeout

    progress = Progress()
    try:
        status = client.wait(
            args.job_id,
            timeout=args.timeout,
            poll=args.poll,
            until=CONDITIONS[args.condition],
            on_change=progress,
            appear_within=0,
        )
    except WaitTimeout as stopped:
        progress.note(f"{stopped}; stopped waiting")
        return EXIT_TIMEOUT
    finally:
        progress.done()
    return view.EXIT_ERROR if status["phase"] in ("failed", "cancelled") else view.EXIT_OK
