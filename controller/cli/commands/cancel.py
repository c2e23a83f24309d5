"""`relaunch cancel JOB_ID`: ask the controller to stop a job for good."""

from __future__ import annotations

import argparse
import json

from controller.cli import common as view

EXAMPLE = """\
Publishes {"jobId": JOB_ID, "action": "cancel"} to the requests topic (RELAUNCH_REQUESTS_TOPIC
in RELAUNCH_PROJECT). The controller cancels the running Vertex job, starts no new attempt and
marks the job cancelled; follow it with `relaunch status JOB_ID`.

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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import RequestInvalid, parse_request

    try:
        request = parse_request({"jobId": args.job_id, "action": "cancel"})
    except RequestInvalid as invalid:
        return view.fail(f"{invalid.problems[0]}", 2)

    def publish() -> int:
        from controller.adapters.pubsub import publish_request

        message_id = publish_request(view.settings(), json.dumps(request.to_json()).encode())
        print(f"cancel requested for {request.job_id} (message {message_id})")
        return 0

    return view.guarded("publish the cancel request", publish)
