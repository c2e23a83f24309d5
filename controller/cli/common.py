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
            return fail(_why(error), EXIT_USAGE)
        return fail(f"cannot {what} ({_why(error)})", EXIT_ERROR)
    except Exception as error:
        # Google API and auth errors, without importing google.api_core on every read verb.
        if type(error).__module__.startswith(("google.", "grpc")):
            return fail(f"cannot {what} ({_why(error)})", EXIT_ERROR)
        raise


def _why(error: Exception) -> str:
    return sentence(error) or "no reason given"


def sentence(error: BaseException) -> str:
    """The error's first line, made printable: what the user reads, never its class name."""
    if type(error).__name__ == "ValidationError":  # pydantic: name the variables, not the class
        from controller.settings import explain

        return f"invalid setting {explain(error)}".replace("\n", "; ")  # type: ignore[arg-type]
    text = str(error).strip().splitlines()
    return printable(text[0][:300]) if text else ""


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


# Output fits this many columns unless the terminal says it is wider (COLUMNS, or its size);
# `--wide` lifts the limit, as `kubectl get -o wide` does.
DEFAULT_COLUMNS = 100


def columns(wide: bool = False) -> int | None:
    """The width to fit output in: None (no limit) with --wide."""
    import shutil

    return None if wide else max(DEFAULT_COLUMNS, shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns)


def fitted_table(
    headers: list[str],
    rows: list[list[str]],
    width: int | None,
    *,
    droppable: tuple[str, ...] = (),
    when_empty: tuple[str, ...] = (),
) -> str:
    """`table`, made to fit `width` columns: first the `when_empty` and `droppable` columns that
    say nothing (every cell "-"), then the other `droppable` ones in that order, then the widest
    cells are cut with an ellipsis. `width` None: everything, however wide."""
    headers, rows = list(headers), [[printable(cell) for cell in row] for row in rows]
    empty = [
        name
        for name in (*when_empty, *droppable)
        if name in headers and all(row[headers.index(name)] == "-" for row in rows)
    ]
    droppable = (*empty, *(name for name in droppable if name not in empty))

    def too_wide() -> bool:
        return width is not None and max(len(line) for line in table(headers, rows).splitlines()) > width

    for name in droppable:
        if not too_wide():
            break
        if name in headers:
            index = headers.index(name)
            headers.pop(index)
            for row in rows:
                row.pop(index)
    while too_wide():
        widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
        widest = widths.index(max(widths))
        limit = max(widths) - 1
        if limit < 8:
            break
        for row in rows:
            if len(row[widest]) > limit:
                row[widest] = row[widest][: limit - 1] + "…"
        if len(headers[widest]) > limit:
            headers[widest] = headers[widest][:limit]
    return table(headers, rows)


def json_text(document) -> str:
    """JSON for scripts: times in RFC 3339 (UTC), and ensure_ascii keeps control and bidi
    characters escaped."""
    import json

    from controller.readmodel.times import with_rfc3339_times

    return json.dumps(with_rfc3339_times(document), indent=2, sort_keys=True, ensure_ascii=True, default=str)


def print_json(document) -> None:
    print(json_text(document))
