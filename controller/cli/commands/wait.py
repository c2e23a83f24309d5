"""`relaunch wait JOB_ID [--for checkpoint|running|end]`: follow a job until something happens."""

from __future__ import annotations

import argparse

from controller.cli import common as view
from controller.cli.following import EXIT_TIMEOUT, add_wait_options, follow
from controller.readmodel.printable import printable

EXAMPLE = """\
Follows a job in the state store (a live line on a terminal, one line per change when piped)
until it ends (the default), until an attempt runs (--for running), or until a checkpoint
is committed (--for checkpoint: read from the checkpoint root itself at every poll, so it
returns at the first commit marker, before the controller's next look records it). Exit status: 0 when that happened (for `end`: the job
succeeded), 1 when the job failed, was cancelled or does not exist, 124 after --timeout.

Example:
  relaunch wait demo-gpt --for checkpoint
  relaunch wait demo-gpt --timeout 3600
"""

ENDED = ("succeeded", "failed", "cancelled")


def _running(status: dict) -> bool:
    return status["phase"] == "running" or status["phase"] in ENDED


def checkpoint_committed(client):
    """The `until` of --for checkpoint: the controller has recorded one, or, while an attempt
    runs, storage already holds a committed one newer than the step the attempt resumed from."""

    def committed(status: dict) -> bool:
        if status["latestCheckpointStep"] is not None or status["phase"] in ENDED:
            return True
        if status["phase"] != "running":
            return False
        step = client.committed_checkpoint_step(status["checkpointUri"])
        if step is None:
            return False
        resumed = status["attempts"][-1].get("resumeFromStep") if status["attempts"] else None
        if resumed is not None and step <= resumed:
            return False
        status["latestCheckpointStep"] = step  # what the progress line and the caller show
        return True

    return committed


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
    parser.add_argument(
        "--json", action="store_true", help="no progress lines; print the last status as JSON"
    )
    add_wait_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    client = view.client()
    if args.condition == "end":
        status = follow(
            client, args.job_id, timeout=args.timeout, poll=args.poll, must_exist=True, quiet=args.json
        )
        if args.json:
            view.print_json(client.status(args.job_id))
        return status
    import io

    from controller.cli.progress import Progress
    from controller.client import WaitTimeout

    progress = Progress(io.StringIO() if args.json else None)
    until = _running if args.condition == "running" else checkpoint_committed(client)
    try:
        status = client.wait(
            args.job_id,
            timeout=args.timeout,
            poll=args.poll,
            until=until,
            on_change=progress,
            appear_within=0,
        )
    except WaitTimeout as stopped:
        progress.note(f"{stopped}; stopped waiting")
        return EXIT_TIMEOUT
    finally:
        progress.done()
    if args.json:
        view.print_json(status)
    elif args.condition == "checkpoint" and status["latestCheckpointStep"] is not None:
        print(
            f"{printable(args.job_id)}: checkpoint step {status['latestCheckpointStep']} committed",
            flush=True,
        )
    return view.EXIT_ERROR if status["phase"] in ("failed", "cancelled") else view.EXIT_OK
