"""Pub/Sub stand-in: push subscriptions (envelope, OIDC token, retries) and the test tokens the
emulator mints, checked with google-auth's real verifier."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.auth import exceptions as auth_exceptions
from google.auth.transport import requests as auth_requests
from google.oauth2 import id_token

from devstack.pubsub.testing import wait_until

PROJECT = "relaunch-dev"
PUSH_ACCOUNT = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"
AUDIENCE = "https://controller.relaunch.example/pubsub"


class PushEndpoint:
    """A local HTTP endpoint that records each push request and answers with the next status
    from `statuses` (the last one repeats)."""

    def __init__(self, statuses: list[int]):
        self.requests: list[dict] = []
        self._statuses = list(statuses)
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with endpoint._lock:
                    endpoint.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
                    )
                    status = (
                        endpoint._statuses.pop(0) if len(endpoint._statuses) > 1 else endpoint._statuses[0]
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/push/events"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def endpoint_factory():
    made: list[PushEndpoint] = []

    def make(statuses: list[int]) -> PushEndpoint:
        made.append(PushEndpoint(statuses))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


def unique(kind: str) -> str:
    return f"projects/{PROJECT}/{kind}/p-{uuid.uuid4().hex[:12]}"


def verify(token: str, backend, audience: str = AUDIENCE) -> dict:
    """Check a push token with google-auth's verifier against devstack's published keys."""
    return id_token.verify_token(
        token, auth_requests.Request(), audience=audience, certs_url=backend.devstack.certs_url
    )


# Google's emulator accepts `oidc_token` in a push config but sends no Authorization header (it
# was seen to POST with only Content-Type and User-Agent), and has no keys to verify one with.
OIDC_DEVSTACK_ONLY = pytest.mark.pubsub_devstack_only(
    "Google's emulator sends no OIDC token (no Authorization header) on push"
)


def push_subscription(subscriber, topic: str, endpoint: PushEndpoint, **fields) -> str:
    push_config = {"push_endpoint": endpoint.url, **fields.pop("push", {})}
    return subscriber.create_subscription(
        request={"name": unique("subscriptions"), "topic": topic, "push_config": push_config, **fields}
    ).name


def test_push_posts_the_documented_envelope(publisher, subscriber, endpoint_factory):
    endpoint = endpoint_factory([204])
    topic = publisher.create_topic(name=unique("topics")).name
    subscription = push_subscription(subscriber, topic, endpoint)
    message_id = publisher.publish(topic, b'{"jobId": "demo"}', event="submit").result(timeout=10)

    wait_until(lambda: endpoint.requests, what="the push request")
    request = endpoint.requests[0]
    assert request["path"] == "/push/events"
    assert "Authorization" not in request["headers"]  # no oidc_token configured
    envelope = request["body"]
    assert envelope["subscription"] == subscription
    assert "deliveryAttempt" not in envelope  # no dead-letter policy
    message = envelope["message"]
    assert base64.b64decode(message["data"]) == b'{"jobId": "demo"}'
    assert message["attributes"] == {"event": "submit"}
    assert message["messageId"] == message["message_id"] == message_id
    assert message["publishTime"] == message["publish_time"]
    assert message["publishTime"].endswith("Z")


@OIDC_DEVSTACK_ONLY
def test_push_carries_a_token_that_verifies(pubsub_backend, publisher, subscriber, endpoint_factory):
    endpoint = endpoint_factory([204])
    topic = publisher.create_topic(name=unique("topics")).name
    push_subscription(
        subscriber,
        topic,
        endpoint,
        push={"oidc_token": {"service_account_email": PUSH_ACCOUNT, "audience": AUDIENCE}},
    )
    publisher.publish(topic, b'{"jobId": "demo"}').result(timeout=10)

    wait_until(lambda: endpoint.requests, what="the push request")
    scheme, token = endpoint.requests[0]["headers"]["Authorization"].split(" ", 1)
    assert scheme == "Bearer"
    claims = verify(token, pubsub_backend)
    assert claims["iss"] == "https://accounts.google.com"
    assert claims["email"] == PUSH_ACCOUNT
    assert claims["email_verified"] is True
    assert claims["aud"] == AUDIENCE
    assert 3500 <= claims["exp"] - claims["iat"] <= 3600


@OIDC_DEVSTACK_ONLY
def test_push_token_audience_defaults_to_the_endpoint(
    pubsub_backend, publisher, subscriber, endpoint_factory
):
    endpoint = endpoint_factory([200])
    topic = publisher.create_topic(name=unique("topics")).name
    push_subscription(
        subscriber, topic, endpoint, push={"oidc_token": {"service_account_email": PUSH_ACCOUNT}}
    )
    publisher.publish(topic, b"ping").result(timeout=10)
    wait_until(lambda: endpoint.requests, what="the push request")
    token = endpoint.requests[0]["headers"]["Authorization"].removeprefix("Bearer ")
    assert verify(token, pubsub_backend, audience=endpoint.url)["aud"] == endpoint.url


def test_push_failures_are_redelivered_until_a_2xx(publisher, subscriber, endpoint_factory):
    endpoint = endpoint_factory([500, 503, 204])
    topic = publisher.create_topic(name=unique("topics")).name
    push_subscription(subscriber, topic, endpoint, ack_deadline_seconds=2)
    message_id = publisher.publish(topic, b"retry").result(timeout=10)

    wait_until(lambda: len(endpoint.requests) >= 3, timeout=30, what="three push attempts")
    assert [r["body"]["message"]["messageId"] for r in endpoint.requests[:3]] == [message_id] * 3
    # The 204 acknowledged it: no fourth attempt during a window longer than the next backoff
    # would have been.
    with pytest.raises(AssertionError):
        wait_until(lambda: len(endpoint.requests) > 3, timeout=1.5, what="a fourth push attempt")
    assert len(endpoint.requests) == 3


@pytest.mark.pubsub_devstack_only(
    "Google's emulator leaves deliveryAttempt out of push envelopes even with a dead-letter policy"
)
def test_push_envelope_counts_delivery_attempts_under_a_dead_letter_policy(
    publisher, subscriber, endpoint_factory
):
    """https://cloud.google.com/pubsub/docs/push: with a dead-letter policy the envelope carries
    deliveryAttempt."""
    endpoint = endpoint_factory([500, 503, 204])
    topic = publisher.create_topic(name=unique("topics")).name
    dead_letter_topic = publisher.create_topic(name=unique("topics")).name
    push_subscription(
        subscriber,
        topic,
        endpoint,
        ack_deadline_seconds=2,
        dead_letter_policy={"dead_letter_topic": dead_letter_topic, "max_delivery_attempts": 5},
    )
    publisher.publish(topic, b"retry").result(timeout=10)
    wait_until(lambda: len(endpoint.requests) >= 3, what="three push attempts")
    assert [r["body"]["deliveryAttempt"] for r in endpoint.requests[:3]] == [1, 2, 3]


@pytest.mark.pubsub_devstack_only("token minting is a devstack test aid; Google's emulator has none")
def test_minted_tokens_verify_only_when_valid(pubsub_backend):
    emulator = pubsub_backend.devstack
    valid = emulator.mint_token(AUDIENCE, PUSH_ACCOUNT)
    assert verify(valid, pubsub_backend)["email"] == PUSH_ACCOUNT

    expired = emulator.mint_token(AUDIENCE, PUSH_ACCOUNT, issued_at=time.time() - 7200)
    wrong_audience = emulator.mint_token("https://someone-else.example", PUSH_ACCOUNT)
    forged = emulator.mint_token(AUDIENCE, PUSH_ACCOUNT, forged=True)
    for bad in (expired, wrong_audience, forged):
        with pytest.raises((ValueError, auth_exceptions.GoogleAuthError)):
            verify(bad, pubsub_backend)
