"""Times as people and scripts read them: RFC 3339 in UTC (`2026-11-26T16:50:48.120Z`), the
form `gcloud --format=json` and `kubectl -o json` print. Stored documents keep epoch seconds;
only what is printed as JSON is converted, by the field's name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(seconds: float) -> str:
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        return "9999-12-31T23:59:59Z" if seconds > 0 else "0001-01-01T00:00:00Z"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_time_field(name: str) -> bool:
    return name == "time" or (name.endswith("At") and name[:1].islower())


def with_rfc3339_times(value: Any) -> Any:
    """A copy of a JSON value with every time field (`time`, `...At`) that holds epoch seconds
    written as RFC 3339; everything else as it was."""
    if isinstance(value, dict):
        return {
            key: (
                rfc3339(item)
                if is_time_field(key) and isinstance(item, int | float) and not isinstance(item, bool)
                else with_rfc3339_times(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [with_rfc3339_times(item) for item in value]
    return value
