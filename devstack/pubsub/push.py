"""Push delivery: POSTs the Pub/Sub push envelope to each push subscription's endpoint.

A dispatcher thread waits on the broker for leased messages and hands each to a small pool of
sender threads. The ack deadline doubles as the HTTP timeout, as on the real service; a 2xx
reply (102, 200, 201, 202, 204) acknowledges, anything else or no reply is a failed delivery.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from google.pubsub_v1 import types as pubsub

from devstack.pubsub.broker import Broker, PushWork
from devstack.pubsub.oidc import TokenSigner

_LOG = logging.getLogger(__name__)
ACK_STATUSES = {102, 200, 201, 202, 204}


def _rfc3339(timestamp) -> str:
    return timestamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def push_envelope(subscription: pubsub.Subscription, received: pubsub.ReceivedMessage) -> dict:
    """The JSON body Pub/Sub POSTs for one message (both camelCase and snake_case ids, as the
    real service sends them)."""
    message = received.message
    body = {
        "data": base64.b64encode(message.data).decode("ascii"),
        "attributes": dict(message.attributes),
        "messageId": message.message_id,
        "message_id": message.message_id,
        "publishTime": _rfc3339(message.publish_time),
        "publish_time": _rfc3339(message.publish_time),
    }
    if message.ordering_key:
        body["orderingKey"] = message.ordering_key
    envelope = {"message": body, "subscription": subscription.name}
    if received.delivery_attempt:
        envelope["deliveryAttempt"] = received.delivery_attempt
    return envelope


class PushSender:
    def __init__(self, broker: Broker, signer: TokenSigner, workers: int = 32):
        self._broker = broker
        self._signer = signer
        self._stopped = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pubsub-push")
        self._thread = threading.Thread(target=self._dispatch, name="pubsub-push-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._broker.wake_all()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _dispatch(self) -> None:
        while not self._stopped.is_set():
            for work in self._broker.next_push_batch(self._stopped.is_set):
                self._pool.submit(self._send, work)

    def _send(self, work: PushWork) -> None:
        config = work.subscription
        push = config.push_config
        headers = {"Content-Type": "application/json", "User-Agent": "APIs-Google; (devstack pubsub push)"}
        if "oidc_token" in push and push.oidc_token.service_account_email:
            audience = push.oidc_token.audience or push.push_endpoint
            token = self._signer.mint(audience, push.oidc_token.service_account_email)
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps(push_envelope(config, work.received)).encode()
        request = urllib.request.Request(push.push_endpoint, data=body, headers=headers, method="POST")
        delivered = False
        try:
            with urllib.request.urlopen(request, timeout=config.ack_deadline_seconds) as response:
                delivered = response.status in ACK_STATUSES
        except urllib.error.HTTPError as error:
            delivered = error.code in ACK_STATUSES
            error.close()
        except OSError as error:  # refused, reset, timed out
            _LOG.debug("push to %s failed: %s", push.push_endpoint, error)
        self._broker.push_outcome(config.name, work.received.ack_id, delivered)
