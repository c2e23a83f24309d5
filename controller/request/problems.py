"""Problems found in a request: each names its field path and says what is wrong."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A field path or a reason echoes what the sender wrote (an unknown key, a duplicated one): each is
# cut to this many characters, so one message of a megabyte cannot become a megabyte of record,
# log line and alert, and the copy's `reason` attribute keeps within Pub/Sub's 1,024 bytes.
MAX_FIELD_CHARS = 200
MAX_REASON_CHARS = 400


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: where (`field`, a path like `jobSpec.workerPoolSpecs[0]`)
    and why."""

    field: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "field", _cut(self.field, MAX_FIELD_CHARS))
        object.__setattr__(self, "reason", _cut(self.reason, MAX_REASON_CHARS))

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    tail = f"... ({len(text)} characters)"
    return text[: limit - len(tail)] + tail


class RequestInvalid(Exception):
    """A request that cannot be accepted; `.problems` lists every reason found."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


_IDENTIFIER_RE = re.compile(r"[^.\[\]\"\s]+")  # keys that need no quoting in a path


def format_path(parts: tuple | list) -> str:
    """`("jobSpec", "workerPoolSpecs", 0, "replicaCount")` -> `jobSpec.workerPoolSpecs[0].replicaCount`."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER_RE.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(str(part))}]"
    return text or "request"


def short_repr(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it (JSON), cut short for one-line messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kind_of(value: Any) -> str:
    """The JSON name of a value's type, for messages like 'must be an object (got list)'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "list"
    return type(value).__name__
