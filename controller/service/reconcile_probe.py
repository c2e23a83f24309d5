"""The reconcile's progress probe of a running job: now and then the periodic pass picks running
jobs (`sources.Sources`, handed on with the listed copy), and their next look lists the
checkpoint root for the latest committed step and reads the CustomJob's run records (restarts in
place). A mixin of `reconciler.Reconciler`, kept apart so that the reconciler module holds the
door itself."""

from __future__ import annotations

from typing import Any

from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.core import events as ev
from controller.core.model import JobState


class ProbeSteps:
    # Set by reconciler.Reconciler.
    observer: Any
    _request: Any
    _checkpoints_unreadable: Any

    def _probe(self, state: JobState) -> list[ev.Event]:
        try:  # the newest checkpoint, and the restarts in place of the running CustomJob
            return self.observer.progress(self._request(state.job_id).checkpoint_uri, state.current)
        except CheckpointsUnreadable as error:
            self._checkpoints_unreadable(state.job_id, state.current.number if state.current else 0, error)
            return []
