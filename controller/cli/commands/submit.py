"""`relaunch submit FILE [--wait] [--timeout S]`: publish a job request for the controller."""

from __future__ import annotations

import argparse
import json
import time

from controller.cli import common as view
from controller.cli.request_files import add_local_option, load_request_file, report_problems

EXAMPLE = """\
Validates FILE exactly as `relaunch validate` does (problems on stderr, exit status 2), then
publishes the request as JSON to the requests topic (RELAUNCH_REQUESTS_TOPIC in
RELAUNCH_PROJECT; PUBSUB_EMULATOR_HOST for devstack) and prints the jobId and message id.

With --wait, follows the job in the state store (RELAUNCH_STATE_STORE), printing a line each
time its phase, attempt or checkpoint step changes. Exit status: 0 succeeded, 1 failed or
cancelled, 124 when --timeout passes first.

Example:
  relaunch submit examples/demo.yaml
  relaunch submit examples/demo.yaml --wait --timeout 7200
"""

EXIT_TIMEOUT = 124


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds (got {text!r})") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text})")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="validate a job request and publish it to the controller",
        description="Submit a job request (YAML or JSON) to the Relaunch controller.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job request file, or - for stdin")
    parser.add_argument(
        "--wait", action="store_true", help="follow the job until it ends; the exit status says how it ended"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        default=None,
        help="with --wait: give up after S seconds (exit status 124)",
    )
    parser.add_argument(
        "--poll",
        type=_seconds,
        metavar="S",
        default=2.0,
        help="with --wait: seconds between reads of the state store (default 2)",
    )
    add_local_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import CancelRequest, Problem

    request, problems = load_request_file(args.file, allow_local=args.local)
    if not problems and isinstance(request, CancelRequest):
        problems = [Problem("action", f"this is a cancel request; use `relaunch cancel {request.job_id}`")]
    if problems:
        report_problems(args.file, problems)
        return 2

    def publish() -> int:
        from controller.adapters.pubsub import publish_request

        config = view.settings()
        message_id = publish_request(config, json.dumps(request.to_json()).encode())
        print(f"submitted {request.job_id} (message {message_id})", flush=True)
        if not args.wait:
            return 0
        return follow(config, request.job_id, request.fingerprint(), timeout=args.timeout, poll=args.poll)

    return view.guarded("submit the request", publish)


def follow(config, job_id: str, fingerprint: str, *, timeout: float | None, poll: float) -> int:
    """Print the job's progress until it ends; its exit status (0, 1, or 124 on timeout)."""
    from controller.readmodel.jobs import status_document

    store = view.open_job_store(config)
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        stored = view.stored_document(store, job_id)
        if stored is None and last is None:
            print(f"waiting for the controller to accept {job_id}", flush=True)
            last = ()
        elif stored is not None:
            if stored.get("fingerprint") != fingerprint:
                raise view.CommandError(
                    f"job {job_id!r} already exists with a different request; "
                    "the controller rejects this one (use a new jobId)",
                    1,
                )
            doc = status_document(stored, with_timeline=False)
            seen = (doc["phase"], doc["attempt"], doc["latestCheckpointStep"])
            if seen != last:
                print(_progress_line(doc), flush=True)
                last = seen
            if doc["phase"] == "succeeded":
                return 0
            if doc["phase"] in ("failed", "cancelled"):
                print(f"{job_id} {doc['phase']}: {doc['terminalReason']}", flush=True)
                return 1
        if deadline is not None and time.monotonic() >= deadline:
            print(
                f"{job_id} still {last[0] if last else 'not accepted'} after {timeout:g}s; "
                "stopped waiting (the job goes on)",
                flush=True,
            )
            return EXIT_TIMEOUT
        wait = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
        time.sleep(wait)  # polling the store: the CLI has no channel to be told of changes


def _progress_line(doc: dict) -> str:
    step = doc["latestCheckpointStep"]
    checkpoint = "no checkpoint yet" if step is None else f"checkpoint step {step}"
    return (
        f"{view.utc(time.time())} UTC  {doc['jobId']}: {doc['phase']}, attempt {doc['attempt']}, {checkpoint}"
    )
