"""The reconcile's reads of a job's attempt: the attempt's CustomJob with, at its ending, the
evidence (`_read_attempt`), and the progress probe of a running job: now and then the periodic
pass picks running jobs (`sources.Sources`, handed on with the listed copy), and their next look
lists the checkpoint root for the latest committed step and reads the CustomJob's run records
(restarts in place). A mixin of `reconciler.Reconciler`, kept apart so that the reconciler module
holds the door itself."""

from __future__ import annotations

from typing import Any

from controller.adapters.checkpoints import CheckpointsUnreadable
from controller.adapters.observation import AttemptObservation
from controller.core import events as ev
from controller.core.model import JobState, Phase


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

    def _read_attempt(self, state: JobState, vertex_name: str, attempt: int) -> AttemptObservation:
        uri = self._request(state.job_id).checkpoint_uri
        if any(a.number == attempt and a.ended for a in state.attempts):
            # Re-read for Vertex's late error: the evidence only once the error is there.
            observation = self.observer.observe(vertex_name, attempt, uri, read_evidence=False)
            if not observation.has_error():
                return observation
        # A running attempt's only next state is its end, so its read may be the first step of a
        # recovery: it may spend the read budget's reserve, which routine reads leave alone.
        running = (
            state.phase is Phase.RUNNING and state.current is not None and state.current.number == attempt
        )
        observation = self.observer.observe(vertex_name, attempt, uri, urgent=running)
        if observation.unreadable is not None:
            self._checkpoints_unreadable(state.job_id, attempt, observation.unreadable)
        return observation
