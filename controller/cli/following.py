"""Following a job in the state store until something happens: what `submit --wait` and `wait`
share (a live line on a terminal, one plain line per change when piped)."""

from __future__ import annotations

import argparse

from controller.cli import common as view
from controller.readmodel.printable import printable

EXIT_TIMEOUT = 124


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds (got {text!r})") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text})")
    return value


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        default=None,
        help="give up after S seconds (exit status 124)",
    )
    parser.add_argument(
        "--poll", type=_seconds, metavar="S", default=2.0, help="seconds between reads of the state store"
    )


def follow(
    client, job_id: str, *, timeout: float | None, poll: float, must_exist: bool = False, quiet: bool = False
) -> int:
    """Show the job's progress until it ends; its exit status (0, 1, or 124 on timeout).
    `must_exist`: a job not in the store is an error at once (else it may still be on its way).
    `quiet`: no progress lines (the caller prints JSON instead)."""
    import io

    from controller.cli.progress import Progress
    from controller.client import WaitTimeout

    progress = Progress(io.StringIO() if quiet else None)
    try:
        final = client.wait(
            job_id, timeout=timeout, poll=poll, on_change=progress, appear_within=0 if must_exist else None
        )
    except WaitTimeout as stopped:
        progress.note(f"{stopped}; stopped waiting")
        return EXIT_TIMEOUT
    finally:
        progress.done()
    if final["phase"] == "succeeded":
        return view.EXIT_OK
    if not quiet:
        reason = printable(final["terminalReason"] or "")
        print(f"{printable(job_id)} {final['phase']}: {reason}", flush=True)
    return view.EXIT_ERROR
