"""`relaunch render FILE`: print the Vertex CustomJob the controller would create."""

from __future__ import annotations

import argparse
import json
import sys

from controller.cli.request_files import add_local_option, load_request_file, report_problems

EXAMPLE = """\
Prints the CustomJob exactly as the controller would submit it for that attempt, as Vertex
REST JSON (what `gcloud ai custom-jobs describe --format=json` shows): Relaunch's labels,
the RELAUNCH_* environment of every pool, the attempt's display name and the scheduling
strategy (SPOT unless the request says otherwise or --on-demand is given).

Example:
  relaunch render examples/demo.yaml
  relaunch render examples/llama-finetune-spot.yaml --attempt 4 --on-demand \\
      --resume-from gs://my-ckpts/llama-ft-001/step-0000012000
"""


def _attempt_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"attempts count from 1 (got {value})")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the Vertex CustomJob (REST JSON) the controller would create for an attempt",
        description="Render the Vertex AI CustomJob for one attempt of a job request.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job request file (YAML or JSON), or - for stdin")
    parser.add_argument(
        "--attempt", type=_attempt_number, default=1, metavar="N", help="attempt number, from 1 (default: 1)"
    )
    parser.add_argument(
        "--resume-from",
        metavar="URI",
        default=None,
        help="committed checkpoint directory the attempt resumes from",
    )
    parser.add_argument(
        "--on-demand",
        action="store_true",
        help="render with ON_DEMAND scheduling (what happens after onDemandAfterPreemptions)",
    )
    add_local_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from controller.request import CancelRequest, Problem
    from controller.request.render import build_custom_job, custom_job_to_rest

    request, problems = load_request_file(args.file, allow_local=args.local)
    if not problems and isinstance(request, CancelRequest):
        problems = [Problem("action", "this is a cancel request; there is no CustomJob to render")]
    if problems:
        report_problems(args.file, problems)
        return 2
    job = build_custom_job(request, args.attempt, resume_from=args.resume_from, on_demand=args.on_demand)
    json.dump(custom_job_to_rest(job), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0
