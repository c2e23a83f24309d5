"""The daemon's HTTP server, driven over real sockets with a fake engine.

Push requests carry real RS256 ID tokens minted by the Pub/Sub stand-in and are checked against
its certs URL; the last test has the stand-in push on its own, with the real envelope format.
"""

from __future__ import annotations

import base64
import json
import threading

import pytest
import requests
from google.cloud import pubsub_v1

from controller.service.http import make_server
from controller.service.intake import IntakeResult
from controller.service.metrics import Metrics
from controller.service.push_auth import PushVerifier
from devstack.pubsub import start_pubsub

PUSHER = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"
# On Cloud Run the push audience is the service URL, independent of the local port.
AUDIENCE = "https://relaunch-controller.example.run.app"
PROJECT = "relaunch-dev"
TIMEOUT = 10


class FakeApp:
    """Our own engine interface, with canned answers and a record of intake calls."""

    def __init__(self):
        self.calls: list[tuple[bytes, dict[str, str]]] = []
        self.received = threading.Event()
        self.result = IntakeResult("accepted", "demo-gpt", "")
        self.intake_error: Exception | None = None
        self.alive = True
        self.ready = (True, "")
        self.jobs = {
            "demo-gpt": {
                "jobId": "demo-gpt",
                "state": "RUNNING",
                "attempts": [{"attempt": 1, "state": "PREEMPTED"}],
            }
        }

    def accept_request(self, data, attributes, delivery=None):
        self.calls.append((data, attributes))
        self.received.set()
        if self.intake_error is not None:
            raise self.intake_error
        return self.result

    def job_document(self, job_id):
        return self.jobs.get(job_id)

    def list_job_documents(self):
        return list(self.jobs.values())

    def is_alive(self):
        return self.alive

    def is_ready(self):
        return self.ready


@pytest.fixture(scope="module")
def pubsub():
    with start_pubsub() as emulator:
        yield emulator


@pytest.fixture
def app():
    return FakeApp()


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def server(pubsub, app, metrics):
    verifier = PushVerifier(AUDIENCE, PUSHER, certs_url=pubsub.certs_url)
    with make_server("127.0.0.1", 0, app, metrics, verifier) as http:
        yield http


def base_url(http) -> str:
    return f"http://127.0.0.1:{http.port}"


def push_url(http) -> str:
    return base_url(http) + "/pubsub/push"


def envelope(data: bytes, attributes: dict[str, str] | None = None) -> dict:
    return {
        "message": {
            "data": base64.b64encode(data).decode(),
            "attributes": attributes or {},
            "messageId": "17",
            "publishTime": "2026-11-21T19:00:00.000Z",
        },
        "subscription": f"projects/{PROJECT}/subscriptions/relaunch-requests-push",
    }


def push(http, body, token: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(push_url(http), data=payload, headers=headers, timeout=TIMEOUT)


# --- probes, metrics, job status ----------------------------------------------------------------


def test_healthz_follows_liveness(server, app):
    ok = requests.get(base_url(server) + "/healthz", timeout=TIMEOUT)
    assert (ok.status_code, ok.text.strip()) == (200, "ok")
    app.alive = False
    assert requests.get(base_url(server) + "/healthz", timeout=TIMEOUT).status_code == 503


def test_readyz_says_why_not(server, app):
    assert requests.get(base_url(server) + "/readyz", timeout=TIMEOUT).status_code == 200
    app.ready = (False, "standby: lease held by controller-b")
    answer = requests.get(base_url(server) + "/readyz", timeout=TIMEOUT)
    assert answer.status_code == 503
    assert "lease held by controller-b" in answer.text


def test_metrics_are_prometheus_text(server, metrics):
    metrics.set_job_states({"RUNNING": 3})
    metrics.failed("user_error")
    answer = requests.get(base_url(server) + "/metrics", timeout=TIMEOUT)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'relaunch_jobs{state="RUNNING"} 3.0' in answer.text
    assert 'relaunch_failures_total{ending="user_error"} 1.0' in answer.text
    assert "relaunch_recovery_seconds_bucket" in answer.text


def test_jobs_list_and_one_job(server):
    listed = requests.get(base_url(server) + "/v1/jobs", timeout=TIMEOUT)
    assert listed.status_code == 200 and listed.headers["Content-Type"] == "application/json"
    assert [job["jobId"] for job in listed.json()] == ["demo-gpt"]
    one = requests.get(base_url(server) + "/v1/jobs/demo-gpt", timeout=TIMEOUT)
    assert one.json()["attempts"][0]["state"] == "PREEMPTED"


def test_unknown_job_is_a_json_404(server):
    answer = requests.get(base_url(server) + "/v1/jobs/nope", timeout=TIMEOUT)
    assert answer.status_code == 404
    assert answer.json()["jobId"] == "nope"


def test_a_failing_handler_answers_500_and_the_server_keeps_serving(server, app):
    app.list_job_documents = lambda: 1 / 0
    assert requests.get(base_url(server) + "/v1/jobs", timeout=TIMEOUT).status_code == 500
    assert requests.get(base_url(server) + "/healthz", timeout=TIMEOUT).status_code == 200


# --- push ---------------------------------------------------------------------------------------


def test_authenticated_push_reaches_intake_and_is_acknowledged(server, app, pubsub):
    data = b'{"jobId": "demo-gpt", "spec": {}}'
    answer = push(server, envelope(data, {"kind": "submit"}), pubsub.mint_token(AUDIENCE, PUSHER))
    assert answer.status_code == 204
    assert app.calls == [(data, {"kind": "submit"})]


@pytest.mark.parametrize("status", ["duplicate", "cancel", "invalid", "conflict"])
def test_recorded_outcomes_are_all_acknowledged(server, app, pubsub, status):
    # invalid/conflict were recorded and dead-lettered; a redelivery would change nothing.
    app.result = IntakeResult(status, "demo-gpt", "why")
    answer = push(server, envelope(b"{}"), pubsub.mint_token(AUDIENCE, PUSHER))
    assert answer.status_code == 204


@pytest.mark.parametrize("kind", ["absent", "expired", "wrong_audience", "forged"])
def test_unauthenticated_push_is_401_and_never_reaches_intake(server, app, pubsub, kind):
    token = {
        "absent": None,
        "expired": pubsub.mint_token(AUDIENCE, PUSHER, expires_in=-120),
        "wrong_audience": pubsub.mint_token("https://elsewhere.example.com/push", PUSHER),
        "forged": pubsub.mint_token(AUDIENCE, PUSHER, forged=True),
    }[kind]
    answer = push(server, envelope(b"{}"), token)
    assert answer.status_code == 401
    assert app.calls == []


def test_push_from_another_service_account_is_403(server, app, pubsub):
    token = pubsub.mint_token(AUDIENCE, "someone@elsewhere.iam.gserviceaccount.com")
    assert push(server, envelope(b"{}"), token).status_code == 403
    assert app.calls == []


def test_intake_failure_is_500_so_pubsub_redelivers(server, app, pubsub):
    app.intake_error = RuntimeError("state store unavailable")
    answer = push(server, envelope(b"{}"), pubsub.mint_token(AUDIENCE, PUSHER))
    assert answer.status_code == 500


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"subscription": "s"}',
        b'{"message": {"data": "***not base64***"}}',
        b'{"message": {"data": "", "attributes": {"n": 1}}}',
    ],
)
def test_malformed_envelope_is_400(server, app, pubsub, body):
    assert push(server, body, pubsub.mint_token(AUDIENCE, PUSHER)).status_code == 400
    assert app.calls == []


def test_push_is_404_when_no_verifier_is_configured(app, metrics, pubsub):
    with make_server("127.0.0.1", 0, app, metrics, None) as http:
        answer = push(http, envelope(b"{}"), pubsub.mint_token(AUDIENCE, PUSHER))
    assert answer.status_code == 404
    assert app.calls == []


def test_pubsub_stand_in_pushes_a_published_request_end_to_end(server, app, pubsub, monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub.host_port)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{PROJECT}/topics/e2e-requests").name
    subscriber.create_subscription(
        request={
            "name": f"projects/{PROJECT}/subscriptions/e2e-requests-push",
            "topic": topic,
            "ack_deadline_seconds": 10,
            "push_config": {
                "push_endpoint": push_url(server),
                "oidc_token": {"service_account_email": PUSHER, "audience": AUDIENCE},
            },
        }
    )
    data = '{"jobId": "demo-gpt", "note": "ünïcode"}'.encode()
    publisher.publish(topic, data, kind="submit", requester="alice").result(timeout=TIMEOUT)

    assert app.received.wait(TIMEOUT), "the stand-in never pushed the request"
    assert app.calls[0] == (data, {"kind": "submit", "requester": "alice"})


def test_a_refused_push_does_not_leak_its_body_into_the_next_request(server, app):
    # Keep-alive: the unread body of a refused push must not be parsed as the next request.
    with requests.Session() as session:
        refused = session.post(push_url(server), json=envelope(b"{}"), timeout=TIMEOUT)
        after = session.get(base_url(server) + "/healthz", timeout=TIMEOUT)
    assert (refused.status_code, after.status_code) == (401, 200)
