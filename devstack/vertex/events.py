"""Job state events as Cloud Logging LogEntry dicts (docs/contracts.md), delivered in order.

Vertex writes service log lines as a job goes; a log sink forwards them to Pub/Sub. Which
transitions write a line is only partly documented (see `state_text`).
Entries are queued under the emulator's lock (so their order is the order of transitions) and
handed to the sink on one dispatcher thread, so a slow or failing sink never stalls a job.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.cloud.aiplatform_v1 import JobState

log = logging.getLogger(__name__)

EventSink = Callable[[dict[str, Any]], None]

# Service lines Vertex is documented to write (`gcloud ai custom-jobs stream-logs`
# reference and the training-service page, devstack/README.md names both).
DOCUMENTED_TEXT = {
    JobState.JOB_STATE_PENDING: "Waiting for job to be provisioned.",
    JobState.JOB_STATE_RUNNING: "Job is running.",
    JobState.JOB_STATE_SUCCEEDED: "Job completed successfully.",
}
# Transitions nobody documents a line for: devstack's own texts, written only when the knob
# `log_undocumented_transitions` is on.
UNDOCUMENTED_TEXT = {
    JobState.JOB_STATE_QUEUED: "Job is queued.",
    JobState.JOB_STATE_FAILED: "Job failed.",
    JobState.JOB_STATE_CANCELLING: "Job is being cancelled.",
    JobState.JOB_STATE_CANCELLED: "Job was cancelled.",
}

_insert_ids = itertools.count(1)
_insert_prefix = uuid.uuid4().hex[:12]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def state_text(state: JobState, undocumented_too: bool = True) -> str | None:
    """The service line for entering ``state``, or None when none is written."""
    if state in DOCUMENTED_TEXT:
        return DOCUMENTED_TEXT[state]
    if undocumented_too:
        return UNDOCUMENTED_TEXT.get(state, f"Job state changed to {state.name}.")
    return None


def service_log_entry(
    project: str, job_id: str, text: str, when: datetime, severity: str = "INFO"
) -> dict[str, Any]:
    """A LogEntry of Vertex's service task for job ``job_id``."""
    return {
        "insertId": f"{_insert_prefix}-{next(_insert_ids)}",
        "logName": f"projects/{project}/logs/ml.googleapis.com%2F{job_id}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": job_id, "project_id": project, "task_name": "service"},
        },
        "severity": severity,
        "textPayload": text,
        "timestamp": rfc3339(when),
        "receiveTimestamp": rfc3339(datetime.now(UTC)),
    }


def state_log_entry(project: str, job_id: str, state: JobState, when: datetime) -> dict[str, Any]:
    """The LogEntry Vertex's service task writes when job ``job_id`` enters ``state``."""
    severity = "ERROR" if state == JobState.JOB_STATE_FAILED else "INFO"
    return service_log_entry(project, job_id, state_text(state) or "", when, severity)


class EventDispatcher:
    """Calls ``sink`` with each queued entry, in order, on its own thread."""

    _STOP = object()

    def __init__(self, sink: EventSink | None) -> None:
        self._sink = sink
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        if sink is not None:
            self._thread = threading.Thread(target=self._run, name="vertex-events", daemon=True)
            self._thread.start()

    def publish(self, entry: dict[str, Any]) -> None:
        if self._thread is not None:
            self._queue.put(entry)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (within ``timeout``), then stop."""
        if self._thread is not None:
            self._queue.put(self._STOP)
            self._thread.join(timeout)

    def _run(self) -> None:
        while (entry := self._queue.get()) is not self._STOP:
            try:
                self._sink(entry)  # type: ignore[misc]
            except Exception:  # the sink is someone else's code; a job must not die of it
                log.exception("vertex event sink failed for %s", entry.get("insertId"))
