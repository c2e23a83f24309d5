"""The broker: topics, subscriptions and the life of every message inside every subscription.

All state sits behind one lock. A single condition variable (`Broker.changed`) is notified
whenever something may have become deliverable (a publish, a nack, an ack that frees flow-control
room or an ordering key, a deleted subscription); waiters also wake at the next lease deadline or
backoff end, so nothing ever polls.

A message in a subscription is `Pending` until acknowledged. Each delivery leases it under a fresh
ack id with a deadline; the lease ends by ack (message gone), by nack or expiry (a failed
delivery: backoff, then redelivery or dead-lettering).
"""

from __future__ import annotations

import datetime
import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf import field_mask_pb2
from google.pubsub_v1 import types as pubsub

from devstack.pubsub import names
from devstack.pubsub.names import PubSubError

MAX_ACK_DEADLINE_SECONDS = 600
DEFAULT_ACK_DEADLINE_SECONDS = 10
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
MAX_MESSAGES_PER_RESPONSE = 1000
# https://cloud.google.com/pubsub/quotas#resource_limits: a publish request (and so a message) is
# at most 10 MB; the service counts 10,000,000 bytes of the serialized request ("The value for
# request_size is too large. You passed N in the request, but the maximum value is 10000000.",
# INVALID_ARGUMENT, as the client libraries' 10,000,000-byte batch cap also assumes).
MAX_PUBLISH_REQUEST_BYTES = 10_000_000
# A Pull or StreamingPull response carries messages up to about this many bytes (always at least
# one message), so that two large messages never make a response no client can read.
MAX_RESPONSE_BYTES = 10_000_000
# Subscription defaults the service fills in (Google's emulator fills the same).
DEFAULT_MESSAGE_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_MIN_BACKOFF_SECONDS = 10
DEFAULT_MAX_BACKOFF_SECONDS = 600
MAX_BACKOFF_SECONDS = 600
MIN_DELIVERY_ATTEMPTS, MAX_DELIVERY_ATTEMPTS = 5, 100
# devstack's own ack ids: "<lease number>-<message id>"; anything else is malformed.
_ACK_ID = re.compile(r"^[0-9]+-[0-9]+$")
# Push delivery without a retry policy backs off exponentially from here (the real service
# starts near 100 ms and caps at 60 s).
PUSH_FIRST_BACKOFF_SECONDS = 0.1
PUSH_MAX_BACKOFF_SECONDS = 60.0


class LeaseHolder:
    """Whoever holds leases and has flow-control limits: one StreamingPull stream, or the push
    sender of one subscription. Zero limits mean unlimited."""

    def __init__(self, max_messages: int = 0, max_bytes: int = 0, ack_deadline_seconds: float = 10):
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.ack_deadline_seconds = ack_deadline_seconds
        self.ack_ids: set[str] = set()
        self.outstanding_bytes = 0
        self.closed = False

    def has_room_for(self, size: int, already_picked: int, picked_bytes: int) -> bool:
        count = len(self.ack_ids) + already_picked
        if self.max_messages and count >= self.max_messages:
            return False
        # A single message bigger than the byte limit still goes out when nothing else is held,
        # or the stream would stall forever.
        if self.max_bytes and count and self.outstanding_bytes + picked_bytes + size > self.max_bytes:
            return False
        return True


@dataclass(eq=False)
class Lease:
    ack_id: str
    deadline: float
    holder: LeaseHolder | None


@dataclass(eq=False)
class Pending:
    seq: int
    message: pubsub.PubsubMessage
    size: int
    attempts: int = 0
    available_at: float = 0.0
    lease: Lease | None = None


@dataclass(eq=False)
class SubscriptionState:
    config: pubsub.Subscription
    backlog: dict[int, Pending] = field(default_factory=dict)  # publish order
    leases: dict[str, Pending] = field(default_factory=dict)  # ack id -> message
    push_holder: LeaseHolder = field(default_factory=lambda: LeaseHolder(max_messages=16))

    @property
    def is_push(self) -> bool:
        return bool(self.config.push_config.push_endpoint)

    @property
    def dead_letter_topic(self) -> str:
        policy = self.config.dead_letter_policy
        return policy.dead_letter_topic if "dead_letter_policy" in self.config else ""


@dataclass
class PushWork:
    """One message leased for push delivery."""

    subscription: pubsub.Subscription
    received: pubsub.ReceivedMessage


def _page(items: list, page_size: int, page_token: str) -> tuple[list, str]:
    start = int(page_token) if page_token else 0
    size = page_size if page_size > 0 else 100
    chunk = items[start : start + size]
    following = start + size
    return chunk, (str(following) if following < len(items) else "")


def _copy(message):
    return type(message).deserialize(type(message).serialize(message))


class Broker:
    def __init__(self, min_ack_deadline_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.min_ack_deadline_seconds = min_ack_deadline_seconds
        self._clock = clock
        self.changed = threading.Condition(threading.Lock())
        self._topics: dict[str, pubsub.Topic] = {}
        self._subscriptions: dict[str, SubscriptionState] = {}
        self._message_ids = itertools.count(1)
        self._ack_ids = itertools.count(1)
        self._seqs = itertools.count(1)

    # ---------------------------------------------------------------- topics

    def create_topic(self, topic: pubsub.Topic) -> pubsub.Topic:
        names.check_topic(topic.name)
        with self.changed:
            if topic.name in self._topics:
                raise names.already_exists(topic.name)
            stored = _copy(topic)
            stored.state = pubsub.Topic.State.ACTIVE
            self._topics[topic.name] = stored
            return _copy(stored)

    def get_topic(self, name: str) -> pubsub.Topic:
        with self.changed:
            return _copy(self._topic(name))

    def update_topic(self, topic: pubsub.Topic, mask: field_mask_pb2.FieldMask) -> pubsub.Topic:
        with self.changed:
            stored = self._topic(topic.name)
            _apply_mask(stored, topic, mask, immutable={"name"})
            return _copy(stored)

    def list_topics(self, project: str, page_size: int, page_token: str) -> tuple[list[pubsub.Topic], str]:
        names.check_project(project)
        with self.changed:
            found = [_copy(t) for n, t in sorted(self._topics.items()) if names.project_of(n) == project]
        return _page(found, page_size, page_token)

    def list_topic_subscriptions(self, topic: str, page_size: int, page_token: str) -> tuple[list[str], str]:
        with self.changed:
            self._topic(topic)
            found = sorted(n for n, s in self._subscriptions.items() if s.config.topic == topic)
        return _page(found, page_size, page_token)

    def delete_topic(self, name: str) -> None:
        with self.changed:
            self._topic(name)
            del self._topics[name]
            for state in self._subscriptions.values():
                if state.config.topic == name:
                    state.config.topic = names.DELETED_TOPIC

    def publish(self, topic: str, messages: list[pubsub.PubsubMessage], request_bytes: int = 0) -> list[str]:
        """`request_bytes`: the serialized PublishRequest's size, checked against the limit."""
        if request_bytes > MAX_PUBLISH_REQUEST_BYTES:
            raise names.invalid(
                f"The value for request_size is too large. You passed {request_bytes} in the request, "
                f"but the maximum value is {MAX_PUBLISH_REQUEST_BYTES}."
            )
        if not messages:
            raise names.invalid("The request contains no messages.")
        for message in messages:
            if not message.data and not message.attributes:
                raise names.invalid("Some messages contain no data and no attributes.")
        with self.changed:
            self._topic(topic)
            ids = [self._publish_locked(topic, message) for message in messages]
            self.changed.notify_all()
            return ids

    def _publish_locked(self, topic: str, message: pubsub.PubsubMessage) -> str:
        stored = _copy(message)
        stored.message_id = str(next(self._message_ids))
        stored.publish_time = datetime.datetime.now(datetime.UTC)
        size = pubsub.PubsubMessage.pb(stored).ByteSize()
        for state in self._subscriptions.values():
            if state.config.topic == topic and not state.config.detached:
                seq = next(self._seqs)
                state.backlog[seq] = Pending(seq=seq, message=stored, size=size)
        return stored.message_id

    def _topic(self, name: str) -> pubsub.Topic:
        names.check_topic(name)
        topic = self._topics.get(name)
        if topic is None:
            raise names.not_found(name)
        return topic

    # ---------------------------------------------------------------- subscriptions

    def create_subscription(self, subscription: pubsub.Subscription) -> pubsub.Subscription:
        names.check_subscription(subscription.name)
        with self.changed:
            if subscription.name in self._subscriptions:
                raise names.already_exists(subscription.name)
            self._topic(subscription.topic)
            stored = _copy(subscription)
            _fill_defaults(stored)
            self._validate_subscription(stored)
            stored.state = pubsub.Subscription.State.ACTIVE
            self._subscriptions[stored.name] = SubscriptionState(config=stored)
            return _copy(stored)

    def _validate_subscription(self, config: pubsub.Subscription) -> None:
        deadline = config.ack_deadline_seconds
        if not self.min_ack_deadline_seconds <= deadline <= MAX_ACK_DEADLINE_SECONDS:
            raise names.invalid(
                f"Invalid ack_deadline_seconds ({deadline}): must be between "
                f"{self.min_ack_deadline_seconds:g} and {MAX_ACK_DEADLINE_SECONDS}."
            )
        if config.filter:
            raise names.invalid("Subscription filters are not emulated by devstack.")
        if "dead_letter_policy" in config and config.dead_letter_policy.dead_letter_topic:
            policy = config.dead_letter_policy
            attempts = policy.max_delivery_attempts
            if not MIN_DELIVERY_ATTEMPTS <= attempts <= MAX_DELIVERY_ATTEMPTS:
                raise names.out_of_range(
                    "max_delivery_attempts", attempts, MIN_DELIVERY_ATTEMPTS, MAX_DELIVERY_ATTEMPTS
                )
            if policy.dead_letter_topic not in self._topics:
                raise PubSubError(grpc.StatusCode.NOT_FOUND, "Dead letter topic not found")
        if "retry_policy" in config:
            for field_name in ("minimum_backoff", "maximum_backoff"):
                seconds = getattr(config.retry_policy, field_name).total_seconds()
                if not 0 <= seconds <= MAX_BACKOFF_SECONDS:
                    raise names.invalid(
                        f"The value for {field_name} is out of bounds. You passed {seconds:g}s in the "
                        f"request, but the value must be between 0s and {MAX_BACKOFF_SECONDS}s."
                    )
            low = config.retry_policy.minimum_backoff.total_seconds()
            high = config.retry_policy.maximum_backoff.total_seconds()
            if high < low:
                raise names.invalid(
                    f"The value for maximum_backoff is too small. You passed {high:g}s in the request, "
                    f"but the minimum value is {low:g}s."
                )
        if config.push_config.push_endpoint and not config.push_config.push_endpoint.startswith(
            ("http://", "https://")
        ):
            raise names.invalid(f"Invalid push endpoint: {config.push_config.push_endpoint}")

    def get_subscription(self, name: str) -> pubsub.Subscription:
        with self.changed:
            return _copy(self._subscription(name).config)

    def update_subscription(
        self, subscription: pubsub.Subscription, mask: field_mask_pb2.FieldMask
    ) -> pubsub.Subscription:
        if not mask.paths:
            raise names.invalid("The update_mask in the UpdateSubscriptionRequest must be set.")
        with self.changed:
            state = self._subscription(subscription.name)
            updated = _copy(state.config)
            _apply_mask(updated, subscription, mask, immutable={"name", "topic"})
            _fill_defaults(updated)
            self._validate_subscription(updated)
            state.config = updated
            self.changed.notify_all()
            return _copy(updated)

    def list_subscriptions(self, project: str, page_size: int, page_token: str) -> tuple[list, str]:
        names.check_project(project)
        with self.changed:
            found = [
                _copy(s.config)
                for n, s in sorted(self._subscriptions.items())
                if names.project_of(n) == project
            ]
        return _page(found, page_size, page_token)

    def delete_subscription(self, name: str) -> None:
        with self.changed:
            self._subscription(name)
            del self._subscriptions[name]
            self.changed.notify_all()

    def detach_subscription(self, name: str) -> None:
        with self.changed:
            state = self._subscription(name)
            state.config.detached = True
            state.backlog.clear()
            state.leases.clear()
            self.changed.notify_all()

    def modify_push_config(self, name: str, push_config: pubsub.PushConfig) -> None:
        with self.changed:
            state = self._subscription(name)
            updated = _copy(state.config)
            updated.push_config = push_config
            self._validate_subscription(updated)
            state.config = updated
            self.changed.notify_all()

    def _subscription(self, name: str) -> SubscriptionState:
        names.check_subscription(name)
        state = self._subscriptions.get(name)
        if state is None:
            raise names.not_found(name)
        return state

    def subscription_state(self, name: str) -> SubscriptionState:
        """The live state object; a stream keeps it to notice deletion or recreation."""
        with self.changed:
            return self._subscription(name)

    # ---------------------------------------------------------------- delivery

    def pull(self, name: str, max_messages: int, wait_seconds: float) -> list[pubsub.ReceivedMessage]:
        if max_messages <= 0:
            raise names.invalid("max_messages must be positive.")
        with self.changed:
            give_up = self._clock() + wait_seconds
            while True:
                state = self._subscription(name)
                now = self._clock()
                self._expire(state, now)
                picked = self._deliverable(state, now, min(max_messages, MAX_MESSAGES_PER_RESPONSE), None)
                if picked:
                    seconds = state.config.ack_deadline_seconds
                    return [self._lease(state, p, now, seconds, None) for p in picked]
                if now >= give_up:
                    return []
                self.changed.wait(self._wait_time(state, now, give_up - now))

    def next_stream_batch(
        self, state: SubscriptionState, holder: LeaseHolder
    ) -> list[pubsub.ReceivedMessage] | None:
        """Block until messages can go out on a stream; None once the stream is closed.
        Raises NOT_FOUND when the subscription is deleted (or replaced) under the stream."""
        with self.changed:
            while True:
                if holder.closed:
                    return None
                if self._subscriptions.get(state.config.name) is not state:
                    raise names.not_found(state.config.name)
                now = self._clock()
                self._expire(state, now)
                picked = self._deliverable(state, now, MAX_MESSAGES_PER_RESPONSE, holder)
                if picked:
                    return [self._lease(state, p, now, holder.ack_deadline_seconds, holder) for p in picked]
                self.changed.wait(self._wait_time(state, now, None))

    def next_push_batch(self, stopped: Callable[[], bool]) -> list[PushWork]:
        """Block until some push subscription has messages to send; [] once stopped."""
        with self.changed:
            while not stopped():
                now = self._clock()
                work: list[PushWork] = []
                wait: float | None = None
                for state in self._subscriptions.values():
                    if not state.is_push:
                        continue
                    self._expire(state, now)
                    picked = self._deliverable(state, now, MAX_MESSAGES_PER_RESPONSE, state.push_holder)
                    seconds = state.config.ack_deadline_seconds
                    for pending in picked:
                        received = self._lease(state, pending, now, seconds, state.push_holder)
                        work.append(PushWork(subscription=_copy(state.config), received=received))
                    state_wait = self._wait_time(state, now, None)
                    if state_wait is not None:
                        wait = state_wait if wait is None else min(wait, state_wait)
                if work:
                    return work
                self.changed.wait(wait)
            return []

    def release_holder(self, holder: LeaseHolder) -> None:
        """A stream ended: wake its waiter. Its leases run out at their deadlines, as on the real
        service."""
        with self.changed:
            holder.closed = True
            self.changed.notify_all()

    def wake_all(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def acknowledge(self, name: str, ack_ids: list[str]) -> None:
        with self.changed:
            state = self._subscription(name)
            self._acknowledge(state, ack_ids)

    def _acknowledge(self, state: SubscriptionState, ack_ids) -> None:
        _check_ack_ids(ack_ids)
        for ack_id in ack_ids:
            # Unknown or expired ack ids are ignored, as without exactly-once delivery.
            pending = state.leases.get(ack_id)
            if pending is not None:
                self._end_lease(state, pending)
                state.backlog.pop(pending.seq, None)
        self.changed.notify_all()

    def modify_ack_deadline(self, name: str, ack_ids: list[str], seconds: int) -> None:
        with self.changed:
            state = self._subscription(name)
            self._modify(state, [(ack_id, seconds) for ack_id in ack_ids])

    def stream_requests(self, state: SubscriptionState, request: pubsub.StreamingPullRequest) -> None:
        """Acks and deadline changes sent on a StreamingPull stream."""
        if len(request.modify_deadline_ack_ids) != len(request.modify_deadline_seconds):
            raise names.invalid("modify_deadline_ack_ids and modify_deadline_seconds differ in length.")
        with self.changed:
            if request.ack_ids:
                self._acknowledge(state, request.ack_ids)
            if request.modify_deadline_ack_ids:
                self._modify(
                    state, list(zip(request.modify_deadline_ack_ids, request.modify_deadline_seconds))
                )

    def _modify(self, state: SubscriptionState, changes: list[tuple[str, int]]) -> None:
        now = self._clock()
        _check_ack_ids([ack_id for ack_id, _seconds in changes])
        for _ack_id, seconds in changes:
            if not 0 <= seconds <= MAX_ACK_DEADLINE_SECONDS:
                raise names.invalid(f"Invalid ack deadline {seconds}: must be between 0 and 600.")
        for ack_id, seconds in changes:
            pending = state.leases.get(ack_id)
            if pending is None:
                continue
            if seconds == 0:
                self._fail_delivery(state, pending, now)
            else:
                pending.lease.deadline = now + seconds
        self.changed.notify_all()

    def push_outcome(self, name: str, ack_id: str, delivered: bool) -> None:
        """Result of one push request: 2xx acknowledges, anything else is a failed delivery."""
        with self.changed:
            state = self._subscriptions.get(name)
            if state is None:
                return
            if delivered:
                self._acknowledge(state, [ack_id])
            else:
                self._modify(state, [(ack_id, 0)])

    # ---------------------------------------------------------------- delivery internals

    def _deliverable(
        self, state: SubscriptionState, now: float, limit: int, holder: LeaseHolder | None
    ) -> list[Pending]:
        if state.config.detached:
            return []
        ordered = state.config.enable_message_ordering
        # With ordering on, a key is blocked while any of its messages is leased or waiting out
        # a backoff: one message per key in flight, strictly in publish order.
        blocked: set[str] = set()
        if ordered:
            blocked = {p.message.ordering_key for p in state.leases.values() if p.message.ordering_key}
        picked: list[Pending] = []
        picked_bytes = 0
        for pending in state.backlog.values():
            if len(picked) >= limit:
                break
            key = pending.message.ordering_key if ordered else ""
            if key and key in blocked:
                continue
            if pending.lease is None and pending.available_at <= now:
                if holder is not None and not holder.has_room_for(pending.size, len(picked), picked_bytes):
                    break
                if picked and picked_bytes + pending.size > MAX_RESPONSE_BYTES:
                    break
                picked.append(pending)
                picked_bytes += pending.size
            if key:
                blocked.add(key)
        return picked

    def _lease(self, state, pending: Pending, now: float, seconds: float, holder: LeaseHolder | None):
        pending.attempts += 1
        ack_id = f"{next(self._ack_ids)}-{pending.message.message_id}"
        pending.lease = Lease(ack_id=ack_id, deadline=now + seconds, holder=holder)
        state.leases[ack_id] = pending
        if holder is not None:
            holder.ack_ids.add(ack_id)
            holder.outstanding_bytes += pending.size
        # delivery_attempt is reported only when a dead-letter policy exists, as on Pub/Sub.
        attempt = pending.attempts if state.dead_letter_topic else 0
        return pubsub.ReceivedMessage(ack_id=ack_id, message=pending.message, delivery_attempt=attempt)

    def _end_lease(self, state: SubscriptionState, pending: Pending) -> None:
        lease = pending.lease
        if lease is None:
            return
        state.leases.pop(lease.ack_id, None)
        if lease.holder is not None and lease.ack_id in lease.holder.ack_ids:
            lease.holder.ack_ids.discard(lease.ack_id)
            lease.holder.outstanding_bytes -= pending.size
        pending.lease = None

    def _expire(self, state: SubscriptionState, now: float) -> None:
        for pending in [p for p in state.leases.values() if p.lease.deadline <= now]:
            self._fail_delivery(state, pending, now)

    def _fail_delivery(self, state: SubscriptionState, pending: Pending, now: float) -> None:
        self._end_lease(state, pending)
        config = state.config
        dead_letter_topic = state.dead_letter_topic
        if (
            dead_letter_topic
            and pending.attempts >= config.dead_letter_policy.max_delivery_attempts
            and dead_letter_topic in self._topics
        ):
            state.backlog.pop(pending.seq, None)
            self._publish_locked(dead_letter_topic, _dead_letter_copy(pending, config.name))
        else:
            pending.available_at = now + _retry_delay(config, pending.attempts)
        self.changed.notify_all()

    def _wait_time(self, state: SubscriptionState, now: float, cap: float | None) -> float | None:
        """Seconds until the next lease deadline or backoff end in this subscription."""
        times = [p.lease.deadline for p in state.leases.values()]
        times += [p.available_at for p in state.backlog.values() if p.lease is None and p.available_at > now]
        wait = max(0.0, min(times) - now) if times else None
        if cap is not None:
            wait = cap if wait is None else min(wait, cap)
        return wait


def _fill_defaults(config: pubsub.Subscription) -> None:
    """What the service sets on a subscription when the request leaves it out."""
    if not config.ack_deadline_seconds:
        config.ack_deadline_seconds = DEFAULT_ACK_DEADLINE_SECONDS
    if "message_retention_duration" not in config:
        config.message_retention_duration = datetime.timedelta(seconds=DEFAULT_MESSAGE_RETENTION_SECONDS)
    if "retry_policy" in config:
        policy = config.retry_policy
        if "minimum_backoff" not in policy:
            policy.minimum_backoff = datetime.timedelta(seconds=DEFAULT_MIN_BACKOFF_SECONDS)
        if "maximum_backoff" not in policy:
            policy.maximum_backoff = datetime.timedelta(seconds=DEFAULT_MAX_BACKOFF_SECONDS)
    if config.dead_letter_policy.dead_letter_topic and not config.dead_letter_policy.max_delivery_attempts:
        config.dead_letter_policy.max_delivery_attempts = DEFAULT_MAX_DELIVERY_ATTEMPTS


def _check_ack_ids(ack_ids) -> None:
    for ack_id in ack_ids:
        if not _ACK_ID.match(ack_id):
            raise names.invalid(f"Invalid ack id (ack_id={ack_id})")


def _retry_delay(config: pubsub.Subscription, attempts: int) -> float:
    """Backoff before redelivering after a failed delivery: the retry policy's exponential
    backoff when one is set; otherwise immediate for pull and a short exponential for push."""
    if "retry_policy" in config:
        policy = config.retry_policy
        low = policy.minimum_backoff.total_seconds() if "minimum_backoff" in policy else 10.0
        high = policy.maximum_backoff.total_seconds() if "maximum_backoff" in policy else 600.0
        return min(high, low * 2 ** max(0, attempts - 1))
    if config.push_config.push_endpoint:
        return min(PUSH_MAX_BACKOFF_SECONDS, PUSH_FIRST_BACKOFF_SECONDS * 2 ** max(0, attempts - 1))
    return 0.0


def _dead_letter_copy(pending: Pending, subscription: str) -> pubsub.PubsubMessage:
    message = _copy(pending.message)
    project = names.project_of(subscription).split("/")[1]
    message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] = str(pending.attempts)
    message.attributes["CloudPubSubDeadLetterSourceSubscription"] = subscription.split("/")[-1]
    message.attributes["CloudPubSubDeadLetterSourceSubscriptionProject"] = project
    # RFC 3339 in UTC with milliseconds and "Z", as Google's emulator writes it.
    published = pending.message.publish_time.astimezone(datetime.UTC)
    message.attributes["CloudPubSubDeadLetterSourceTopicPublishTime"] = (
        published.strftime("%Y-%m-%dT%H:%M:%S.") + f"{published.microsecond // 1000:03d}Z"
    )
    return message


def _apply_mask(stored, update, mask: field_mask_pb2.FieldMask, immutable: set[str]) -> None:
    for path in mask.paths:
        if path.split(".")[0] in immutable:
            raise PubSubError(grpc.StatusCode.INVALID_ARGUMENT, f"Field {path} cannot be updated.")
    try:
        mask.MergeMessage(
            type(update).pb(update),
            type(stored).pb(stored),
            replace_message_field=True,
            replace_repeated_field=True,
        )
    except ValueError as error:
        raise names.invalid(f"Invalid update_mask: {error}") from error
