"""What the HTTP server (`service.http`) asks of the controller: intake of push deliveries, the
jobs' status documents, liveness and readiness; and the server's start. A mixin of
`daemon.Controller`, kept apart so that the daemon module holds only the leadership loop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from controller import logs
from controller.readmodel.jobs import status_document
from controller.service.intake import Intake, IntakeResult
from controller.service.intake_guard import Delivery, IntakeGuard
from controller.settings import Settings
from controller.store import StateStore
from controller.store.keys import JOBS_PREFIX, job_key

log = logs.get("relaunch.daemon")


class HttpFacade:
    # Set by daemon.Controller.
    settings: Settings
    clock: Callable[[], float]
    store: StateStore
    intake: Intake
    intake_guard: IntakeGuard
    vertex: Any
    sources: Any
    degradation: Any
    subscriptions: Any
    metrics: Any
    http: Any
    _stop: threading.Event
    _leading: bool
    _last_iteration_at: float

    # --- HTTP facade used by controller.service.http ------------------------------------------------
    def accept_request(
        self, data: bytes, attributes: dict[str, str], delivery: Delivery | None = None
    ) -> IntakeResult:
        return self.intake_guard.accept(data, attributes, delivery)

    def job_document(self, job_id: str) -> dict | None:
        record = self.store.get(job_key(job_id))
        if record is None:
            return None
        document = status_document(record.document)
        position = self.vertex.lane.position(job_id)
        if position is not None:
            # Only the leader knows the lane: the stored phase says "accepted" (a new job, whose
            # intent is written when its turn comes) or "submitting" (a next attempt) either way.
            document["submissionQueue"] = {
                "position": position,
                "waiting": self.vertex.lane.waiting(),
                "summary": f"queued for submission, position {position} (waiting for a create-quota slot)",
            }
        return document

    def list_job_documents(self) -> list[dict]:
        return [status_document(r.document, with_timeline=False) for r in self.store.list(JOBS_PREFIX)]

    def is_alive(self) -> bool:
        """False once the control loop has not completed a turn for `loop_stall_seconds` (a
        wedged loop: Cloud Run's liveness probe then restarts the instance)."""
        if self._stop.is_set():
            return False
        stalled_for = self.clock() - self._last_iteration_at
        if stalled_for > self.settings.loop_stall_seconds:
            log.error("control loop stalled", stalled_seconds=round(stalled_for, 1))
            return False
        # The pass runs on a queue worker: a wedged one stalls reconciliation, not the loop.
        pass_for = self.sources.pass_running_for(self.clock())
        if pass_for > self.settings.loop_stall_seconds:
            log.error("reconcile pass stalled", stalled_seconds=round(pass_for, 1))
            return False
        return True

    def is_ready(self) -> tuple[bool, str]:
        if self._stop.is_set():
            return False, "shutting down"
        degraded, failing = self.degradation.is_degraded()
        if degraded:
            return False, f"degraded, standing by: {failing} failing"
        if self._leading:
            if not self.subscriptions.streams:
                return False, "leader without subscriptions"
            problems = self.subscriptions.problems()
            return (False, "leader not receiving: " + "; ".join(problems)) if problems else (True, "leader")
        return True, "standby"

    def _start_http(self) -> None:
        from controller.service.http import make_server

        verifier = None
        if self.settings.push_service_account:
            from controller.service.push_auth import PushVerifier

            verifier = PushVerifier(
                audience=self.settings.push_audience or "",
                service_account=self.settings.push_service_account,
                certs_url=self.settings.push_certs_url,
            )
        self.http = make_server(
            "0.0.0.0",
            self.settings.port,
            self,
            self.metrics,
            verifier,
            max_workers=self.settings.http_max_workers,
        )
        self.http.start()
        log.info("http serving", port=self.http.port)
