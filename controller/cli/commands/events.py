"""`relaunch events JOB_ID [--json]`: the job's timeline, one line per event, oldest first."""

from __future__ import annotations

import argparse

from controller.cli import common as view
from controller.readmodel.printable import printable

EXAMPLE = """\
Prints the timeline the controller keeps in the job's stored document (its last 500 entries):
when the request was accepted, each attempt requested, submitted, running and ended (with the
ending and the classifier rule), checkpoints committed, backoffs, cancels and the final state.
Columns: UTC time, attempt number, what happened. Exit status 1 if there is no such job.

Example:
  relaunch events demo-gpt
  relaunch events demo-gpt | grep ended
  relaunch events demo-gpt --json | jq '.[] | select(.ending)'
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
    parser.add_argument("--json", action="store_true", help="print the entries as a JSON list")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    entries = view.client().events(args.job_id)
    if args.json:
        view.print_json(entries)
        return 0
    for line in timeline_lines(entries):
        print(line)
    return 0


def timeline_lines(entries: list[dict]) -> list[str]:
    return [
        f"{view.utc(e.get('time'))}  attempt {e.get('attempt', 0):<3}  {printable(e.get('what', ''))}"
        for e in entries
    ]
