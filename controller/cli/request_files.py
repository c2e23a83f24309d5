"""Reading job request files for the verbs that take one (validate, render, submit), so that each
reports a bad file in exactly the same words."""

from __future__ import annotations

import argparse
import sys


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
    from controller.settings import InvalidSetting, environ_prices

    try:
        prices = environ_prices()
    except InvalidSetting as error:
        return None, [Problem("RELAUNCH_PRICE_TABLE", str(error))]
    try:
        return parse_request(data, allow_local_checkpoints=allow_local, prices=prices), []
    except RequestInvalid as invalid:
        return None, invalid.problems


def report_problems(path: str, problems) -> None:
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
