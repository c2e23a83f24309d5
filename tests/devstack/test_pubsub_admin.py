"""Pub/Sub stand-in: topic and subscription administration, publish and synchronous pull,
driven through the real google-cloud-pubsub clients."""

from __future__ import annotations

import time
import uuid

import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2

PROJECT = "relaunch-dev"


def unique(kind: str) -> str:
    return f"projects/{PROJECT}/{kind}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def topic(publisher) -> str:
    return publisher.create_topic(name=unique("topics")).name


def test_topic_lifecycle_answers_like_the_real_service(publisher):
    name = unique("topics")
    created = publisher.create_topic(request={"name": name, "labels": {"team": "ml"}})
    assert created.name == name
    assert publisher.get_topic(topic=name).labels["team"] == "ml"
    assert name in {t.name for t in publisher.list_topics(project=f"projects/{PROJECT}")}

    with pytest.raises(exceptions.AlreadyExists):
        publisher.create_topic(name=name)

    publisher.delete_topic(topic=name)
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=name)
    with pytest.raises(exceptions.NotFound):
        publisher.delete_topic(topic=name)
    with pytest.raises(exceptions.NotFound):
        publisher.publish(name, b"lost").result(timeout=10)
    with pytest.raises(exceptions.InvalidArgument):
        publisher.create_topic(name=f"projects/{PROJECT}/topics/x")


def test_subscription_lifecycle_answers_like_the_real_service(publisher, subscriber, topic):
    with pytest.raises(exceptions.NotFound):
        subscriber.create_subscription(name=unique("subscriptions"), topic=unique("topics"))

    name = unique("subscriptions")
    created = subscriber.create_subscription(name=name, topic=topic)
    assert created.ack_deadline_seconds == 10  # the service default
    with pytest.raises(exceptions.AlreadyExists):
        subscriber.create_subscription(name=name, topic=topic)

    assert name in {s.name for s in subscriber.list_subscriptions(project=f"projects/{PROJECT}")}
    assert list(publisher.list_topic_subscriptions(topic=topic)) == [name]

    updated = subscriber.update_subscription(
        subscription={"name": name, "ack_deadline_seconds": 30},
        update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
    )
    assert updated.ack_deadline_seconds == 30
    assert subscriber.get_subscription(subscription=name).ack_deadline_seconds == 30
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.update_subscription(
            subscription={"name": name, "ack_deadline_seconds": 601},
            update_mask=field_mask_pb2.FieldMask(paths=["ack_deadline_seconds"]),
        )

    # A subscription outlives its topic, as on Pub/Sub.
    publisher.delete_topic(topic=topic)
    assert subscriber.get_subscription(subscription=name).topic == "_deleted-topic_"

    subscriber.delete_subscription(subscription=name)
    with pytest.raises(exceptions.NotFound):
        subscriber.get_subscription(subscription=name)
    with pytest.raises(exceptions.NotFound):
        subscriber.delete_subscription(subscription=name)


def test_published_messages_are_pulled_with_attributes_ids_and_publish_time(publisher, subscriber, topic):
    subscription = subscriber.create_subscription(name=unique("subscriptions"), topic=topic).name
    sent = {
        publisher.publish(topic, f"payload-{i}".encode(), job="demo", index=str(i)).result(timeout=10): i
        for i in range(3)
    }

    received = subscriber.pull(subscription=subscription, max_messages=10, timeout=10).received_messages
    assert {r.message.message_id for r in received} == set(sent)
    for item in received:
        index = sent[item.message.message_id]
        assert item.message.data == f"payload-{index}".encode()
        assert dict(item.message.attributes) == {"job": "demo", "index": str(index)}
        assert abs(item.message.publish_time.timestamp() - time.time()) < 60
        assert item.delivery_attempt == 0  # no dead-letter policy: not reported

    subscriber.acknowledge(subscription=subscription, ack_ids=[r.ack_id for r in received])
    assert not subscriber.pull(subscription=subscription, max_messages=10, timeout=1.5).received_messages


def test_only_messages_published_after_the_subscription_exist_are_delivered(publisher, subscriber, topic):
    publisher.publish(topic, b"before").result(timeout=10)
    subscription = subscriber.create_subscription(name=unique("subscriptions"), topic=topic).name
    publisher.publish(topic, b"after").result(timeout=10)

    received = subscriber.pull(subscription=subscription, max_messages=10, timeout=10).received_messages
    assert [r.message.data for r in received] == [b"after"]


def test_unacked_message_is_redelivered_after_the_ack_deadline(publisher, subscriber, topic):
    subscription = subscriber.create_subscription(
        name=unique("subscriptions"), topic=topic, ack_deadline_seconds=1
    ).name
    message_id = publisher.publish(topic, b"work").result(timeout=10)

    first = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages
    leased_at = time.monotonic()
    assert [r.message.message_id for r in first] == [message_id]

    again = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages
    assert [r.message.message_id for r in again] == [message_id]
    assert time.monotonic() - leased_at >= 0.9  # not before the deadline ran out
    assert again[0].ack_id != first[0].ack_id


def test_extended_deadline_keeps_a_message_leased_and_zero_deadline_releases_it(publisher, subscriber, topic):
    subscription = subscriber.create_subscription(
        name=unique("subscriptions"), topic=topic, ack_deadline_seconds=1
    ).name
    message_id = publisher.publish(topic, b"long job").result(timeout=10)
    (leased,) = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages

    subscriber.modify_ack_deadline(subscription=subscription, ack_ids=[leased.ack_id], ack_deadline_seconds=6)
    # The pull waits about 2 s, well past the original 1 s deadline: nothing comes back.
    assert not subscriber.pull(subscription=subscription, max_messages=1, timeout=3).received_messages

    subscriber.modify_ack_deadline(subscription=subscription, ack_ids=[leased.ack_id], ack_deadline_seconds=0)
    (again,) = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages
    assert again.message.message_id == message_id


def test_out_of_range_ack_deadlines_are_rejected(subscriber, topic):
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.create_subscription(name=unique("subscriptions"), topic=topic, ack_deadline_seconds=601)
    subscription = subscriber.create_subscription(name=unique("subscriptions"), topic=topic).name
    with pytest.raises(exceptions.InvalidArgument):
        subscriber.modify_ack_deadline(subscription=subscription, ack_ids=["1-1"], ack_deadline_seconds=601)


def test_retry_policy_minimum_backoff_delays_redelivery_after_a_nack(publisher, subscriber, topic):
    subscription = subscriber.create_subscription(
        request={
            "name": unique("subscriptions"),
            "topic": topic,
            "retry_policy": {"minimum_backoff": {"seconds": 2}, "maximum_backoff": {"seconds": 10}},
        }
    ).name
    message_id = publisher.publish(topic, b"backoff").result(timeout=10)
    (leased,) = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages
    subscriber.modify_ack_deadline(subscription=subscription, ack_ids=[leased.ack_id], ack_deadline_seconds=0)
    nacked_at = time.monotonic()

    (again,) = subscriber.pull(subscription=subscription, max_messages=1, timeout=10).received_messages
    assert again.message.message_id == message_id
    assert time.monotonic() - nacked_at >= 1.9


def test_streaming_pull_of_a_missing_subscription_fails_with_not_found(subscriber):
    future = subscriber.subscribe(unique("subscriptions"), lambda message: message.ack())
    with pytest.raises(exceptions.NotFound):
        future.result(timeout=20)
