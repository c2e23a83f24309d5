"""What the verbs share: the client, turning failures into one-line errors with the right exit
status, terminal-safe text, and formatting of times and tables.

Exit statuses (README, "Exit codes"): 0 ok, 1 error or not found, 2 usage (bad arguments or an
invalid request file), 124 `--wait` timed out, 130 interrupted.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from controller.readmodel.printable import printable

PROG = "relaunch"
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """A failure the user should see as one line, with the exit status to return."""

    def __init__(self, message: str, status: int = EXIT_ERROR):
        super().__init__(message)
        self.status = status


def fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {printable(message)}", file=sys.stderr)
    return status


def guarded(what: str, action: Callable[[], int]) -> int:
    """Run a verb's body; unreachable services, unknown jobs and missing settings become one
    line and exit 1. `what` says what was being done ("read job state"), the error why."""
    from controller.client import ClientError
    from controller.userconfig import ConfigError

    try:
        return action()
    except BrokenPipeError:  # `relaunch status | head`: main() ends quietly
        raise
    except CommandError as error:
        return fail(str(error), error.status)
    except (ClientError, ConfigError) as error:
        return fail(str(error), EXIT_ERROR)
    except (ConnectionError, TimeoutError, OSError, sqlite3.Error, ValueError) as error:
        if type(error).__name__ == "ValidationError":  # a bad RELAUNCH_* variable (pydantic)
            return fail(f"invalid setting ({_why(error)})", EXIT_USAGE)
        return fail(f"cannot {what} ({_why(error)})", EXIT_ERROR)
    except Exception as error:
        # Google API and auth errors, without importing google.api_core on every read verb.
        if type(error).__module__.startswith(("google.", "grpc")):
            return fail(f"cannot {what} ({_why(error)})", EXIT_ERROR)
        raise


def _why(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def client(**overrides):
    from controller.client import Client

    return Client.from_config(**overrides)


# ---- formatting -------------------------------------------------------------------------


def utc(seconds: float | None) -> str:
    if not seconds:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):
        # A time no calendar can show (a stored value from before requests were bounded).
        return "beyond 9999-12-31" if seconds > 0 else "before 0001-01-01"


def age(seconds: float | None, now: float) -> str:
    from controller.readmodel.goodput import duration

    if not seconds:
        return "-"
    try:
        return duration(now - seconds)
    except (OverflowError, ValueError):
        return "?"


def dash(value) -> str:
    return "-" if value is None or value == "" else printable(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart, like `kubectl get`. Cells are made printable."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in [headers, *rows]
    ]
    return "\n".join(lines)


def print_json(document) -> None:
    """JSON for scripts; ensure_ascii keeps control and bidi characters escaped."""
    import json

    print(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True, default=str))
