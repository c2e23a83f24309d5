"""What the job-watching verbs share: reading job documents from the state store, turning
failures into one-line errors, and formatting times and tables.

The verbs read the same store the daemon writes (`RELAUNCH_STATE_STORE`), keys `jobs/<jobId>`,
and never write to it.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from controller.settings import Settings

PROG = "relaunch"


class CommandError(Exception):
    """A failure the user should see as one line, with the exit status to return."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def guarded(what: str, action: Callable[[], int]) -> int:
    """Run a verb's body; unreachable services and bad settings become one line and exit 1.

    `what` says what was being done ("read job state"), the exception's first line says why.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from pydantic import ValidationError

    try:
        return action()
    except CommandError as error:
        return fail(str(error), error.status)
    except ValidationError as error:  # a bad RELAUNCH_* variable
        first = error.errors()[0]
        name = "RELAUNCH_" + str(first["loc"][0]).upper() if first.get("loc") else "settings"
        return fail(f"invalid setting {name} ({first['msg']})", 2)
    except (
        gexc.GoogleAPIError,
        auth_exc.GoogleAuthError,
        ConnectionError,
        TimeoutError,
        OSError,
        sqlite3.Error,
        ValueError,
    ) as error:
        return fail(f"cannot {what} ({_why(error)})", 1)


def _why(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def settings() -> Settings:
    return Settings()


def open_job_store(config: Settings):
    """The state store, read-only by convention. A missing SQLite file is an error here (the
    daemon has not run with this setting), not an empty store created by mistake."""
    from controller.store.factory import open_store

    url = config.state_store
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if path and not Path(path).exists():
            raise CommandError(
                f"cannot read job state (no state store at {path}; "
                "set RELAUNCH_STATE_STORE to the controller's)",
                1,
            )
    return open_store(url)


def stored_document(store, job_id: str) -> dict | None:
    from controller.store.base import check_key
    from controller.store.keys import job_key

    try:
        check_key(job_key(job_id))
    except ValueError:
        return None  # not a name any job can have
    record = store.get(job_key(job_id))
    return record.document if record else None


def require_document(store, job_id: str) -> dict:
    document = stored_document(store, job_id)
    if document is None:
        raise CommandError(
            f"no job {job_id!r} in the state store (see `relaunch status` for the jobs there)", 2
        )
    return document


def all_documents(store) -> list[dict]:
    return [record.document for record in store.list("jobs/")]


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
    return "-" if value is None or value == "" else str(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart, like `kubectl get`."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in [headers, *rows]
    ]
    return "\n".join(lines)
