"""`relaunch events JOB_ID`: the job's timeline, one line per event, oldest first."""

from __future__ import annotations

import argparse

from controller.cli import common as view

EXAMPLE = """\
Prints the timeline the controller keeps in the job's stored document (its last 500 entries):
when the request was accepted, each attempt requested, submitted, running and ended (with the
ending and the classifier rule), checkpoints committed, backoffs, cancels and the final state.
Columns: UTC time, attempt number, what happened.

Example:
  relaunch events demo-gpt
  relaunch events demo-gpt | grep ended
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "events",
        help="print one job's timeline (attempts, endings, checkpoints)",
        description="Print the timeline of one job as the controller recorded it.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    document = view.require_document(view.open_job_store(view.settings()), args.job_id)
    for line in timeline_lines(document):
        print(line)
    return 0


def timeline_lines(document: dict) -> list[str]:
    # Entries are appended as transitions are stored; an attempt's "running" entry carries
    # Vertex's start time, so order by time (stable, keeping stored order for ties).
    entries = sorted(document.get("timeline", []), key=lambda e: e.get("time") or 0)
    return [
        f"{view.utc(e.get('time'))}  attempt {e.get('attempt', 0):<3}  {e.get('what', '')}" for e in entries
    ]
