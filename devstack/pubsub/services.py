"""gRPC handlers for `google.pubsub.v1.Publisher` and `google.pubsub.v1.Subscriber`.

Each handler decodes the proto-plus request, calls the broker, and turns `PubSubError` into the
matching status code. Methods without a handler (snapshots, seek) answer UNIMPLEMENTED.
"""

from __future__ import annotations

import functools
import logging
import threading

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1 import types as pubsub

from devstack.pubsub.broker import Broker, LeaseHolder
from devstack.pubsub.names import PubSubError

_LOG = logging.getLogger(__name__)
# Pull without return_immediately waits this long for a message before answering empty.
PULL_WAIT_SECONDS = 2.0


def _status_from_errors(method):
    @functools.wraps(method)
    def wrapper(request, context: grpc.ServicerContext):
        try:
            return method(request, context)
        except PubSubError as error:
            context.abort(error.code, error.message)

    return wrapper


def _unary(method, request_type, response_serializer):
    return grpc.unary_unary_rpc_method_handler(
        _status_from_errors(method),
        request_deserializer=request_type.deserialize,
        response_serializer=response_serializer,
    )


def _empty(_message) -> bytes:
    return empty_pb2.Empty().SerializeToString()


class PublisherService:
    def __init__(self, broker: Broker):
        self._broker = broker

    def handler(self) -> grpc.GenericRpcHandler:
        s = pubsub
        return grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Publisher",
            {
                "CreateTopic": _unary(self.create_topic, s.Topic, s.Topic.serialize),
                "UpdateTopic": _unary(self.update_topic, s.UpdateTopicRequest, s.Topic.serialize),
                "Publish": _unary(self.publish, s.PublishRequest, s.PublishResponse.serialize),
                "GetTopic": _unary(self.get_topic, s.GetTopicRequest, s.Topic.serialize),
                "ListTopics": _unary(self.list_topics, s.ListTopicsRequest, s.ListTopicsResponse.serialize),
                "ListTopicSubscriptions": _unary(
                    self.list_topic_subscriptions,
                    s.ListTopicSubscriptionsRequest,
                    s.ListTopicSubscriptionsResponse.serialize,
                ),
                "DeleteTopic": _unary(self.delete_topic, s.DeleteTopicRequest, _empty),
                "DetachSubscription": _unary(
                    self.detach_subscription,
                    s.DetachSubscriptionRequest,
                    s.DetachSubscriptionResponse.serialize,
                ),
            },
        )

    def create_topic(self, request: pubsub.Topic, context):
        return self._broker.create_topic(request)

    def update_topic(self, request: pubsub.UpdateTopicRequest, context):
        return self._broker.update_topic(request.topic, pubsub.UpdateTopicRequest.pb(request).update_mask)

    def publish(self, request: pubsub.PublishRequest, context):
        size = pubsub.PublishRequest.pb(request).ByteSize()
        ids = self._broker.publish(request.topic, list(request.messages), request_bytes=size)
        return pubsub.PublishResponse(message_ids=ids)

    def get_topic(self, request: pubsub.GetTopicRequest, context):
        return self._broker.get_topic(request.topic)

    def list_topics(self, request: pubsub.ListTopicsRequest, context):
        topics, token = self._broker.list_topics(request.project, request.page_size, request.page_token)
        return pubsub.ListTopicsResponse(topics=topics, next_page_token=token)

    def list_topic_subscriptions(self, request: pubsub.ListTopicSubscriptionsRequest, context):
        found, token = self._broker.list_topic_subscriptions(
            request.topic, request.page_size, request.page_token
        )
        return pubsub.ListTopicSubscriptionsResponse(subscriptions=found, next_page_token=token)

    def delete_topic(self, request: pubsub.DeleteTopicRequest, context):
        self._broker.delete_topic(request.topic)

    def detach_subscription(self, request: pubsub.DetachSubscriptionRequest, context):
        self._broker.detach_subscription(request.subscription)
        return pubsub.DetachSubscriptionResponse()


class SubscriberService:
    def __init__(self, broker: Broker):
        self._broker = broker
        self._streams: set[LeaseHolder] = set()
        self._streams_lock = threading.Lock()

    def handler(self) -> grpc.GenericRpcHandler:
        s = pubsub
        return grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Subscriber",
            {
                "CreateSubscription": _unary(
                    self.create_subscription, s.Subscription, s.Subscription.serialize
                ),
                "GetSubscription": _unary(
                    self.get_subscription, s.GetSubscriptionRequest, s.Subscription.serialize
                ),
                "UpdateSubscription": _unary(
                    self.update_subscription, s.UpdateSubscriptionRequest, s.Subscription.serialize
                ),
                "ListSubscriptions": _unary(
                    self.list_subscriptions, s.ListSubscriptionsRequest, s.ListSubscriptionsResponse.serialize
                ),
                "DeleteSubscription": _unary(self.delete_subscription, s.DeleteSubscriptionRequest, _empty),
                "ModifyAckDeadline": _unary(self.modify_ack_deadline, s.ModifyAckDeadlineRequest, _empty),
                "Acknowledge": _unary(self.acknowledge, s.AcknowledgeRequest, _empty),
                "Pull": _unary(self.pull, s.PullRequest, s.PullResponse.serialize),
                "ModifyPushConfig": _unary(self.modify_push_config, s.ModifyPushConfigRequest, _empty),
                "StreamingPull": grpc.stream_stream_rpc_method_handler(
                    self.streaming_pull,
                    request_deserializer=s.StreamingPullRequest.deserialize,
                    response_serializer=s.StreamingPullResponse.serialize,
                ),
            },
        )

    def create_subscription(self, request: pubsub.Subscription, context):
        return self._broker.create_subscription(request)

    def get_subscription(self, request: pubsub.GetSubscriptionRequest, context):
        return self._broker.get_subscription(request.subscription)

    def update_subscription(self, request: pubsub.UpdateSubscriptionRequest, context):
        mask = pubsub.UpdateSubscriptionRequest.pb(request).update_mask
        return self._broker.update_subscription(request.subscription, mask)

    def list_subscriptions(self, request: pubsub.ListSubscriptionsRequest, context):
        found, token = self._broker.list_subscriptions(request.project, request.page_size, request.page_token)
        return pubsub.ListSubscriptionsResponse(subscriptions=found, next_page_token=token)

    def delete_subscription(self, request: pubsub.DeleteSubscriptionRequest, context):
        self._broker.delete_subscription(request.subscription)

    def modify_ack_deadline(self, request: pubsub.ModifyAckDeadlineRequest, context):
        self._broker.modify_ack_deadline(
            request.subscription, list(request.ack_ids), request.ack_deadline_seconds
        )

    def acknowledge(self, request: pubsub.AcknowledgeRequest, context):
        self._broker.acknowledge(request.subscription, list(request.ack_ids))

    def modify_push_config(self, request: pubsub.ModifyPushConfigRequest, context):
        self._broker.modify_push_config(request.subscription, request.push_config)

    def pull(self, request: pubsub.PullRequest, context):
        wait = 0.0 if request.return_immediately else PULL_WAIT_SECONDS
        remaining = context.time_remaining()
        if remaining is not None:
            wait = max(0.0, min(wait, remaining - 0.5))
        received = self._broker.pull(request.subscription, request.max_messages, wait)
        return pubsub.PullResponse(received_messages=received)

    # ------------------------------------------------------------ StreamingPull

    def streaming_pull(self, requests, context: grpc.ServicerContext):
        """Responses carry messages as they become deliverable; a reader thread applies the
        client's acks, nacks, deadline extensions and keep-alives meanwhile."""
        try:
            first = next(requests)
        except StopIteration:
            return
        try:
            state, holder = self._open_stream(first)
        except PubSubError as error:
            context.abort(error.code, error.message)
        with self._streams_lock:
            self._streams.add(holder)
        context.add_callback(lambda: self._broker.release_holder(holder))
        reader = threading.Thread(
            target=self._read_stream,
            args=(requests, state, holder, context),
            name="pubsub-stream-reader",
            daemon=True,
        )
        reader.start()
        properties = pubsub.StreamingPullResponse.SubscriptionProperties(
            exactly_once_delivery_enabled=state.config.enable_exactly_once_delivery,
            message_ordering_enabled=state.config.enable_message_ordering,
        )
        try:
            while True:
                try:
                    batch = self._broker.next_stream_batch(state, holder)
                except PubSubError as error:
                    context.abort(error.code, error.message)
                if batch is None:
                    return
                yield pubsub.StreamingPullResponse(
                    received_messages=batch, subscription_properties=properties
                )
        finally:
            self._broker.release_holder(holder)
            with self._streams_lock:
                self._streams.discard(holder)

    def _open_stream(self, first: pubsub.StreamingPullRequest):
        if not first.subscription:
            raise PubSubError(grpc.StatusCode.INVALID_ARGUMENT, "The first request must name a subscription.")
        if not 0 < first.stream_ack_deadline_seconds <= 600:
            raise PubSubError(
                grpc.StatusCode.INVALID_ARGUMENT, "stream_ack_deadline_seconds must be between 1 and 600."
            )
        state = self._broker.subscription_state(first.subscription)
        holder = LeaseHolder(
            max_messages=first.max_outstanding_messages,
            max_bytes=first.max_outstanding_bytes,
            ack_deadline_seconds=first.stream_ack_deadline_seconds,
        )
        self._broker.stream_requests(state, first)
        return state, holder

    def _read_stream(self, requests, state, holder: LeaseHolder, context) -> None:
        try:
            for request in requests:
                if request.stream_ack_deadline_seconds:
                    holder.ack_deadline_seconds = request.stream_ack_deadline_seconds
                self._broker.stream_requests(state, request)
        except PubSubError as error:
            _LOG.debug("bad request on stream: %s", error.message)
            context.cancel()
        except Exception:  # the stream broke (client gone, server stopping)
            _LOG.debug("stream reader ended", exc_info=True)
        finally:
            self._broker.release_holder(holder)

    def close_streams(self) -> None:
        with self._streams_lock:
            holders = list(self._streams)
        for holder in holders:
            self._broker.release_holder(holder)
