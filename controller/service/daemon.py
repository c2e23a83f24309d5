"""`relaunch controller`: the long-lived daemon Cloud Run hosts.

One door per job: every signal (a request recorded, a Vertex event, a cancel, a wake-up, the
periodic pass) becomes a job id in one work queue (`service.workqueue`), and the queue's workers
run `reconcile(job_id)` (`service.reconciler`), never two on one job. The threads: the queue's
workers, the Pub/Sub stream callbacks and the HTTP server (both only record and enqueue), the
lease renewer, and this loop, which only takes and gives up leadership and supervises the
streams. The periodic pass is itself a key in the queue (`sources.PASS_KEY`), served by one
worker while the others go on reconciling, so a preemption is recovered while a pass runs.
A standby keeps serving HTTP (health, status, push deliveries, which it records: intake needs no
leadership) but pulls nothing and decides nothing.

Leadership really ends. The lease is renewed on its own thread (`LeaseKeeper`), so a slow pass
never lets it lapse unnoticed; every side effect checks it just before the call (`_check_lease`);
and the first sign that another controller leads (the keeper says the lease is lost, a check
finds it run out, or a state write is `Fenced`) makes this instance step down at once: streams
closed, the queue emptied, back to standing by.

Outages are survived: an error reaching the lease or the store is logged and retried on the next
tick, never raised out of the loop; meanwhile `/readyz` answers 503 and `controller_degraded` is
raised once. SIGTERM (scale-in, deploy): stop pulling, let in-flight handlers finish, leave unacked
messages for redelivery, release the lease so the next instance takes over at once. The leader
also leaves a heartbeat in the store (`store.heartbeat`), which the CLI reads.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from google.cloud import pubsub_v1

from controller import logs
from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.lease import LeaseKeeper, LeaseNotHeld
from controller.adapters.pubsub import TopicPublisher, ensure_topology, subscriber_client
from controller.adapters.vertex import VertexBackend
from controller.adapters.webhook import WebhookSink
from controller.service.alerts import AlertSink
from controller.service.deadletter import DeadLetterCopy
from controller.service.facade import HttpFacade
from controller.service.gauges import Gauges
from controller.service.health import Degradation
from controller.service.intake import Intake
from controller.service.intake_guard import Delivery, IntakeGuard, RetryLater
from controller.service.metrics import Metrics
from controller.service.reconciler import Dependencies, Reconciler
from controller.service.retention import prune_state
from controller.service.sources import PASS_KEY, Sources
from controller.service.subscriptions import Subscriptions
from controller.service.workqueue import WorkQueue
from controller.settings import Settings
from controller.store.factory import open_store
from controller.store.heartbeat import Heartbeat
from controller.store.keys import job_key

log = logs.get("relaunch.daemon")


class Controller(HttpFacade):
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.clock = clock
        self.holder_id = settings.controller_id or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = Metrics()
        self.publisher_client = pubsub_v1.PublisherClient()
        self.subscriber = subscriber_client()  # receives 10 MB messages from an emulator too
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
        self.gauges = Gauges(self.metrics, self.store, settings, clock)
        self.reconciler = Reconciler(
            settings,
            Dependencies(
                store=self.store,
                vertex=self.vertex,
                checkpoints=CheckpointProbe(),
                alerts=self.alerts,
                metrics=self.metrics,
                on_transition=[self.gauges.transition],
            ),
            clock=clock,
            fence=self._fence,
            guard=self._check_lease,
            on_deposed=self._deposed,
        )
        self._dead_letter = DeadLetterCopy(
            self.publisher,
            settings.topic_path(settings.dead_letter_topic),
            max_bytes=settings.dead_letter_max_bytes,
        )
        self.degradation = Degradation(self.alerts, settings.degraded_after_failed_passes)
        self.queue = WorkQueue(
            clock=clock, max_keys=settings.queue_max_keys, on_served=self.metrics.queue_waited
        )
        self.sources = Sources(
            self.reconciler,
            self.queue,
            is_leader=self.is_leader,
            health=self.degradation.source("reconcile"),
            gauges=self.gauges,
            on_unreadable=self.metrics.unreadable_hint,
        )
        self.intake = Intake(
            self.store,
            settings,
            self.alerts,
            enqueue=self.sources.enqueue,
            enqueue_created=self.sources.enqueue_created,
            remember=self.reconciler.remember_request,
            clock=clock,
            metrics=self.metrics,
            dead_letter=self._dead_letter,
        )
        self.intake_guard = IntakeGuard(self.intake)
        self._wakeup = threading.Event()  # the loop's wait ends early: a step-down, a stop
        self._stop = threading.Event()
        self.subscriptions = Subscriptions(
            settings,
            self.subscriber,
            {
                "requests": (settings.requests_subscription, self._on_request),
                "events": (settings.events_subscription, self.sources.on_event_message),
            },
            self.alerts,
            self.holder_id,
        )
        self._leading = False
        self._keeper: LeaseKeeper | None = None
        self._step_down_reason: str | None = None  # set from any thread; the loop acts on it
        self._step_down_lock = threading.Lock()
        self._intake_paused = False  # the request stream is closed until the store answers
        self.http: Any = None
        self._last_iteration_at = clock()  # liveness: when the control loop last completed a turn
        self._next_housekeeping = 0.0
        self.heartbeat = Heartbeat(self.store, self.holder_id, settings.lease_renew_seconds)

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
        return self._leading and (self.lease is None or self.lease.is_held())

    def _fence(self) -> int:
        return self.lease.fence if self.lease is not None else 0

    def _check_lease(self, what: str) -> float:
        """Just before a side effect: may this instance still act, and for how many seconds?"""
        if self.lease is None:
            return float("inf")
        if not self._leading or self._step_down_reason is not None:
            raise LeaseNotHeld(f"{self.holder_id} may not {what}: not the leader")
        return self.lease.check(what)

    def _deposed(self, reason: str) -> None:
        """Another controller leads (or may): stop acting now; the loop finishes stepping down.
        Called from any thread (a Pub/Sub callback, the lease keeper, the loop itself)."""
        with self._step_down_lock:
            if self._step_down_reason is not None or not self._leading:
                return
            self._step_down_reason = reason
        if self.lease is not None:
            self.lease.abandon()  # every later check fails at once, on every thread
        self.queue.clear()
        self._wakeup.set()
        log.error("deposed; stepping down", holder=self.holder_id, reason=reason)

    # --- subscriptions ----------------------------------------------------------------------
    def _on_request(self, message) -> None:
        delivery = Delivery(message.message_id, message.delivery_attempt)
        try:
            result = self.intake_guard.accept(message.data, dict(message.attributes), delivery)
        except RetryLater as later:
            # Nothing durable was written: not acking is right. A message that keeps failing is
            # dead-lettered by the guard; only a store in trouble stops the intake, until it
            # answers again, or each delivery would spend one of the subscription's attempts.
            message.nack()
            if later.store_down:
                self.degradation.failed("request intake", [str(later)])
                self._intake_paused = True
                self._wakeup.set()
            return
        if result.status != "accepted":  # an accepted one's line is the intake's "job accepted"
            log.info(
                "request handled",
                job_id=result.job_id,
                attempt=None,
                status=result.status,
                reason=result.reason,
                message_id=message.message_id,
            )
        message.ack()

    @property
    def _streams(self) -> dict[str, Any]:
        return self.subscriptions.streams

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

    def _forget_job(self, job_id: str) -> None:
        self.alerts.forget_job(job_id)
        self.metrics.forget_job(job_id)

    def _pause_or_resume_intake(self) -> None:
        """While the store fails the intake, pull no requests: each delivery that cannot be
        recorded spends one of the few the subscription allows before dead-lettering it."""
        if not self._intake_paused:
            return
        if "requests" in self.subscriptions.streams:
            log.warning("pausing request intake until the state store answers")
            self.subscriptions.close("requests")
        try:
            self.store.get(job_key("intake-probe"))
        except Exception as error:
            log.warning("state store still failing; request intake stays paused", error=repr(error))
            return
        self._intake_paused = False
        self.degradation.succeeded("request intake")
        if self._leading:
            self.subscriptions.open("requests")

    def _release_lease(self) -> None:
        if self.lease is not None and self._leading and self._step_down_reason is None:
            try:
                self.lease.release()
            except Exception as error:
                log.warning("lease release failed", error=str(error))

    # --- the loop ---------------------------------------------------------------------------
    def _try_to_lead(self) -> None:
        """Standing by: take the lease if it is free, raise the store's fence floor, then lead."""
        if self.lease is not None:
            try:
                acquired = self.lease.try_acquire()
                if acquired:
                    # Before acting: refuse all writes of earlier leaders; ours skip that check.
                    self.store.raise_fence(self.lease.fence)
                    self.store.trust_lease(self.lease.fence, self.lease.is_held)
            except Exception as error:
                log.warning("cannot reach the leader lease; standing by", error=repr(error))
                self.degradation.failed("leader lease", [repr(error)])
                if self.lease.is_held():
                    self.lease.abandon()
                return
            self.degradation.succeeded("leader lease")
            self.degradation.succeeded("request intake")  # the store answers again
            if not acquired:
                return
            self._keeper = LeaseKeeper(
                self.lease, self.settings.lease_renew_seconds, on_lost=lambda: self._deposed("lease lost")
            ).start()
        self._step_down_reason = None
        self._leading = True
        log.info("became leader", holder=self.holder_id, fence=self._fence())
        try:
            self.subscriptions.open(*(("events",) if self._intake_paused else ()))
        except Exception as error:
            self._deposed(f"cannot open the subscriptions: {error!r}")
        self.queue.add(PASS_KEY)  # the first pass at once; it requeues itself every period
        self.metrics.set_leader(True)

    def _step_down(self) -> None:
        reason = self._step_down_reason or "lease lost"
        log.error("stepping down; standing by", holder=self.holder_id, reason=reason)
        if self._keeper is not None:
            self._keeper.stop(timeout=1.0)
            self._keeper = None
        if self.lease is not None:
            self.lease.abandon()
        self.queue.clear()
        self.vertex.lane.clear()
        self.sources.forget_index()
        self.subscriptions.close()
        self._leading = False
        self._step_down_reason = None
        self.metrics.set_leader(False)

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
        self.queue.start(self.settings.reconcile_workers, self.sources.serve)
        next_lease_try = 0.0
        try:
            while not self._stop.is_set():
                if self._leading and (self._step_down_reason is not None or not self.is_leader()):
                    self._step_down()
                    next_lease_try = 0.0
                now = self.clock()
                if not self._leading and now >= next_lease_try:
                    self._try_to_lead()
                    next_lease_try = now + (
                        self.settings.lease_renew_seconds if self.lease is not None else 3600.0
                    )
                self._pause_or_resume_intake()
                if self._leading:
                    self._guarded(self.subscriptions.supervise, "stream supervision")
                    self._guarded(self._housekeeping, "housekeeping")
                    self.metrics.queue_state(self.queue.stats())
                    self.queue.wake()  # wake-ups are on `clock`, which may jump (a test's, NTP)
                    self._guarded(lambda: self.heartbeat.beat(self.clock(), fence=self._fence()), "heartbeat")
                self._loop_turn_completed()
                wait = 1.0 if self._leading else max(0.0, min(1.0, next_lease_try - self.clock()))
                self._wakeup.wait(wait)
                self._wakeup.clear()
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
        self._wakeup.set()

    def _shutdown(self) -> None:
        """Within `shutdown_seconds` in all (Cloud Run sends SIGKILL 10 s after SIGTERM): stop
        pulling and drain, but hand the lease over in time whatever the drain does, so that the
        successor takes over at once instead of waiting out the lease."""
        budget = self.settings.shutdown_seconds
        log.info("shutting down: closing subscriptions, releasing the lease", budget_seconds=budget)
        deadline = time.monotonic() + budget
        if self._keeper is not None:
            self._keeper.stop(timeout=min(1.0, budget / 10))
        # Keep the last part of the budget for the lease release (one GCS delete).
        release_reserve = min(3.0, budget / 3)
        drained = self.subscriptions.close(timeout=max(0.0, deadline - release_reserve - time.monotonic()))
        if not drained:
            log.warning("subscriptions not drained in time; releasing the lease first")
        self._release_lease()  # unacked messages are redelivered to the successor: nothing is lost
        self._leading = False
        self.queue.stop()
        if self.http is not None:
            self.http.stop()
        if self.webhook is not None:
            self.webhook.close()
        log.info("controller stopped")
