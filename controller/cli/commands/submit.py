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
    parser.add_argument(
        "--json", action="store_true", help="print the verdict (and with --wait the final status) as JSON"
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


def _say_if_no_controller(client) -> None:
    """At once, before waiting for a verdict that may never come."""
    if client.store_exists() and client.controller_alive():
        return
    print(
        f"{view.PROG}: note: {controller_line(client)} on {client.state_store}; the verdict waits for "
        "one (`relaunch controller` starts it)",
        file=sys.stderr,
        flush=True,
    )


def controller_line(client) -> str:
    """The controller's last sign of life, as a phrase."""
    import time

    beat = client.controller_heartbeat()
    if beat is None:
        return "no controller has run yet"
    return f"no controller seen for {view.age(beat['time'], time.time())} (last: {printable(beat['holder'])})"


def unchanged_text(client, job_id: str, phase: str | None) -> str:
    """kubectl's `unchanged`: the same request was accepted before; where that job is now."""
    job = printable(job_id)
    if phase not in ("succeeded", "failed", "cancelled"):
        return f"{job} unchanged: this request was accepted before and the job is {phase}"
    status = client.status(job_id)
    reason = f" ({printable(status['terminalReason'])})" if status.get("terminalReason") else ""
    how = (
        "to run it again, submit it under a new jobId (with a new checkpoint.uri to start from "
        'step 0), or on devstack start over: eval "$(relaunch devstack up --fresh)"'
    )
    return (
        f"{job} unchanged: this request already ran and {phase}{reason} after "
        f"{status['attempt']} attempt(s); {how}"
    )


def _as_json(client, args: argparse.Namespace, verdict) -> int:
    """The verdict as one JSON document (with --wait: and the job's final status)."""
    document: dict = {
        "jobId": verdict.job_id,
        "outcome": verdict.outcome,
        "messageId": verdict.message_id,
        "reasons": verdict.reasons,
        "phase": verdict.phase,
    }
    status = view.EXIT_OK if verdict.accepted or verdict.outcome == "published" else view.EXIT_ERROR
    if args.wait and status == view.EXIT_OK:
        status = follow(client, verdict.job_id, timeout=args.timeout, poll=args.poll, quiet=True)
        document["status"] = client.status(verdict.job_id)
    view.print_json(document)
    return status


def _submit(args: argparse.Namespace, request) -> int:
    overrides = {}
    if args.timeout is not None:
        overrides["verdict_seconds"] = args.timeout
    client = view.client(**overrides)
    job_id = request.job_id
    if not args.no_verdict and not args.json:
        _say_if_no_controller(client)
    verdict = client.submit(request.to_json(), wait_for_verdict=not args.no_verdict, allow_local=args.local)
    if args.json:
        return _as_json(client, args, verdict)
    if verdict.outcome == "unchanged":
        print(unchanged_text(client, job_id, verdict.phase), flush=True)
        if not args.wait:
            return view.EXIT_OK
        return follow(client, job_id, timeout=args.timeout, poll=args.poll)
    if verdict.outcome == "no controller":
        return view.fail(
            f"published {job_id} (message {verdict.message_id}), but no controller is running against "
            f"{client.state_store}: {controller_line(client)}. The request waits in the queue; "
            "start one with `relaunch controller`",
            view.EXIT_ERROR,
        )
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
