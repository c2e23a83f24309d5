"""Messages near Pub/Sub's 10 MB limit (https://cloud.google.com/pubsub/quotas#resource_limits:
publish request 10 MB, message data 10 MB): accepted, delivered whole, and a request above the
limit refused with INVALID_ARGUMENT rather than left to time out."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
from google.api_core import exceptions
from google.pubsub_v1 import types as pubsub

from devstack.pubsub.clients import subscriber_client
from devstack.pubsub.testing import wait_until

PROJECT = "relaunch-dev"
# 9.5 MB: above gRPC's default 4 MiB message limit, below Pub/Sub's 10,000,000-byte request limit
# with room for the request's own framing.
NEAR_LIMIT = 9_500_000


def unique(kind: str) -> str:
    return f"projects/{PROJECT}/{kind}/l-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def large_subscriber(pubsub_backend):
    """The stock SubscriberClient cannot receive > 4 MiB from an emulator (see
    devstack.pubsub.clients); this one has the production client's limits."""
    client = subscriber_client()
    yield client
    client.close()


@pytest.fixture
def topic_and_subscription(publisher, large_subscriber) -> tuple[str, str]:
    subscriber = large_subscriber
    topic = publisher.create_topic(name=unique("topics")).name
    subscription = subscriber.create_subscription(name=unique("subscriptions"), topic=topic).name
    yield topic, subscription
    subscriber.delete_subscription(subscription=subscription)
    publisher.delete_topic(topic=topic)


def test_a_9_5_mb_message_is_published_and_streamed_to_a_subscriber_whole(
    publisher, large_subscriber, topic_and_subscription
):
    topic, subscription = topic_and_subscription
    data = os.urandom(NEAR_LIMIT)
    message_id = publisher.publish(topic, data, kind="checkpoint-manifest").result(timeout=60)

    received = []

    def on_message(message):
        received.append((message.message_id, hashlib.sha256(message.data).hexdigest(), message.attributes))
        message.ack()

    stream = large_subscriber.subscribe(subscription, on_message)
    try:
        wait_until(lambda: received, timeout=60, what="the 9.5 MB message")
    finally:
        stream.cancel()
        stream.result(timeout=20)
    ((got_id, digest, attributes),) = received
    assert got_id == message_id
    assert digest == hashlib.sha256(data).hexdigest()
    assert dict(attributes) == {"kind": "checkpoint-manifest"}


def test_four_9_5_mb_messages_are_all_delivered_by_synchronous_pull(
    publisher, large_subscriber, topic_and_subscription
):
    """Together 38 MB, more than one response may carry (devstack's gRPC send limit is 32 MiB):
    the service must spread them over responses, never fail the pull."""
    topic, subscription = topic_and_subscription
    subscriber = large_subscriber
    payloads = {publisher.publish(topic, os.urandom(NEAR_LIMIT)).result(timeout=60) for _ in range(4)}

    seen: set[str] = set()

    def pull_some() -> bool:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=60)
        seen.update(r.message.message_id for r in response.received_messages)
        if response.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
        return seen >= payloads

    wait_until(pull_some, timeout=60, what="all four large messages")
    assert seen == payloads


@pytest.mark.pubsub_devstack_only(
    "Google's emulator does not enforce the 10 MB limit: it stores requests up to its 11,000,000-byte "
    "gRPC frame limit and never answers larger ones (the call hangs until its deadline)"
)
def test_a_publish_request_over_10_mb_is_refused_with_invalid_argument(
    raw_publisher, publisher, topic_and_subscription
):
    topic, _ = topic_and_subscription
    # The raw RPC: PublisherClient.publish() itself refuses a batch above 10,000,000 bytes before
    # sending, so only this path shows what the service answers.
    for messages in (
        [pubsub.PubsubMessage(data=b"x" * 10_000_001)],
        [pubsub.PubsubMessage(data=b"x" * 6_000_000), pubsub.PubsubMessage(data=b"y" * 6_000_000)],
    ):
        with pytest.raises(exceptions.InvalidArgument, match="10000000"):
            raw_publisher.publish(topic=topic, messages=messages, timeout=60)
    # Refused, not broken: the topic still takes a normal message.
    assert publisher.publish(topic, b"small").result(timeout=10)
