"""The reconcile's part in the checkpoint interval's ledger: after an ending is stored, teach the
book; once a finished job's every ending is counted, clear its ledger mark. A mixin of
`reconciler.Reconciler`, kept apart so that the reconciler module holds the door itself. The mark
is cleared by the reconcile's own fenced write (`_write_record`): nothing else writes a job's
record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from controller import logs
from controller.adapters.lease import LeaseNotHeld
from controller.core.model import Attempt, JobState
from controller.jobrecord import JobRecord
from controller.request import JobRequest
from controller.service.interval import IntervalKeeper
from controller.store import Fenced, StateStore, VersionConflict
from controller.store.keys import job_key

log = logs.get("relaunch.reconcile")

# A write that loses a compare-and-set race is tried again on the fresh record, this many times.
WRITE_TRIES = 5


class LedgerSteps:
    # Set by reconciler.Reconciler.
    store: StateStore
    intervals: IntervalKeeper
    clock: Callable[[], float]
    fence: Callable[[], int]
    _request: Callable[[str], JobRequest]

    def _learn_ending(self, state: JobState, attempt: Attempt, read: Any = None) -> None:
        """`attempt`'s ending is stored: teach the checkpoint interval's rate book (`read`: the
        trainer's word, read for that write). A failure here must not stop the job: a finished
        job stays in the live index until its endings are counted (the mark), and a later look
        catches up."""
        self._ledger_step(
            state,
            lambda request: self.intervals.on_ending(state.job_id, request, attempt, self.clock(), read),
        )

    def _catch_up_ledger(self, state: JobState) -> None:
        self._ledger_step(
            state, lambda request: self.intervals.catch_up([state], self._request, self.clock())
        )

    def _ledger_step(self, state: JobState, step: Callable[[JobRequest], Any]) -> None:
        """Teach the book, then, for a finished job whose every ending is counted, clear its
        ledger mark (the reconcile's own write: nothing else writes a job's record)."""
        try:
            request = self._request(state.job_id)
            step(request)
            if state.phase.terminal and self.intervals.all_counted(state, request):
                self._write_record(state.job_id, lambda r: replace(r, ledger_pending=False))
        except (Fenced, LeaseNotHeld):
            raise
        except Exception:
            log.exception("checkpoint interval: learning from an ending failed", job_id=state.job_id)

    def _write_record(self, job_id: str, change: Callable[[JobRecord], JobRecord]) -> None:
        """A fenced compare-and-set of the job's record that leaves its state as it is."""
        for _ in range(WRITE_TRIES):
            record = self.store.get(job_key(job_id))
            if record is None:
                return
            stored = JobRecord.from_dict(record.document)
            if (changed := change(stored)) == stored:
                return
            try:
                self.store.put(
                    job_key(job_id), changed.to_dict(), expected_version=record.version, fence=self.fence()
                )
            except VersionConflict:
                continue
            log.info("checkpoint interval: every ending of the finished job is counted", job_id=job_id)
            return
