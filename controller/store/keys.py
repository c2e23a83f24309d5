"""Where each kind of document lives in the state store: the one definition of every key."""

from __future__ import annotations

import hashlib
from typing import Any

from controller import jobrecord

JOBS_PREFIX = "jobs/"
REJECTED_PREFIX = "rejected/"
# One claim per checkpoint root: which job owns it (controller.service.ownership).
CHECKPOINT_ROOTS_PREFIX = "checkpoint-roots/"
# A cancel request, recorded by the intake whether or not the job exists yet (a tombstone when
# it does not): the job is born cancelled if its request arrives later.
CANCELS_PREFIX = "cancels/"
# The adaptive checkpoint interval's rate book (one document for every capacity class, with the
# (job, attempt) endings it counted): controller.service.interval.
INTERVAL_LEDGER_KEY = "checkpoint-interval/ledger"
# A field of a finished job's document, set in the same write as its terminal state when the
# ledger above has yet to count its endings, and removed once it has: it keeps the job in the
# live index until then, so a crash between the two writes loses no ending.
LEDGER_PENDING_FIELD = jobrecord.LEDGER_PENDING


def job_key(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}"


def rejected_key(digest: str) -> str:
    return f"{REJECTED_PREFIX}{digest}"


def rejected_key_for_payload(payload: bytes) -> str:
    """The record of a rejected message: one per distinct payload."""
    return rejected_key(hashlib.sha256(payload).hexdigest()[:24])


def checkpoint_root_key(segments: list[str]) -> str:
    """The claim of a checkpoint root given as [scheme+bucket, folder, folder, ...].

    Each segment becomes a short hash, so any object name fits the store's key alphabet and a
    root's claim key is a prefix of the claim keys of every root inside it (found with `list`)."""
    return CHECKPOINT_ROOTS_PREFIX + "/".join(hashlib.sha256(s.encode()).hexdigest()[:10] for s in segments)


def cancel_key(job_id: str) -> str:
    return f"{CANCELS_PREFIX}{job_id}"


def is_live(key: str, document: dict[str, Any]) -> bool:
    """Whether a document belongs to the store's live index (`StateStore.list_live`): a job that
    has not reached a terminal phase, or a finished one whose endings the checkpoint interval's
    ledger has yet to count (`LEDGER_PENDING_FIELD`). A job document whose phase cannot be read
    counts as live, so that nothing unreadable ever drops out of the reconcile pass."""
    return key.startswith(JOBS_PREFIX) and jobrecord.is_live_document(document)


# The leading controller's sign of life (controller.store.heartbeat): the CLI reads it to tell a
# user at once that no controller is running against the store they submit to.
HEARTBEAT_KEY = "controller/heartbeat"
