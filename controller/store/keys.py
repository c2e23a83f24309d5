"""Where each kind of document lives in the state store: the one definition of every key."""

from __future__ import annotations

JOBS_PREFIX = "jobs/"
REJECTED_PREFIX = "rejected/"


def job_key(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}"


def rejected_key(digest: str) -> str:
    return f"{REJECTED_PREFIX}{digest}"
