"""`relaunch cancel JOB_ID`: ask the controller to stop a job for good."""

from __future__ import annotations

import argparse
import sys

from controller.cli import common as view
from controller.cli.following import add_wait_options, follow
from controller.readmodel.printable import printable

EXAMPLE = """\
Checks that the state store has the job (exit status 1 and nothing published if not) and that
it has not ended (exit status 1, saying how it ended), publishes {"jobId": JOB_ID, "action":
"cancel"} to the requests topic and waits for the controller to record it. The controller
cancels the running Vertex job, starts no new attempt and marks the job cancelled; --wait
follows it until then (exit status 0 once cancelled, 124 after --timeout).

Example:
  relaunch cancel demo-gpt
  relaunch cancel demo-gpt --wait --timeout 300
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
    parser.add_argument("--wait", action="store_true", help="follow the job until it has stopped")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_wait_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import RequestInvalid, parse_request

    try:
        parse_request({"jobId": args.job_id, "action": "cancel"})
    except RequestInvalid as invalid:
        return view.fail(f"{invalid.problems[0]}", view.EXIT_USAGE)
    return view.guarded("publish the cancel request", lambda: _cancel(args))


def _cancel(args: argparse.Namespace) -> int:
    client = view.client()
    job = printable(args.job_id)
    before = client.status(args.job_id)  # JobNotFound: exit 1, nothing published
    if before["phase"] in ("succeeded", "failed", "cancelled"):
        reason = f": {printable(before['terminalReason'])}" if before.get("terminalReason") else ""
        if args.json:
            view.print_json({"jobId": args.job_id, "outcome": "already ended", "phase": before["phase"]})
        return view.fail(
            f"{job} has already ended, {before['phase']}{reason}; nothing to cancel", view.EXIT_ERROR
        )
    verdict = client.cancel(args.job_id, wait_for_verdict=not args.no_verdict)
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
    if args.json and not args.wait:
        view.print_json({"jobId": args.job_id, "outcome": verdict.outcome, "messageId": verdict.message_id})
    elif not args.json:
        print(f"cancel requested for {job} (message {verdict.message_id})", flush=True)
    if not args.wait:
        return view.EXIT_OK
    final_status = follow(client, args.job_id, timeout=args.timeout, poll=args.poll, quiet=args.json)
    if args.json:
        view.print_json(client.status(args.job_id))
    # A cancel that ends the job cancelled did what was asked; one that lost the race to the
    # job's own end says how it ended instead.
    if final_status == view.EXIT_ERROR and client.status(args.job_id)["phase"] == "cancelled":
        return view.EXIT_OK
    return final_status
