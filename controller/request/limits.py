"""Limits and fixed names of the request format (v1) that several parts of the request package share."""

from __future__ import annotations

import re

MAX_REQUEST_BYTES = 1024 * 1024
# Python's int-conversion limit (sys.get_int_max_str_digits' default): a longer integer can be
# neither read from nor written as decimal text, so a request never holds one.
MAX_NUMBER_DIGITS = 4300
MAX_DISPLAY_NAME_LENGTH = 100  # leaves room for " [attempt N]" within Vertex's 128
JOB_ID_PATTERN = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
JOB_ID_RE = re.compile(JOB_ID_PATTERN)

# Environment variables Relaunch sets on every container (docs/contracts.md). They always win over
# a user's value of the same name, and they count against Vertex's 100-entry limit.
RELAUNCH_ENV_NAMES = (
    "RELAUNCH_JOB_ID",
    "RELAUNCH_ATTEMPT",
    "RELAUNCH_CHECKPOINT_URI",
    "RELAUNCH_RESUME_FROM",
)
VERTEX_MAX_ENV = 100
MAX_USER_ENV = VERTEX_MAX_ENV - len(RELAUNCH_ENV_NAMES)

# Scheduling fields whose `false` means something: Vertex's retry switches are proto3 bools, which
# cannot tell `false` from unset, so the request keeps them as written (canonical camelCase name
# -> the spellings a user may write).
EXPLICIT_SCHEDULING_FIELDS = {
    "disableRetries": ("disableRetries", "disable_retries"),
    "restartJobOnWorkerRestart": ("restartJobOnWorkerRestart", "restart_job_on_worker_restart"),
}
