"""Bounded state: what the state store forgets, and when.

- Rejected-request records (`rejected/`) are kept `rejected_retention_seconds` and at most
  `rejected_max_records` of them (the oldest go first). The dead-letter topic has each message
  with its reason; the record only deduplicates alerts and helps an operator for a while.
- Finished jobs (succeeded, failed, cancelled) are *deleted* `finished_job_retention_seconds` after
  their last state change, with their checkpoint-root claim; `relaunch status JOB` then answers
  "no job ... in the state store", like a job that never existed. Checkpoints in the bucket are
  never touched. 0 keeps finished jobs for ever.

`prune_state` is one pass, run by the leader every `housekeeping_seconds`; each deletion names the
version it read, so a record that changed meanwhile is left for the next pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller import logs
from controller.jobrecord import JobRecord
from controller.service.ownership import release_checkpoint_root
from controller.settings import Settings
from controller.store import StateStore, Versioned
from controller.store.base import StoreError
from controller.store.keys import JOBS_PREFIX, REJECTED_PREFIX

log = logs.get("relaunch.retention")


@dataclass(frozen=True)
class PruneReport:
    rejected_deleted: int
    jobs_deleted: tuple[str, ...]


def prune_state(
    store: StateStore,
    settings: Settings,
    now: float,
    *,
    on_job_deleted: Callable[[str], None] = lambda job_id: None,
) -> PruneReport:
    rejected = _prune_rejected(store, settings, now)
    jobs = (
        _prune_finished_jobs(store, settings, now, on_job_deleted)
        if settings.finished_job_retention_seconds
        else ()
    )
    if rejected or jobs:
        log.info("state pruned", rejected_deleted=rejected, jobs_deleted=len(jobs))
    return PruneReport(rejected, tuple(jobs))


def _prune_rejected(store: StateStore, settings: Settings, now: float) -> int:
    records = sorted(store.list(REJECTED_PREFIX), key=lambda r: _number(r.document.get("time")))
    expired = [
        r for r in records if now - _number(r.document.get("time")) > settings.rejected_retention_seconds
    ]
    kept = records[len(expired) :]
    over = kept[: max(0, len(kept) - settings.rejected_max_records)]
    return sum(_delete(store, record) for record in [*expired, *over])


def _prune_finished_jobs(
    store: StateStore, settings: Settings, now: float, on_job_deleted: Callable[[str], None]
) -> list[str]:
    deleted = []
    for record in store.list(JOBS_PREFIX):
        try:
            job = JobRecord.from_dict(record.document)
        except (KeyError, TypeError, ValueError):
            continue  # unreadable: never deleted on a guess
        state = job.state
        if not state.phase.terminal or now - state.updated_at <= settings.finished_job_retention_seconds:
            continue
        job_id = job.job_id
        if not _delete(store, record):
            continue
        uri = job.checkpoint_uri
        if uri:
            try:
                release_checkpoint_root(store, job_id, uri)
            except StoreError as error:
                log.warning("claim release failed; the root stays claimed", job_id=job_id, error=str(error))
        log.info("finished job deleted by retention", job_id=job_id, attempt=None, phase=state.phase.value)
        on_job_deleted(job_id)
        deleted.append(job_id)
    return deleted


def _delete(store: StateStore, record: Versioned) -> bool:
    try:
        store.delete(record.key, expected_version=record.version)
    except StoreError:
        return False  # changed or gone since it was listed: the next pass decides again
    return True


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
