"""`relaunch validate FILE...`: check job request files without submitting anything.

Also home of the file loading that `relaunch render` shares, so both verbs report a bad file in
exactly the same words.
"""

from __future__ import annotations

import argparse
import sys

EXAMPLE = """\
Each FILE is a job request or a cancel request, in YAML or JSON. Prints `FILE: ok` for each
valid file; otherwise one `FILE: FIELD: REASON` line per problem on stderr and exit status 2.

Example:
  relaunch validate examples/demo.yaml examples/cancel.json
  relaunch validate --local my-local-run.yaml     # allows file:///abs/path checkpoints
  cat request.json | relaunch validate -
"""


def add_local_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        action="store_true",
        help="accept file:///abs/path checkpoint URIs (local runs only; the cloud needs gs://)",
    )


def load_request_file(path: str, *, allow_local: bool):
    """(request, []) or (None, problems) for the request in `path` ('-' = stdin)."""
    from controller.request import MAX_REQUEST_BYTES, Problem, RequestInvalid, parse_request

    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                # Read one byte past the limit: enough to know the file is too large.
                data = handle.read(MAX_REQUEST_BYTES + 1)
    except OSError as error:
        return None, [Problem("file", f"cannot be read: {error.strerror or error}")]
    try:
        return parse_request(data, allow_local_checkpoints=allow_local), []
    except RequestInvalid as invalid:
        return None, invalid.problems


def report_problems(path: str, problems) -> None:
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check job request files (YAML or JSON) and report every problem",
        description="Check job request files against the request format v1 and Vertex AI's rules.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="request file, or - for stdin")
    add_local_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        _, problems = load_request_file(path, allow_local=args.local)
        if problems:
            report_problems(path, problems)
            status = 2
        else:
            print(f"{path}: ok")
    return status
