"""Classify how a Vertex AI attempt ended.

Vertex does not publish a stable error for a spot reclaim of a training job, so no single string
decides. The rules below are checked in order and the first match wins (like the ordered rules of
a Kubernetes JobSet failure policy). The strongest evidence comes first: the trainer's own exit
record, written on SIGTERM, beats anything parsed out of Vertex's message.

Every rule is a row in `RULES`; the tests check each row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Ending(str, Enum):
    SUCCEEDED = "succeeded"
    PREEMPTED = "preempted"
    INFRASTRUCTURE = "infrastructure"
    USER_ERROR = "user_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


# google.rpc.Code values that appear in CustomJob.error.
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_RESOURCE_EXHAUSTED = 8
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14

# Trainer exit codes (docs/contracts.md) that Vertex quotes in its "non-zero status" message.
_PREEMPTED_EXIT_CODES = {75, 76}
_CONFIG_EXIT_CODE = 64
_RENDEZVOUS_EXIT_CODE = 69


@dataclass(frozen=True)
class Observation:
    """Everything known about one finished attempt."""

    vertex_state: str  # JobState name without prefix: SUCCEEDED, FAILED, CANCELLED, EXPIRED, ...
    error_code: int = 0
    error_message: str = ""
    exit_reason: str | None = None  # from the trainer's exit record, when one was found


@dataclass(frozen=True)
class Classification:
    ending: Ending
    rule: str  # name of the rule that matched, for logs and the attempt history
    permanent: bool = False  # retrying cannot help (e.g. a configuration error)


@dataclass(frozen=True)
class Rule:
    name: str
    matches: Callable[[Observation], bool]
    ending: Ending
    permanent: bool = False
    why: str = ""


_NONZERO_STATUS = re.compile(r"non-zero status of (\d+)")


def _exit_status(obs: Observation) -> int | None:
    found = _NONZERO_STATUS.search(obs.error_message)
    return int(found.group(1)) if found else None


def _message_has(*words: str) -> Callable[[Observation], bool]:
    pattern = re.compile("|".join(words), re.IGNORECASE)
    return lambda obs: bool(pattern.search(obs.error_message))


RULES: tuple[Rule, ...] = (
    Rule(
        "succeeded",
        lambda o: o.vertex_state == "SUCCEEDED",
        Ending.SUCCEEDED,
        why="Vertex says every replica exited 0.",
    ),
    Rule(
        "cancelled",
        lambda o: o.vertex_state in ("CANCELLED", "CANCELLING"),
        Ending.CANCELLED,
        why="Someone cancelled the job (Relaunch or a person).",
    ),
    Rule(
        "exit-record-preempted",
        lambda o: o.exit_reason == "preempted",
        Ending.PREEMPTED,
        why="The trainer recorded that it stopped on SIGTERM: the strongest preemption signal.",
    ),
    Rule(
        "preempted-exit-status",
        lambda o: _exit_status(o) in _PREEMPTED_EXIT_CODES,
        Ending.PREEMPTED,
        why="A replica exited with the trainer's 'preempted' code even if its record was lost.",
    ),
    Rule(
        "preemption-message",
        _message_has(r"preempt", r"reclaim", r"spot vm"),
        Ending.PREEMPTED,
        why="Vertex's own wording for a spot reclaim.",
    ),
    Rule(
        "exit-record-config-error",
        lambda o: o.exit_reason == "config_error" or _exit_status(o) == _CONFIG_EXIT_CODE,
        Ending.USER_ERROR,
        permanent=True,
        why="The trainer rejected its configuration: every retry would fail the same way.",
    ),
    Rule(
        "timeout",
        lambda o: (
            o.error_code == CODE_DEADLINE_EXCEEDED
            or bool(re.search(r"timeout|timed out", o.error_message, re.IGNORECASE))
            or o.vertex_state == "EXPIRED"
        ),
        Ending.TIMEOUT,
        why="The job ran past scheduling.timeout.",
    ),
    Rule(
        "capacity",
        lambda o: (
            o.error_code == CODE_RESOURCE_EXHAUSTED
            or bool(re.search(r"insufficient|stockout|quota", o.error_message, re.IGNORECASE))
        ),
        Ending.INFRASTRUCTURE,
        why="No capacity or quota in the region; waiting helps.",
    ),
    Rule(
        "internal",
        lambda o: (
            o.error_code in (CODE_INTERNAL, CODE_UNAVAILABLE)
            or bool(re.search(r"internal error", o.error_message, re.IGNORECASE))
        ),
        Ending.INFRASTRUCTURE,
        why="Vertex reported an internal or availability error.",
    ),
    Rule(
        "rendezvous-timeout",
        lambda o: o.exit_reason == "rendezvous_timeout" or _exit_status(o) == _RENDEZVOUS_EXIT_CODE,
        Ending.INFRASTRUCTURE,
        why="The gang never assembled: a node did not come up.",
    ),
    Rule(
        "replica-error",
        lambda o: (
            o.exit_reason == "runtime_error"
            or _exit_status(o) is not None
            or o.error_code == CODE_INVALID_ARGUMENT
        ),
        Ending.USER_ERROR,
        why="A replica of the user's program exited non-zero.",
    ),
    Rule(
        "unknown-failure",
        lambda o: True,
        Ending.INFRASTRUCTURE,
        why="Anything else: assume infrastructure, which still spends the failure budget.",
    ),
)


def classify(obs: Observation) -> Classification:
    for rule in RULES:
        if rule.matches(obs):
            return Classification(rule.ending, rule.name, rule.permanent)
    raise AssertionError("the last rule matches everything")  # pragma: no cover
