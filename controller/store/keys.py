"""Where each kind of document lives in the state store: the one definition of every key."""

from __future__ import annotations

JOBS_PREFIX = "jobs/"
REJECTED_PREFIX = "rejected/"
# A cancel request, recorded by the intake whether or not the job exists yet (a tombstone when
# it does not): the job is born cancelled if its request arrives later.
CANCELS_PREFIX = "cancels/"


def job_key(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}"


def rejected_key(digest: str) -> str:
    return f"{REJECTED_PREFIX}{digest}"


def cancel_key(job_id: str) -> str:
    return f"{CANCELS_PREFIX}{job_id}"
