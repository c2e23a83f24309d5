"""Vertex AI label rules and the labels Relaunch puts on every CustomJob it creates.

The three system labels let the controller find its own jobs again (after a restart, or to
detect a job that another controller instance already submitted): `relaunch-job` names the
user's jobId, `relaunch-attempt` the attempt number and `managed-by` marks the job as ours.
"""

from __future__ import annotations

import re

JOB_LABEL = "relaunch-job"
ATTEMPT_LABEL = "relaunch-attempt"
MANAGED_BY_LABEL = "managed-by"
MANAGED_BY_VALUE = "relaunch"
RESERVED_LABEL_KEYS = (JOB_LABEL, ATTEMPT_LABEL, MANAGED_BY_LABEL)

# Vertex accepts at most 64 labels on a resource; Relaunch needs three of them.
VERTEX_MAX_LABELS = 64
MAX_USER_LABELS = VERTEX_MAX_LABELS - len(RESERVED_LABEL_KEYS)
MAX_LABEL_LENGTH = 63

# Vertex also allows international lowercase letters; we keep to ASCII, which every Google API
# and every shell quoting rule treats the same way.
_KEY_PATTERN = re.compile(r"[a-z][a-z0-9_-]*")
_VALUE_PATTERN = re.compile(r"[a-z0-9_-]*")


def labels_for(job_id: str, attempt: int) -> dict[str, str]:
    """The system labels of attempt `attempt` (1-based) of the job `job_id`."""
    return {
        JOB_LABEL: job_id,
        ATTEMPT_LABEL: str(attempt),
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
    }


def label_key_problem(key: str) -> str | None:
    """Why `key` cannot be a user label key, or None when it can."""
    if key in RESERVED_LABEL_KEYS:
        return f"label key {key!r} is reserved for Relaunch's own labels"
    if not key:
        return "label keys must not be empty"
    if len(key) > MAX_LABEL_LENGTH:
        return f"label keys must be at most {MAX_LABEL_LENGTH} characters (got {len(key)})"
    if not _KEY_PATTERN.fullmatch(key):
        return (
            f"label key {key!r} must start with a lowercase letter and contain only "
            "lowercase letters, digits, '_' and '-'"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` cannot be a label value, or None when it can (empty values are allowed)."""
    if len(value) > MAX_LABEL_LENGTH:
        return f"label values must be at most {MAX_LABEL_LENGTH} characters (got {len(value)})"
    if not _VALUE_PATTERN.fullmatch(value):
        return f"label value {value!r} may contain only lowercase letters, digits, '_' and '-'"
    return None
