"""The subset of Vertex AI's list filter syntax (AIP-160) that ListCustomJobs honours here.

Supported terms, joined with ``AND``:
  ``labels.KEY=VALUE``, ``labels.KEY!=VALUE``, ``labels.KEY:*`` (label present),
  ``state=JOB_STATE_RUNNING`` (quoted or not, ``!=`` too), ``display_name="..."`` (``!=`` too),
  ``create_time>"2026-01-01T00:00:00Z"`` (also ``>=``, ``<``, ``<=``).
Anything else (OR, NOT, parentheses, other fields) is rejected with ``FilterError`` so that a
caller relying on an unsupported filter learns it at once instead of getting every job back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud.aiplatform_v1 import CustomJob, JobState


class FilterError(ValueError):
    """The filter string cannot be parsed or uses something this stand-in does not support."""


_TERM = re.compile(
    r"""\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z0-9_\-]+|"[^"]*"))?)
        \s*(?P<op>!=|>=|<=|=|:|>|<)
        \s*(?P<value>"(?:[^"\\]|\\.)*"|[^\s"()]+)\s*""",
    re.VERBOSE,
)
_AND = re.compile(r"AND\b")

# Predicates read the raw protobuf message (`CustomJob.pb(job)`): the proto-plus wrapper costs
# microseconds per field read, which adds up over a listing of thousands of jobs.
Predicate = Callable[[Any], bool]


@dataclass(frozen=True)
class _Term:
    field: str
    op: str
    value: str


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def _split_terms(text: str) -> list[_Term]:
    terms: list[_Term] = []
    pos = 0
    while True:
        match = _TERM.match(text, pos)
        if not match:
            raise FilterError(f"cannot parse filter at position {pos}: {text[pos:]!r}")
        terms.append(_Term(match["field"], match["op"], match["value"]))
        pos = match.end()
        if pos == len(text):
            return terms
        conjunction = _AND.match(text, pos)
        if not conjunction:
            raise FilterError(f"expected AND at position {pos}: {text[pos:]!r}")
        pos = conjunction.end()


def _parse_time(raw: str) -> datetime:
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise FilterError(f"not an RFC 3339 timestamp: {raw!r}") from exc
    # RFC 3339 always carries an offset; a bare time is read as UTC rather than refused.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


_COMPARE = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _label_predicate(term: _Term) -> Predicate:
    key = _unquote(term.field.split(".", 1)[1])
    if term.op == ":":
        if term.value != "*":
            raise FilterError(f"only 'labels.{key}:*' is supported for label presence")
        return lambda job: key in job.labels
    value = _unquote(term.value)
    if term.op == "=":
        return lambda job: job.labels.get(key) == value
    if term.op == "!=":
        return lambda job: job.labels.get(key) != value
    raise FilterError(f"operator {term.op!r} is not supported on labels")


def _state_predicate(term: _Term) -> Predicate:
    name = _unquote(term.value)
    try:
        state = JobState[name]
    except KeyError as exc:
        raise FilterError(f"unknown job state {name!r}") from exc
    number = int(state)
    if term.op == "=":
        return lambda job: job.state == number
    if term.op == "!=":
        return lambda job: job.state != number
    raise FilterError(f"operator {term.op!r} is not supported on state")


def _display_name_predicate(term: _Term) -> Predicate:
    value = _unquote(term.value)
    if term.op == "=":
        return lambda job: job.display_name == value
    if term.op == "!=":
        return lambda job: job.display_name != value
    raise FilterError(f"operator {term.op!r} is not supported on display_name")


def _create_time_predicate(term: _Term) -> Predicate:
    if term.op not in _COMPARE:
        raise FilterError(f"operator {term.op!r} is not supported on create_time")
    bound = _parse_time(_unquote(term.value))
    compare = _COMPARE[term.op]
    return lambda job: compare(job.create_time.ToDatetime(tzinfo=UTC), bound)


def _predicate_for(term: _Term) -> Predicate:
    if term.field.startswith("labels."):
        return _label_predicate(term)
    if term.field == "state":
        return _state_predicate(term)
    if term.field == "display_name":
        return _display_name_predicate(term)
    if term.field == "create_time":
        return _create_time_predicate(term)
    raise FilterError(f"filtering on {term.field!r} is not supported")


def parse_filter(text: str) -> Callable[[CustomJob], bool]:
    """Compile ``text`` into a predicate over CustomJob; an empty filter matches every job."""
    if not text.strip():
        return lambda job: True
    predicates = [_predicate_for(term) for term in _split_terms(text)]

    def matches(job: CustomJob) -> bool:
        raw = CustomJob.pb(job)
        return all(predicate(raw) for predicate in predicates)

    return matches
