"""The reconcile's progress probe of a running job: now and then the periodic pass picks running
jobs, and their next look lists the checkpoint root for the latest committed step. A mixin of
`reconciler.Reconciler`, kept apart so that the reconciler module holds the door itself."""

from __future__ import annotations

import threading
from typing import Any

from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.core import events as ev
from controller.core.model import JobState, Phase


class ProbeSteps:
    # Set by reconciler.Reconciler.
    observer: Any
    _probe_wanted: set[str]
    _probe_lock: threading.Lock
    _request: Any
    _checkpoints_unreadable: Any

    def _probe_due(self, state: JobState) -> bool:
        """Whether the periodic pass picked this running job for a progress probe."""
        with self._probe_lock:
            wanted = state.job_id in self._probe_wanted
            self._probe_wanted.discard(state.job_id)
        return wanted and state.phase is Phase.RUNNING

    def probe_on_next_look(self, job_ids: set[str]) -> None:
        """The periodic pass's choice of running jobs whose checkpoint roots are listed."""
        with self._probe_lock:
            self._probe_wanted |= job_ids

    def _probe(self, state: JobState) -> list[ev.Event]:
        try:  # the newest checkpoint, and the restarts in place of the running CustomJob
            return self.observer.progress(self._request(state.job_id).checkpoint_uri, state.current)
        except CheckpointsUnreadable as error:
            self._checkpoints_unreadable(state.job_id, state.current.number if state.current else 0, error)
            return []
