"""Ops alerts as users see them: JSON on the alerts topic (read back with the real subscriber
client), the structured log line, and the optional webhook.

Every kind is provoked through devstack with the real engine; nothing Google is mocked.
"""

from __future__ import annotations

import io
import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import structlog
from google.cloud import pubsub_v1

from controller import logs
from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.lease import LeaseNotHeld
from controller.adapters.pubsub import TopicPublisher
from controller.adapters.vertex import VertexBackend
from controller.adapters.webhook import WebhookSink
from controller.jobrecord import JobRecord
from controller.service.alerts import AlertSink, rfc3339
from controller.service.reconciler import Dependencies, Deposed
from controller.settings import Settings
from controller.store.keys import job_key
from controller.store.sqlite import SqliteStateStore
from tests.support.engine import (
    PROJECT,
    REGION,
    LocalController,
    accept,
    drive,
    read_alerts,
    request,
    terminal,
)

FAST = {"backoff": {"initialSeconds": 0.1, "maxSeconds": 0.2}}
SCHEMA_KEYS = {"kind", "severity", "jobId", "attempt", "summary", "details", "time", "state"}


def only(alerts: list[dict], kind: str) -> list[dict]:
    return [a for a in alerts if a["kind"] == kind]


def wait_for(condition, timeout: float = 30.0, step=lambda: None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if condition():
            return
        threading.Event().wait(0.05)  # poll interval, not synchronisation: the condition decides
    raise AssertionError("condition not reached in time")


def cancel_and_finish(engine, job_id):
    engine.cancel(job_id)
    drive(engine, job_id, terminal)


@pytest.fixture
def engine_for(devstack, tmp_path, alerts_topic):
    """An engine whose alert sink takes its cooldown from Settings (as the daemon builds it)."""

    def build(**overrides) -> LocalController:
        values = {
            "vertex_endpoint": devstack.vertex.host_port,
            "project": PROJECT,
            "region": REGION,
            "reconcile_seconds": 1,
            "submit_retry_seconds": 0.5,
            "error_recheck_seconds": 0.5,
            "capacity_retry_seconds": 0.5,
            **overrides,
        }
        settings = Settings(**values)
        alerts = AlertSink(
            TopicPublisher(), alerts_topic[0], cooldown_seconds=settings.alert_cooldown_seconds
        )
        deps = Dependencies(
            store=SqliteStateStore(tmp_path / "state.db"),
            vertex=VertexBackend(settings, retry_attempts=2, retry_max_wait=0.2),
            checkpoints=CheckpointProbe(),
            alerts=alerts,
        )
        return LocalController(settings, deps, rng=random.Random(1))

    return build


# --- each kind, provoked through devstack ------------------------------------------------------


def test_user_error_with_no_failure_budget_raises_job_failed(bucket, engine_for, alerts_topic):
    engine = engine_for()
    accept(
        engine,
        request(
            "al-fail", bucket, args=["--fail-with", "1", "--fail-at", "1"], policy={"maxFailures": 0, **FAST}
        ),
        {},
    )
    doc = drive(engine, "al-fail", terminal)
    assert doc["phase"] == "failed"

    (alert,) = only(read_alerts(alerts_topic[1]), "job_failed")
    assert set(alert) == SCHEMA_KEYS
    assert alert["severity"] == "ERROR" and alert["state"] == "firing"
    assert alert["jobId"] == "al-fail" and alert["attempt"] == 1
    assert "failure budget exhausted" in alert["summary"]
    assert alert["details"]["failures"] == 1 and alert["time"].endswith("Z")


def test_infrastructure_failures_without_progress_raise_crash_loop(bucket, engine_for, alerts_topic):
    engine = engine_for()
    # Exit 69 is the trainer's rendezvous timeout: infrastructure, and no checkpoint ever lands.
    accept(
        engine,
        request(
            "al-loop",
            bucket,
            args=["--fail-with", "69", "--fail-at", "1"],
            # A backoff longer than Vertex's delay before a failed job's error (devstack: 1 s) plus
            # a recheck (0.5 s): each ending is decided from the state at once and corrected before
            # the next attempt is due. With FAST's 0.1 s, on a fast machine attempts 3 and 4 could
            # start, end and be corrected (a third failure) before attempt 2's correction came.
            policy={
                "maxFailures": 10,
                "crashLoopAttempts": 2,
                "backoff": {"initialSeconds": 2.5, "maxSeconds": 2.5},
            },
        ),
        {},
    )
    doc = drive(engine, "al-loop", terminal)
    # The first two are infrastructure, counted as failures, and the second's correction fails the
    # job; an attempt 3, should one have started under load, has not ended by then.
    endings = [a["ending"] for a in doc["attempts"] if a["ending"]]
    assert endings[:2] == ["infrastructure", "infrastructure"]
    assert doc["failures"] == 2 and len(doc["attempts"]) <= 3

    (alert,) = only(read_alerts(alerts_topic[1]), "crash_loop")
    assert alert["severity"] == "ERROR" and alert["jobId"] == "al-loop" and alert["attempt"] == 2
    assert "without checkpoint progress" in alert["summary"]


def test_capacity_wait_fires_while_queued_and_resolves_when_the_attempt_runs(
    devstack, bucket, engine_for, alerts_topic
):
    engine = engine_for(capacity_wait_alert_seconds=0.3)
    devstack.vertex.set_stockout(queue_seconds=120)
    try:
        accept(engine, request("al-cap", bucket, args=["--steps", "400"], policy=FAST), {})
        drive(engine, "al-cap", lambda d: engine.alerts.is_firing("capacity_wait", "al-cap"))
        (fired,) = only(read_alerts(alerts_topic[1]), "capacity_wait")
        assert fired["state"] == "firing" and fired["severity"] == "WARNING"
        assert fired["jobId"] == "al-cap" and fired["attempt"] == 1
        assert fired["details"]["waitedSeconds"] >= 0.3

        devstack.vertex.set_stockout()  # capacity returns
        drive(engine, "al-cap", lambda d: d["phase"] == "running")
        (resolved,) = only(read_alerts(alerts_topic[1]), "capacity_wait")
        assert resolved["state"] == "resolved" and resolved["jobId"] == "al-cap"
        assert resolved["attempt"] == 1 and "running" in resolved["summary"]
    finally:
        devstack.vertex.set_stockout()
    cancel_and_finish(engine, "al-cap")
    # The job ending does not resolve a second time: it was resolved already.
    assert only(read_alerts(alerts_topic[1], want=1, timeout=2), "capacity_wait") == []


def test_a_resolution_decided_before_a_crash_is_published_by_the_next_leader(
    devstack, bucket, engine_for, alerts_topic
):
    """The write that clears `capacity_wait` is stored, then the controller stops before the
    publish (here: its lease check fails at that very point). The resolution travels in the
    job's outbox with that write, so the next leader publishes it, once."""
    leader = engine_for(capacity_wait_alert_seconds=0.3)
    devstack.vertex.set_stockout(queue_seconds=120)
    try:
        accept(leader, request("al-lost", bucket, args=["--steps", "400"], policy=FAST), {})
        drive(leader, "al-lost", lambda d: leader.alerts.is_firing("capacity_wait", "al-lost"))
        (fired,) = only(read_alerts(alerts_topic[1]), "capacity_wait")
        assert fired["state"] == "firing"

        def stops_before_the_resolution(what: str) -> float:
            if what == "resolve an alert":
                raise LeaseNotHeld("the controller stopped here")
            return float("inf")

        leader.guard = stops_before_the_resolution
        devstack.vertex.set_stockout()  # capacity returns: the attempt runs
        with pytest.raises(Deposed):
            drive(leader, "al-lost", lambda d: False, timeout=60)
    finally:
        devstack.vertex.set_stockout()
    stored = JobRecord.from_dict(leader.store.get(job_key("al-lost")).document).state
    assert stored.phase.value == "running" and stored.firing == ()  # the clearing write is stored
    assert only(read_alerts(alerts_topic[1], want=1, timeout=2), "capacity_wait") == []  # not sent

    successor = engine_for(capacity_wait_alert_seconds=0.3)  # knows only the store
    successor.fence = lambda: 7
    successor.run_pass()
    (resolved,) = only(read_alerts(alerts_topic[1], timeout=20), "capacity_wait")
    assert resolved["state"] == "resolved" and resolved["jobId"] == "al-lost"
    assert resolved["attempt"] == 1 and "running" in resolved["summary"]
    successor.run_pass()
    assert only(read_alerts(alerts_topic[1], want=1, timeout=2), "capacity_wait") == []  # once
    cancel_and_finish(successor, "al-lost")


def test_two_preemptions_within_the_window_raise_preemption_storm(devstack, bucket, engine_for, alerts_topic):
    engine = engine_for(preemption_storm_count=2)
    accept(
        engine, request("al-storm", bucket, args=["--steps", "4000"], policy={"maxFailures": 0, **FAST}), {}
    )
    for attempt in (1, 2):
        doc = drive(
            engine,
            "al-storm",
            lambda d: d["attempt"] == attempt and d["phase"] == "running",  # a reclaim hits running VMs
        )
        assert devstack.vertex.preempt(doc["attempts"][-1]["vertexJob"], grace_seconds=1)
    drive(engine, "al-storm", lambda d: d["preemptions"] == 2)

    (alert,) = only(read_alerts(alerts_topic[1]), "preemption_storm")
    assert alert["severity"] == "WARNING" and alert["jobId"] == "al-storm"
    assert alert["details"]["recentPreemptions"] == 2
    cancel_and_finish(engine, "al-storm")


def test_invalid_and_conflicting_requests_raise_request_rejected(bucket, engine_for, alerts_topic):
    engine = engine_for()
    assert accept(engine, b"{not json", {}).status == "invalid"
    assert accept(engine, request("al-rej", bucket, args=["--steps", "3"]), {}).status == "accepted"
    assert accept(engine, request("al-rej", bucket, args=["--steps", "4"]), {}).status == "conflict"

    alerts = only(read_alerts(alerts_topic[1], want=2), "request_rejected")
    by_status = {a["details"]["status"]: a for a in alerts}
    assert set(by_status) == {"invalid", "conflict"}
    assert all(a["severity"] == "WARNING" and a["state"] == "firing" for a in alerts)
    assert by_status["invalid"]["jobId"] is None
    assert by_status["conflict"]["jobId"] == "al-rej"
    assert "different request body" in by_status["conflict"]["summary"]


class GatedVertexPort:
    """A local port that refuses connections until `open()`, then forwards to devstack's Vertex.

    A bound socket that is not listening answers connects with a reset, exactly like a closed
    port, and keeps the port ours so nothing else can take it in between."""

    def __init__(self, upstream: str):
        self._upstream = upstream.rsplit(":", 1)
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"

    def open(self) -> None:
        self._listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection((self._upstream[0], int(self._upstream[1])))
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_persistent_vertex_errors_raise_controller_degraded_and_recovery_resolves_it(
    devstack, engine_for, alerts_topic
):
    port = GatedVertexPort(devstack.vertex.host_port)
    try:
        engine = engine_for(
            vertex_endpoint=port.address, degraded_after_failed_passes=2, alert_cooldown_seconds=600
        )
        failures = []

        def one_pass():
            try:
                engine.run_pass()
            except Exception as error:  # what the daemon's guard does: log and try again
                failures.append(error)

        one_pass()
        assert failures and not engine.alerts.is_firing("controller_degraded")  # one pass is noise
        wait_for(lambda: engine.alerts.is_firing("controller_degraded"), step=one_pass)
        (fired,) = only(read_alerts(alerts_topic[1]), "controller_degraded")
        assert fired["state"] == "firing" and fired["severity"] == "ERROR" and fired["jobId"] is None
        assert fired["details"]["failedPasses"] == 2 and "listing Vertex jobs" in fired["summary"]

        port.open()  # Vertex is reachable again; the channel reconnects on its own
        wait_for(lambda: not engine.alerts.is_firing("controller_degraded"), step=one_pass)
        alerts = only(read_alerts(alerts_topic[1]), "controller_degraded")
        # Passes that kept failing meanwhile stayed inside the cooldown: one resolved, no re-page.
        assert [a["state"] for a in alerts] == ["resolved"]
        assert alerts[0]["details"]["failedPassesBefore"] >= 2
    finally:
        port.close()


# --- the sink itself: cooldown, resolve, log line ----------------------------------------------


def pull_with_attributes(subscription: str, want: int) -> list[tuple[dict, dict]]:
    subscriber = pubsub_v1.SubscriberClient()
    found: list[tuple[dict, dict]] = []
    deadline = time.monotonic() + 20
    while len(found) < want and time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
        for received in response.received_messages:
            found.append((json.loads(received.message.data), dict(received.message.attributes)))
        if response.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
    return found


def test_identical_firings_within_the_cooldown_publish_once(alerts_topic):
    now = [1_000_000.0]
    sink = AlertSink(TopicPublisher(), alerts_topic[0], cooldown_seconds=60, clock=lambda: now[0])

    assert sink.raise_alert("job_failed", "ERROR", "first", job_id="dd-1", attempt=3) is not None
    now[0] += 30
    assert sink.raise_alert("job_failed", "ERROR", "again", job_id="dd-1", attempt=3) is None
    assert sink.resolve("capacity_wait", "dd-1", "never fired") is None
    now[0] += 31  # past the cooldown: a new incident pages again
    assert sink.raise_alert("job_failed", "ERROR", "later", job_id="dd-1", attempt=4) is not None

    messages = pull_with_attributes(alerts_topic[1], want=2)
    assert [m["summary"] for m, _ in messages] == ["first", "later"]
    assert [m["time"] for m, _ in messages] == [rfc3339(1_000_000.0), rfc3339(1_000_061.0)]
    assert messages[0][1] == {"kind": "job_failed", "severity": "ERROR", "jobId": "dd-1", "state": "firing"}


def test_alert_log_line_is_one_structured_line_cloud_monitoring_can_match(alerts_topic):
    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    try:
        sink = AlertSink(None, None, cooldown_seconds=0)
        sink.raise_alert("preemption_storm", "WARNING", "storm", job_id="log-1", attempt=2)
        sink.resolve("preemption_storm", "log-1", "calm again")
    finally:
        structlog.reset_defaults()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    firing, resolved = [line for line in lines if "alert_kind" in line]
    assert firing["severity"] == "WARNING" and firing["alert_kind"] == "preemption_storm"
    assert firing["alert_state"] == "firing" and firing["job_id"] == "log-1"
    assert firing["alert"]["summary"] == "storm"
    assert resolved["severity"] == "INFO" and resolved["alert_state"] == "resolved"
    assert resolved["alert"]["severity"] == "WARNING" and resolved["alert"]["attempt"] == 2


# --- webhook -------------------------------------------------------------------------------------


class ChatServer:
    """A local Slack-like webhook: answers each POST with the next scripted status."""

    def __init__(self, statuses: list[int], hold: threading.Event | None = None):
        self.bodies: list[dict] = []
        self.posts = 0
        self.delivered = threading.Event()
        self.first_arrived = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.posts += 1
                server.first_arrived.set()
                if hold is not None:
                    hold.wait(10)
                status = statuses.pop(0) if statuses else 200
                if status == 200:
                    server.bodies.append(body)
                    server.delivered.set()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_webhook_retries_a_5xx_and_posts_slack_text():
    chat = ChatServer([500])
    webhook = WebhookSink(chat.url, timeout_seconds=2, backoff_initial=0.01, backoff_max=0.05)
    try:
        sink = AlertSink(None, None, on_alert=webhook.send)
        sink.raise_alert("job_failed", "ERROR", "job wh-1 failed: budget exhausted", job_id="wh-1", attempt=3)
        assert chat.delivered.wait(10)
        assert chat.bodies == [
            {"text": "[ERROR] job_failed: job wh-1 attempt 3: job wh-1 failed: budget exhausted"}
        ]
        assert chat.posts == 2  # the 500 was retried, once
        wait_for(lambda: webhook.delivered == 1, timeout=10)
        assert webhook.failed == 0
    finally:
        webhook.close()
        chat.stop()


def test_webhook_never_blocks_and_drops_what_does_not_fit_the_queue():
    hold = threading.Event()
    chat = ChatServer([], hold=hold)
    webhook = WebhookSink(chat.url, timeout_seconds=5, queue_size=1)
    try:
        webhook.send({"kind": "a", "severity": "WARNING", "jobId": "q", "summary": "in flight"})
        assert chat.first_arrived.wait(10)  # the worker is now stuck in a slow POST
        started = time.monotonic()
        webhook.send({"kind": "b", "severity": "WARNING", "jobId": "q", "summary": "queued"})
        webhook.send({"kind": "c", "severity": "WARNING", "jobId": "q", "summary": "dropped"})
        assert time.monotonic() - started < 0.5 and webhook.dropped == 1
        hold.set()
        wait_for(lambda: len(chat.bodies) == 2, timeout=10)
        assert [b["text"].split(": ")[-1] for b in chat.bodies] == ["in flight", "queued"]
    finally:
        hold.set()
        webhook.close()
        chat.stop()
