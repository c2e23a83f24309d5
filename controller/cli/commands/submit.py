"""`relaunch submit FILE [--wait] [--timeout S] [--no-verdict]`: publish a job request and say
what the controller made of it."""

from __future__ import annotations

import argparse
import sys

from controller.cli import common as view
from controller.cli.following import EXIT_TIMEOUT, add_wait_options, follow
from controller.cli.request_files import add_local_option, load_request_file, report_problems
from controller.readmodel.printable import printable

EXAMPLE = """\
Validates FILE exactly as `relaunch validate` does (problems on stderr, exit status 2), publishes
the request to the requests topic, then waits (up to the verdict_seconds property, 60 s) for the
controller's verdict, read from its state store: `accepted JOB`, exit 0; or the reasons it was
rejected, exit 1. With no verdict in that time (is the controller running?) it says so, exit 1;
the request stays queued and the controller may still take it. --no-verdict only publishes.

With --wait, follows the job to its end: a live line on a terminal, one line per change when
piped. Exit status: 0 succeeded, 1 rejected, failed or cancelled, 124 when --timeout passes.

Example:
  relaunch submit examples/demo.yaml
  relaunch submit examples/demo.yaml --wait --timeout 7200
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="validate a job request, publish it, and print the controller's verdict",
        description="Submit a job request (YAML or JSON) to the Relaunch controller.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job request file, or - for stdin")
    parser.add_argument(
        "--wait", action="store_true", help="follow the job until it ends; the exit status says how it ended"
    )
    parser.add_argument(
        "--no-verdict", action="store_true", help="publish and return at once, without waiting for a verdict"
    )
    add_wait_options(parser)
    add_local_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import CancelRequest, Problem

    request, problems = load_request_file(args.file, allow_local=args.local)
    if not problems and isinstance(request, CancelRequest):
        problems = [Problem("action", f"this is a cancel request; use `relaunch cancel {request.job_id}`")]
    if problems:
        report_problems(args.file, problems)
        return view.EXIT_USAGE
    return view.guarded("submit the request", lambda: _submit(args, request))


def _submit(args: argparse.Namespace, request) -> int:
    overrides = {}
    if args.timeout is not None:
        overrides["verdict_seconds"] = args.timeout
    client = view.client(**overrides)
    job_id = request.job_id
    verdict = client.submit(request.to_json(), wait_for_verdict=not args.no_verdict, allow_local=args.local)
    if verdict.outcome == "published":
        print(f"submitted {job_id} (message {verdict.message_id})", flush=True)
        if not args.wait:
            return view.EXIT_OK
    elif verdict.rejected:
        print(f"{view.PROG}: error: the controller rejected {printable(job_id)}:", file=sys.stderr)
        for reason in verdict.reasons:
            print(f"  {printable(reason)}", file=sys.stderr)
        return view.EXIT_ERROR
    elif verdict.outcome == "no verdict":
        waited = f"{client.verdict_seconds:g}s"
        if args.wait and args.timeout is not None:
            print(f"waiting for the controller to accept {job_id}: none after {waited}; stopped waiting")
            return EXIT_TIMEOUT
        return view.fail(
            f"published {job_id} (message {verdict.message_id}) but the controller gave no verdict in "
            f"{waited}; is it running against this state store ({client.state_store})? "
            f"The request stays queued: `relaunch status {job_id}` later",
            view.EXIT_ERROR,
        )
    else:
        print(f"accepted {job_id} (message {verdict.message_id})", flush=True)
    if not args.wait:
        return view.EXIT_OK
    return follow(client, job_id, timeout=args.timeout, poll=args.poll)
