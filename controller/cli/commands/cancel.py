"""`relaunch cancel JOB_ID`: ask the controller to stop a job for good."""

from __future__ import annotations

import argparse
import sys

from controller.cli import common as view
from controller.readmodel.printable import printable

EXAMPLE = """\
Checks that the state store has the job (exit status 1 and nothing published if not), publishes
{"jobId": JOB_ID, "action": "cancel"} to the requests topic and waits for the controller to
record it. The controller cancels the running Vertex job, starts no new attempt and marks the
job cancelled; follow it with `relaunch wait JOB_ID`.

Example:
  relaunch cancel demo-gpt
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cancel",
        help="cancel a job (publishes a cancel request)",
        description="Ask the controller to cancel a job: no more attempts, the running one stops.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.add_argument("--no-verdict", action="store_true", help="publish and return at once")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import RequestInvalid, parse_request

    try:
        parse_request({"jobId": args.job_id, "action": "cancel"})
    except RequestInvalid as invalid:
        return view.fail(f"{invalid.problems[0]}", view.EXIT_USAGE)
    return view.guarded("publish the cancel request", lambda: _cancel(args))


def _cancel(args: argparse.Namespace) -> int:
    verdict = view.client().cancel(args.job_id, wait_for_verdict=not args.no_verdict)
    job = printable(args.job_id)
    if verdict.rejected:
        print(f"{view.PROG}: error: the controller rejected the cancel of {job}:", file=sys.stderr)
        for reason in verdict.reasons:
            print(f"  {printable(reason)}", file=sys.stderr)
        return view.EXIT_ERROR
    if verdict.outcome == "no verdict":
        return view.fail(
            f"cancel of {job} published (message {verdict.message_id}) but the controller has not "
            "recorded it yet; is it running?",
            view.EXIT_ERROR,
        )
    print(f"cancel requested for {job} (message {verdict.message_id})")
    return view.EXIT_OK
