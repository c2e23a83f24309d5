"""Hostile HTTP input gets 4xx, never 500; the worker pool is bounded; an oversized dead-letter copy
is published cut, pointing at its stored record (issue 12, finding 7)."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
import requests
from google.cloud import pubsub_v1

from controller.adapters.pubsub import TopicPublisher
from controller.readmodel.jobs import status_document
from controller.service.deadletter import DeadLetterCopy
from controller.service.http import make_server
from controller.service.metrics import Metrics
from controller.service.push_auth import PushVerifier
from controller.store.keys import job_key, rejected_key_for_payload
from controller.store.sqlite import SqliteStateStore
from devstack.pubsub import start_pubsub
from tests.support.engine import PROJECT

PUSHER = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"
AUDIENCE = "https://relaunch-controller.example.run.app"
TIMEOUT = 10


class StoreBackedApp:
    """Answers job reads from a real state store, the way the daemon's facade does."""

    def __init__(self, store):
        self.store = store

    def accept_request(self, data, attributes, delivery=None):
        raise AssertionError("no request expected")

    def job_document(self, job_id):
        record = self.store.get(job_key(job_id))
        return status_document(record.document) if record else None

    def list_job_documents(self):
        return []

    def is_alive(self):
        return True

    def is_ready(self):
        return True, "leader"


@pytest.fixture(scope="module")
def pubsub():
    with start_pubsub() as emulator:
        yield emulator


@pytest.fixture
def server(pubsub, tmp_path):
    verifier = PushVerifier(AUDIENCE, PUSHER, certs_url=pubsub.certs_url)
    app = StoreBackedApp(SqliteStateStore(tmp_path / "state.db"))
    with make_server("127.0.0.1", 0, app, Metrics(), verifier) as http:
        yield http


def url(http, path: str) -> str:
    return f"http://127.0.0.1:{http.port}{path}"


@pytest.mark.parametrize("job_id", ["UPPER-case", "a%2F..%2Fb", "..", "x" * 100, "%00", "jobs%2Fx", "-lead"])
def test_a_job_id_no_job_can_have_is_404_not_500(server, job_id):
    answer = requests.get(url(server, f"/v1/jobs/{job_id}"), timeout=TIMEOUT)
    assert answer.status_code == 404
    assert answer.json()["error"]


def test_a_push_envelope_nested_too_deeply_is_400_not_500(server, pubsub):
    body = b'{"message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = requests.post(
        url(server, "/pubsub/push"),
        data=body,
        headers={"Authorization": f"Bearer {pubsub.mint_token(AUDIENCE, PUSHER)}"},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 400
    assert "nested too deeply" in answer.json()["error"]


def wait_for(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)  # polling the server from outside
    raise AssertionError("condition not reached in time")


def http_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("relaunch-http_"))


def test_connections_beyond_the_worker_pool_are_answered_503_and_threads_stay_bounded(tmp_path):
    app = StoreBackedApp(SqliteStateStore(tmp_path / "state.db"))
    with make_server("127.0.0.1", 0, app, Metrics(), None, max_workers=1, keepalive_idle_seconds=60) as http:
        # Two silent clients: one holds the only worker, one the only waiting place.
        holders = [socket.create_connection(("127.0.0.1", http.port)) for _ in range(2)]
        try:
            refused = requests.get(url(http, "/healthz"), timeout=TIMEOUT)
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == "1"
            assert http_threads() <= 1
        finally:
            for holder in holders:
                holder.close()
        wait_for(lambda: requests.get(url(http, "/healthz"), timeout=TIMEOUT).status_code == 200)
        assert http_threads() <= 1


@pytest.fixture
def dead_letter_topic(devstack):
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    tag = uuid.uuid4().hex[:8]
    topic = f"projects/{PROJECT}/topics/dead-{tag}"
    subscription = f"projects/{PROJECT}/subscriptions/dead-{tag}-read"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    return topic, subscription


def pull(subscription: str, want: int) -> list:
    subscriber = pubsub_v1.SubscriberClient()
    found = []
    deadline = time.monotonic() + 30
    while len(found) < want and time.monotonic() < deadline:
        reply = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        if reply.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[m.ack_id for m in reply.received_messages]
            )
        found.extend(m.message for m in reply.received_messages)
    return found


def test_an_oversized_dead_letter_copy_is_cut_and_points_at_the_stored_record(dead_letter_topic):
    topic, subscription = dead_letter_topic
    copy = DeadLetterCopy(TopicPublisher(), topic, max_bytes=64 * 1024)
    big, small = b"{" + b"x" * 200_000, b'{"jobId": 7}'
    copy(big, "request: larger than 1048576 bytes")
    copy(small, "jobId: must be a string")
    messages = {m.attributes["storedRecord"]: m for m in pull(subscription, want=2)}

    cut = messages[rejected_key_for_payload(big)]
    assert cut.data == big[: 64 * 1024]
    assert cut.attributes["truncated"] == "true"
    assert cut.attributes["originalBytes"] == str(len(big))
    assert cut.attributes["reason"] == "request: larger than 1048576 bytes"

    whole = messages[rejected_key_for_payload(small)]
    assert whole.data == small and "truncated" not in whole.attributes
