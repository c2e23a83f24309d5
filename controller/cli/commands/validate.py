"""`relaunch validate FILE...`: check job request files without submitting anything."""

from __future__ import annotations

import argparse

from controller.cli import common as view
from controller.cli.request_files import add_local_option, load_request_file, report_problems

EXAMPLE = """\
Each FILE is a job request or a cancel request, in YAML or JSON. Prints `FILE: ok` for each
valid file; otherwise one `FILE: FIELD: REASON` line per problem on stderr and exit status 2.

Example:
  relaunch validate examples/demo.yaml examples/cancel.json
  relaunch validate --local my-local-run.yaml     # allows file:///abs/path checkpoints
  cat request.json | relaunch validate -
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check job request files (YAML or JSON) and report every problem",
        description="Check job request files against the request format v1 and Vertex AI's rules.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="request file, or - for stdin")
    parser.add_argument(
        "--json", action="store_true", help='print [{"file", "valid", "problems": [{"field", "reason"}]}]'
    )
    add_local_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    results = []
    for path in args.files:
        _, problems = load_request_file(path, allow_local=args.local)
        results.append(
            {
                "file": path,
                "valid": not problems,
                "problems": [{"field": p.field, "reason": p.reason} for p in problems],
            }
        )
        if problems:
            status = 2
            if not args.json:
                report_problems(path, problems)
        elif not args.json:
            print(f"{path}: ok")
    if args.json:
        view.print_json(results)
    return status
