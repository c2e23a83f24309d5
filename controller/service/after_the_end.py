"""The reconcile's last steps for a finished job: cancel a stray CustomJob a listing found with
its labels, send the alerts left in its outbox, let the interval ledger catch up, then forget the
job. A mixin of `reconciler.Reconciler`, kept apart so that the reconciler module holds the door
itself; every write goes through the reconcile's own `_decide_and_write`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.adapters.observation import Observer
from controller.adapters.vertex import VertexBackend, job_labels, observed_event
from controller.core import events as ev
from controller.core.actions import Action
from controller.core.decide import pending_alerts
from controller.core.model import JobState
from controller.jobrecord import JobRecord
from controller.request import JobRequest
from controller.service.reconcile_ledger import LedgerSteps


class AfterTheEnd(LedgerSteps):
    # Set by reconciler.Reconciler.
    observer: Observer
    vertex: VertexBackend
    _requests: dict[str, JobRequest]
    _decide_and_write: Callable[..., tuple[JobState, list[Action]]]
    _execute: Callable[[JobState, Action], list[ev.Event]]

    def _after_the_end(self, job_id: str, state: JobState, document: dict[str, Any] | None) -> None:
        """A finished job (`document`: as loaded, None when it finished in this look): a CustomJob
        a listing found with its labels is cancelled, alerts left in its outbox go out, the
        interval ledger learns endings it has not counted; then the process forgets the job."""
        strays: list[ev.Event] = []
        for job in self.observer.listed_for(job_id):
            _, attempt = job_labels(job)
            if attempt is not None:
                strays.append(observed_event(job, attempt))
        if strays:
            state, actions = self._decide_and_write(job_id, strays)  # the core cancels strays
            for action in actions:
                self._execute(state, action)
        if document is not None:
            delivered: list[ev.Event] = []
            for alert in pending_alerts(state):
                delivered += self._execute(state, alert)
            if delivered:
                self._decide_and_write(job_id, delivered)
            if JobRecord.from_dict(document).ledger_pending:
                self._catch_up_ledger(state)
        self._requests.pop(job_id, None)
        self.vertex.lane.leave(job_id)
