"""Pub/Sub stand-in: StreamingPull as `SubscriberClient.subscribe()` drives it (acks, nacks,
lease extension, flow control, dead-lettering, ordering keys)."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections import defaultdict

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.pubsub_v1 import types as pubsub

from devstack.pubsub.testing import wait_until

PROJECT = "relaunch-dev"


@pytest.fixture
def streams():
    """Starts `subscribe()` streams and cancels them all when the test ends."""
    started = []

    def start(client, subscription, callback, **flow_control):
        future = client.subscribe(
            subscription, callback, flow_control=pubsub_v1.types.FlowControl(**flow_control)
        )
        started.append(future)
        return future

    yield start
    for future in started:
        future.cancel()
        future.result(timeout=20)


def unique(kind: str) -> str:
    return f"projects/{PROJECT}/{kind}/s-{uuid.uuid4().hex[:12]}"


def new_topic(publisher) -> str:
    return publisher.create_topic(name=unique("topics")).name


def new_subscription(subscriber, topic: str, **fields) -> str:
    return subscriber.create_subscription(
        request={"name": unique("subscriptions"), "topic": topic, **fields}
    ).name


def test_subscribe_delivers_every_message_and_acked_ones_never_come_back(publisher, subscriber, streams):
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic, ack_deadline_seconds=1)
    deliveries: list[pubsub_v1.subscriber.message.Message] = []
    lock = threading.Lock()

    def on_message(message):
        with lock:
            deliveries.append(message)
        message.ack()

    future = streams(subscriber, subscription, on_message)
    sent = {publisher.publish(topic, f"m{i}".encode(), n=str(i)).result(timeout=10) for i in range(20)}
    wait_until(lambda: {m.message_id for m in deliveries} >= sent, what="all 20 messages")
    future.cancel()
    future.result(timeout=20)  # the client flushes its pending acks on shutdown

    assert sorted(m.message_id for m in deliveries) == sorted(sent)  # each exactly once
    assert all(m.delivery_attempt is None for m in deliveries)  # no dead-letter policy
    assert {m.data for m in deliveries} == {f"m{i}".encode() for i in range(20)}
    # Nack every ack id we saw: any message whose ack did not land would now come straight back.
    subscriber.modify_ack_deadline(
        subscription=subscription, ack_ids=[m.ack_id for m in deliveries], ack_deadline_seconds=0
    )
    assert not subscriber.pull(subscription=subscription, max_messages=10, timeout=1.5).received_messages


def test_stream_stays_open_and_delivers_messages_published_later(publisher, subscriber, streams):
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic)
    received: list[bytes] = []

    def on_message(message):
        received.append(message.data)
        message.ack()

    streams(subscriber, subscription, on_message)
    for round_number in range(3):
        publisher.publish(topic, f"round-{round_number}".encode()).result(timeout=10)
        wait_until(lambda: len(received) == round_number + 1, what=f"round {round_number}")
    assert received == [b"round-0", b"round-1", b"round-2"]


def test_nacked_message_is_redelivered_at_once(publisher, subscriber, streams):
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic)
    deliveries: list[tuple[str, float]] = []

    def on_message(message):
        deliveries.append((message.message_id, time.monotonic()))
        if len(deliveries) == 1:
            message.nack()
        else:
            message.ack()

    streams(subscriber, subscription, on_message)
    message_id = publisher.publish(topic, b"retry me").result(timeout=10)
    wait_until(lambda: len(deliveries) >= 2, what="the redelivery")
    assert [d[0] for d in deliveries] == [message_id, message_id]
    # Far sooner than any ack deadline the client would have set (10 s at least).
    assert deliveries[1][1] - deliveries[0][1] < 5


def test_lease_extension_keeps_a_held_message_from_redelivery(publisher, subscriber, streams):
    topic = new_topic(publisher)
    # A 1 s subscription deadline: only the client's lease extensions keep the message leased.
    subscription = new_subscription(subscriber, topic, ack_deadline_seconds=1)
    deliveries: list[str] = []
    done = threading.Event()

    def on_message(message):
        deliveries.append(message.message_id)
        threading.Event().wait(3)  # simulated work, three ack deadlines long
        message.ack()
        done.set()

    streams(subscriber, subscription, on_message)
    message_id = publisher.publish(topic, b"slow work").result(timeout=10)
    assert done.wait(20)
    assert deliveries == [message_id]


def test_flow_control_never_has_more_than_max_messages_in_callbacks(publisher, subscriber, streams):
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic)
    in_callback = 0
    most_in_callback = 0
    handled: list[str] = []
    lock = threading.Lock()

    def on_message(message):
        nonlocal in_callback, most_in_callback
        with lock:
            in_callback += 1
            most_in_callback = max(most_in_callback, in_callback)
        threading.Event().wait(0.2)  # simulated work
        with lock:
            in_callback -= 1
            handled.append(message.message_id)
        message.ack()

    sent = {publisher.publish(topic, f"w{i}".encode()).result(timeout=10) for i in range(8)}
    streams(subscriber, subscription, on_message, max_messages=2)
    wait_until(lambda: set(handled) == sent, timeout=20, what="all 8 messages handled")
    assert most_in_callback == 2


@pytest.mark.pubsub_devstack_only(
    "Google's emulator does not apply a stream's max_outstanding_messages on the server: the idle "
    "stream was seen not to get the later messages (the busy stream's client held them)"
)
def test_a_busy_subscriber_at_its_flow_control_limit_gets_no_more_messages(publisher, subscriber, streams):
    """Server-side flow control: messages go to the stream that has room, not the one that is
    full (which would hoard them client-side)."""
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic)
    busy_got: list[str] = []
    release_busy = threading.Event()
    idle_got: list[str] = []

    def busy(message):
        busy_got.append(message.message_id)
        release_busy.wait(30)
        message.ack()

    def idle(message):
        idle_got.append(message.message_id)
        message.ack()

    streams(subscriber, subscription, busy, max_messages=1)
    publisher.publish(topic, b"first").result(timeout=10)
    wait_until(lambda: busy_got, what="the busy subscriber's message")

    other_client = pubsub_v1.SubscriberClient()
    try:
        streams(other_client, subscription, idle)
        later = {publisher.publish(topic, f"later-{i}".encode()).result(timeout=10) for i in range(5)}
        wait_until(lambda: set(idle_got) == later, what="the idle subscriber to get all later messages")
        assert len(busy_got) == 1
    finally:
        release_busy.set()


def test_dead_letter_after_max_delivery_attempts_with_attempts_visible(publisher, subscriber, streams):
    topic = new_topic(publisher)
    dead_letter_topic = new_topic(publisher)
    dead_letters = new_subscription(subscriber, dead_letter_topic)
    subscription = new_subscription(
        subscriber,
        topic,
        dead_letter_policy={"dead_letter_topic": dead_letter_topic, "max_delivery_attempts": 5},
    )
    attempts: list[int] = []
    dead: list[pubsub_v1.subscriber.message.Message] = []

    first_publish_time: list[datetime.datetime] = []

    def always_fail(message):
        attempts.append(message.delivery_attempt)
        first_publish_time.append(message.publish_time)
        message.nack()

    def collect_dead(message):
        dead.append(message)
        message.ack()

    streams(subscriber, subscription, always_fail)
    streams(subscriber, dead_letters, collect_dead)
    publisher.publish(topic, b"poison", kind="bad").result(timeout=10)

    wait_until(lambda: dead, what="the dead-lettered message")
    assert attempts == [1, 2, 3, 4, 5]
    (letter,) = dead
    assert letter.data == b"poison"
    assert letter.attributes["kind"] == "bad"
    assert letter.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert letter.attributes["CloudPubSubDeadLetterSourceSubscription"] == subscription.split("/")[-1]
    assert letter.attributes["CloudPubSubDeadLetterSourceSubscriptionProject"] == PROJECT
    source_published = datetime.datetime.fromisoformat(
        letter.attributes["CloudPubSubDeadLetterSourceTopicPublishTime"]
    )
    assert letter.attributes["CloudPubSubDeadLetterSourceTopicPublishTime"].endswith("Z")
    assert abs(source_published - first_publish_time[0]) < datetime.timedelta(milliseconds=1)


def ordered_subscription(subscriber) -> tuple[pubsub_v1.PublisherClient, str, str]:
    ordered_publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    topic = new_topic(ordered_publisher)
    subscription = new_subscription(subscriber, topic, enable_message_ordering=True)
    return ordered_publisher, topic, subscription


def publish_ordered(ordered_publisher, topic: str, keys: tuple[str, ...], count: int) -> None:
    futures = []
    for index in range(count):
        for key in keys:
            futures.append(ordered_publisher.publish(topic, str(index).encode(), ordering_key=key))
    for future in futures:
        future.result(timeout=10)


def test_ordering_keys_are_delivered_in_publish_order(subscriber, streams):
    ordered_publisher, topic, subscription = ordered_subscription(subscriber)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def on_message(message):
        with lock:
            seen[message.ordering_key].append(int(message.data))
        message.ack()

    streams(subscriber, subscription, on_message)
    publish_ordered(ordered_publisher, topic, ("job-a", "job-b"), 10)
    wait_until(lambda: len(seen["job-a"]) == 10 and len(seen["job-b"]) == 10, what="all ordered messages")
    assert seen == {"job-a": list(range(10)), "job-b": list(range(10))}
    assert pubsub.Subscription.pb(
        subscriber.get_subscription(subscription=subscription)
    ).enable_message_ordering


@pytest.mark.pubsub_devstack_only(
    "Google's emulator redelivers a nacked ordered message after the later ones of its key "
    "(seen: 0..9 then 3); the service documents redelivery in order, with the messages after it"
)
def test_ordering_keys_keep_publish_order_across_a_nack(subscriber, streams):
    ordered_publisher, topic, subscription = ordered_subscription(subscriber)
    seen: dict[str, list[int]] = defaultdict(list)
    nacked_once = threading.Event()
    lock = threading.Lock()

    def on_message(message):
        key, index = message.ordering_key, int(message.data)
        with lock:
            seen[key].append(index)
        if key == "job-a" and index == 3 and not nacked_once.is_set():
            nacked_once.set()
            message.nack()
        else:
            message.ack()

    streams(subscriber, subscription, on_message)
    publish_ordered(ordered_publisher, topic, ("job-a", "job-b"), 10)
    wait_until(lambda: len(seen["job-a"]) == 11 and len(seen["job-b"]) == 10, what="all ordered messages")
    assert seen["job-b"] == list(range(10))
    assert seen["job-a"] == [0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9]  # the nacked one again, then the rest


def test_deleting_the_subscription_ends_an_open_stream_with_not_found(publisher, subscriber):
    topic = new_topic(publisher)
    subscription = new_subscription(subscriber, topic)
    received: list[str] = []

    def on_message(message):
        received.append(message.message_id)
        message.ack()

    future = subscriber.subscribe(subscription, on_message)
    publisher.publish(topic, b"hello").result(timeout=10)
    wait_until(lambda: received, what="the stream to be delivering")

    subscriber.delete_subscription(subscription=subscription)
    with pytest.raises(exceptions.NotFound):
        future.result(timeout=20)
