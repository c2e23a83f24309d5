"""`relaunch controller`: the long-lived daemon Cloud Run hosts.

One loop owns the schedule: hold (or wait for) the leader lease, and while leading keep both
subscriptions open, run a reconcile pass every `reconcile_seconds`, and fire due wake-ups.
A standby keeps serving HTTP (health, status) but pulls nothing and decides nothing.

SIGTERM (Cloud Run scale-in or deploy): stop pulling, let in-flight handlers finish, leave
unacked messages for redelivery, release the lease so the next instance takes over at once.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout

from google.cloud import pubsub_v1

from controller import logs
from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.pubsub import (
    TopicPublisher,
    UnreadableHint,
    ensure_topology,
    vertex_job_id_from_log_entry,
)
from controller.adapters.vertex import VertexBackend
from controller.adapters.webhook import WebhookSink
from controller.readmodel.jobs import status_document
from controller.service.alerts import AlertSink
from controller.service.deadletter import DeadLetterCopy
from controller.service.engine import Dependencies, Engine
from controller.service.intake import Intake, IntakeResult
from controller.service.metrics import Metrics
from controller.service.retention import prune_state
from controller.service.streams import SupervisedStream
from controller.settings import Settings
from controller.store.factory import open_store
from controller.store.keys import JOBS_PREFIX, job_key

log = logs.get("relaunch.daemon")


class Controller:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.clock = clock
        self.holder_id = settings.controller_id or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = Metrics()
        self.publisher_client = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        if settings.create_subscriptions:
            ensure_topology(settings, self.publisher_client, self.subscriber)
        self.publisher = TopicPublisher(self.publisher_client, timeout=settings.rpc_timeout_seconds)
        self.webhook = (
            WebhookSink(
                settings.webhook_url,
                timeout_seconds=settings.webhook_timeout_seconds,
                queue_size=settings.webhook_queue_size,
            )
            if settings.webhook_url
            else None
        )
        self.alerts = AlertSink(
            self.publisher,
            settings.topic_path(settings.alerts_topic),
            cooldown_seconds=settings.alert_cooldown_seconds,
            clock=clock,
            on_alert=self.webhook.send if self.webhook else None,
        )
        self.store = open_store(settings.state_store)
        self.lease = self._make_lease()
        self.vertex = VertexBackend(settings, on_api_error=self.metrics.api_error)
        self.engine = Engine(
            settings,
            Dependencies(
                store=self.store,
                vertex=self.vertex,
                checkpoints=CheckpointProbe(),
                alerts=self.alerts,
                metrics=self.metrics,
            ),
            clock=clock,
            fence=self._fence,
            is_leader=self.is_leader,
        )
        self._dead_letter = DeadLetterCopy(
            self.publisher,
            settings.topic_path(settings.dead_letter_topic),
            max_bytes=settings.dead_letter_max_bytes,
        )
        self.intake = Intake(self.engine, dead_letter=self._dead_letter)
        self._stop = threading.Event()
        self._streams: list = []
        self._leading = False
        self._keeper = None
        self.http = None
        self._last_iteration_at = clock()  # liveness: when the control loop last completed a turn
        self._next_housekeeping = 0.0

    # --- leadership -------------------------------------------------------------------------
    def _make_lease(self):
        """A GCS lease when the state lives in GCS; a single embedded store needs none."""
        if not self.settings.state_store.startswith("gs://"):
            return None
        from controller.adapters.lease import Lease

        # The lease object (`Lease` names it) lives in the state store's own folder.
        bucket, _, prefix = self.settings.state_store[len("gs://") :].partition("/")
        return Lease(bucket, prefix, self.holder_id, self.settings.lease_seconds, clock=self.clock)

    def is_leader(self) -> bool:
        return self.lease is None or self.lease.is_held()

    def _fence(self) -> int:
        return self.lease.fence if self.lease is not None else 0

    # --- subscriptions ----------------------------------------------------------------------
    def _on_request(self, message) -> None:
        try:
            result = self.intake.accept(message.data, dict(message.attributes))
        except Exception:
            log.exception("request handling failed; leaving it for redelivery", message_id=message.message_id)
            message.nack()
            return
        log.info(
            "request handled",
            job_id=result.job_id,
            attempt=None,
            status=result.status,
            reason=result.reason,
            message_id=message.message_id,
        )
        message.ack()

    def _on_event(self, message) -> None:
        try:
            vertex_job_id = vertex_job_id_from_log_entry(message.data)
        except UnreadableHint as error:
            # Redelivery cannot make it readable; the reconcile pass is the safety net.
            log.warning(
                "unreadable event acked and ignored", reason=str(error), message_id=message.message_id
            )
            self.metrics.unreadable_hint()
            message.ack()
            return
        if vertex_job_id is not None:
            try:
                self.engine.on_hint(vertex_job_id)
            except Exception:
                log.exception("event handling failed; leaving it for redelivery", vertex_job_id=vertex_job_id)
                message.nack()
                return
        message.ack()

    def _open_streams(self) -> None:
        flow = pubsub_v1.types.FlowControl(max_messages=self.settings.max_outstanding_messages)
        s = self.settings

        def supervised(name: str, subscription: str, callback) -> SupervisedStream:
            path = s.subscription_path(subscription)
            stream = SupervisedStream(
                name,
                lambda: self.subscriber.subscribe(path, callback=callback, flow_control=flow),
                path,
                max_backoff_seconds=s.stream_retry_max_seconds,
            )
            stream.open()
            return stream

        self._streams = [
            supervised("requests", s.requests_subscription, self._on_request),
            supervised("events", s.events_subscription, self._on_event),
        ]
        log.info("subscriptions opening")

    # --- health -------------------------------------------------------------------------------
    STREAMS_CONDITION = "subscriptions"

    def stream_problems(self) -> list[str]:
        return [f"{stream.name}: {stream.problem}" for stream in self._streams if stream.problem]

    def _supervise_streams(self) -> None:
        """Each loop turn: notice ended streams, reopen them when due, and raise
        `controller_degraded` once while any is down (resolved when all deliver again)."""
        for stream in self._streams:
            stream.check()
        problems = self.stream_problems()
        firing = self.alerts.is_firing("controller_degraded", None, self.STREAMS_CONDITION)
        if problems and not firing:
            self.alerts.raise_alert(
                "controller_degraded",
                "ERROR",
                f"controller {self.holder_id} is not receiving messages: {'; '.join(problems)}",
                details={"streams": problems},
                condition=self.STREAMS_CONDITION,
            )
        elif firing and not problems and self._streams:
            self.alerts.resolve(
                "controller_degraded",
                None,
                f"controller {self.holder_id} receives from every subscription again",
                condition=self.STREAMS_CONDITION,
            )

    def _loop_turn_completed(self) -> None:
        self._last_iteration_at = self.clock()

    def _housekeeping(self) -> None:
        """Bounded state: prune rejected records and finished jobs, and forget what the process
        remembers about jobs that are no longer live."""
        now = self.clock()
        if now < self._next_housekeeping:
            return
        self._next_housekeeping = now + self.settings.housekeeping_seconds
        report = prune_state(self.store, self.settings, now, on_job_deleted=self._forget_job)
        if report.rejected_deleted:
            self.metrics.pruned("rejected", report.rejected_deleted)
        if report.jobs_deleted:
            self.metrics.pruned("job", len(report.jobs_deleted))
        self.engine.forget_finished({state.job_id for state in self.engine.live_states()})

    def _forget_job(self, job_id: str) -> None:
        self.alerts.forget_job(job_id)
        self.metrics.forget_job(job_id)

    def _close_streams(self, timeout: float = 10.0) -> None:
        for stream in self._streams:
            stream.cancel()  # stop pulling; in-flight callbacks run to completion
        for stream in self._streams:
            try:
                stream.result(timeout=timeout)
            except (FutureTimeout, Exception):
                pass
        self._streams = []

    # --- HTTP facade used by controller.service.http ------------------------------------------------
    def accept_request(self, data: bytes, attributes: dict[str, str]) -> IntakeResult:
        return self.intake.accept(data, attributes)

    def job_document(self, job_id: str) -> dict | None:
        record = self.store.get(job_key(job_id))
        return status_document(record.document) if record else None

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
        return True

    def is_ready(self) -> tuple[bool, str]:
        if self._stop.is_set():
            return False, "shutting down"
        if self._leading:
            if not self._streams:
                return False, "leader without subscriptions"
            problems = self.stream_problems()
            return (False, "leader not receiving: " + "; ".join(problems)) if problems else (True, "leader")
        return True, "standby"

    # --- the loop ---------------------------------------------------------------------------
    def _update_leadership(self) -> None:
        if self.lease is None:
            leading = True
        elif self._leading:
            leading = self.lease.renew()
        else:
            leading = self.lease.try_acquire()
        if leading and not self._leading:
            log.info("became leader", holder=self.holder_id, fence=self._fence())
            self._open_streams()
            self._next_reconcile = 0.0
        elif self._leading and not leading:
            log.error("lost the leader lease; standing by", holder=self.holder_id)
            self.alerts.raise_alert(
                "controller_degraded", "ERROR", f"controller {self.holder_id} lost its leader lease"
            )
            self._close_streams()
        self._leading = leading
        self.metrics.set_leader(leading)

    def run(self, *, install_signal_handlers: bool = True) -> int:
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        self._start_http()
        log.info(
            "controller started",
            holder=self.holder_id,
            project=self.settings.project,
            region=self.settings.region,
            state_store=self.settings.state_store,
        )
        self._next_reconcile = 0.0
        next_lease_check = 0.0
        try:
            while not self._stop.is_set():
                now = self.clock()
                if now >= next_lease_check:
                    self._update_leadership()
                    next_lease_check = now + (
                        self.settings.lease_renew_seconds if self.lease is not None else 3600.0
                    )
                if self._leading:
                    if now >= self._next_reconcile:
                        self._guarded(self.engine.reconcile, "reconcile")
                        self._next_reconcile = self.clock() + self.settings.reconcile_seconds
                    self._guarded(self.engine.fire_due_timers, "timers")
                    self._guarded(self._supervise_streams, "stream supervision")
                    self._guarded(self._housekeeping, "housekeeping")
                self._loop_turn_completed()
                wait_until = min(
                    next_lease_check, self._next_reconcile if self._leading else next_lease_check
                )
                self.engine.timers.wait(max(0.0, min(1.0, wait_until - self.clock())))
        finally:
            self._shutdown()
        return 0

    def _guarded(self, fn, what: str) -> None:
        try:
            fn()
        except Exception:
            log.exception(f"{what} failed; will try again")

    def stop(self) -> None:
        self._stop.set()
        self.engine.timers.wake()

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

    def _shutdown(self) -> None:
        log.info("shutting down: closing subscriptions, releasing the lease")
        self._close_streams()
        if self.lease is not None and self._leading:
            try:
                self.lease.release()
            except Exception as error:
                log.warning("lease release failed", error=str(error))
        self._leading = False
        if self.http is not None:
            self.http.stop()
        if self.webhook is not None:
            self.webhook.close()
        log.info("controller stopped")


def main() -> int:
    settings = Settings()
    logs.configure(settings.log_level)
    return Controller(settings).run()
