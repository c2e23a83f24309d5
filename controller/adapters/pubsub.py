"""Pub/Sub plumbing for the controller: clients, topic set-up, and the log-entry decoder.

The real `google-cloud-pubsub` clients are used as they are; with `PUBSUB_EMULATOR_HOST` set they
talk to devstack instead of Google.
"""

from __future__ import annotations

import json
import os

import grpc
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
from google.pubsub_v1.types import DeadLetterPolicy, RetryPolicy
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from controller import logs
from controller.request.nesting import nests_too_deeply
from controller.settings import Settings

log = logs.get("relaunch.pubsub")


_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Aborted,
    TimeoutError,
)


class TopicPublisher:
    """Publishes and waits for the server's acknowledgement, with a deadline per try and a few
    tries for transient errors (the message is the same each time, so a retry is harmless to
    consumers that deduplicate, as the controller does)."""

    def __init__(
        self, client: pubsub_v1.PublisherClient | None = None, timeout: float = 30.0, attempts: int = 3
    ):
        self.client = client or pubsub_v1.PublisherClient()
        self.timeout = timeout
        self._retrying = Retrying(
            retry=retry_if_exception_type(_TRANSIENT),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential_jitter(initial=0.5, max=5),
            reraise=True,
        )

    def publish(self, topic: str, data: bytes, **attributes: str) -> str:
        attrs = {k: str(v) for k, v in attributes.items()}
        for attempt in self._retrying.copy():
            with attempt:
                # The client's own retry is bounded by the same deadline, so an unreachable
                # Pub/Sub fails in `timeout` instead of the library's ten-minute default.
                future = self.client.publish(
                    topic, data, retry=Retry(timeout=self.timeout), timeout=self.timeout, **attrs
                )
                return future.result(timeout=self.timeout + 5)
        raise AssertionError("unreachable")  # pragma: no cover


# No client-side size limit, as the library sets on its channel to Google (the server enforces
# Pub/Sub's own: 10 MB a message, https://cloud.google.com/pubsub/quotas#resource_limits).
_UNBOUNDED_MESSAGES = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def subscriber_client() -> pubsub_v1.SubscriberClient:
    """The SubscriberClient the controller pulls with, able to receive any message Pub/Sub takes.

    Against Google the stock client already is. With PUBSUB_EMULATOR_HOST set, google-cloud-pubsub
    opens a plain insecure channel that keeps gRPC's default 4 MiB receive limit, so a larger
    message (Pub/Sub takes up to 10 MB) would fail the stream at every redelivery and hold back
    every message behind it. Here the emulator's channel gets the same unbounded sizes.
    """
    emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not emulator:
        return pubsub_v1.SubscriberClient()
    channel = grpc.insecure_channel(emulator, options=_UNBOUNDED_MESSAGES)
    return pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))


REQUEST_DELIVERY_ATTEMPTS = 100
EVENT_DELIVERY_ATTEMPTS = 5


def publish_request(settings: Settings, data: bytes) -> str:
    """Publish one job or cancel request to the requests topic; the server's message id.

    The one publish path of users' requests: the CLI, the demo and benchmarks all come here."""
    publisher = TopicPublisher(timeout=settings.rpc_timeout_seconds)
    try:
        return publisher.publish(settings.topic_path(settings.requests_topic), data)
    finally:
        publisher.client.stop()


def ensure_topology(
    settings: Settings, publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient
) -> None:
    """Create the topics and subscriptions the controller uses, if they are missing.

    Production creates them with deploy/ (Terraform-free gcloud script); this is for devstack and
    first runs. The requests subscription dead-letters a message that keeps failing.
    """
    for name in (
        settings.requests_topic,
        settings.events_topic,
        settings.alerts_topic,
        settings.dead_letter_topic,
    ):
        try:
            publisher.create_topic(name=settings.topic_path(name))
        except gexc.AlreadyExists:
            pass
    # Both controller subscriptions dead-letter: a request or a log entry that keeps failing is
    # set aside after 5 deliveries instead of being redelivered for ever.
    # Dead-letter budgets (deliveries before a message is set aside). The intake acks every
    # request it can record, invalid ones included, so a request's deliveries fail only when the
    # controller holding it dies or is paused, and with up to `max_outstanding_messages` in flight
    # one crash costs every one of them a delivery: requests get Pub/Sub's maximum, 100. A log
    # entry is only a hint (the reconcile pass is the safety net): 5 is plenty.
    subscriptions = [
        (settings.requests_subscription, settings.requests_topic, REQUEST_DELIVERY_ATTEMPTS),
        (settings.events_subscription, settings.events_topic, EVENT_DELIVERY_ATTEMPTS),
        (settings.dead_letter_topic + "-inspect", settings.dead_letter_topic, 0),
    ]
    for sub_name, topic_name, dead_letter_after in subscriptions:
        request = {
            "name": settings.subscription_path(sub_name),
            "topic": settings.topic_path(topic_name),
            "ack_deadline_seconds": 60,
            "retry_policy": RetryPolicy(
                minimum_backoff=duration_pb2.Duration(seconds=1),
                maximum_backoff=duration_pb2.Duration(seconds=60),
            ),
        }
        if dead_letter_after:
            request["dead_letter_policy"] = DeadLetterPolicy(
                dead_letter_topic=settings.topic_path(settings.dead_letter_topic),
                max_delivery_attempts=dead_letter_after,
            )
        try:
            subscriber.create_subscription(request=request)
        except gexc.AlreadyExists:
            pass


class UnreadableHint(ValueError):
    """A message on the events topic that is not a readable log entry (garbage, nesting too deep
    for the JSON decoder, not an object). Redelivering it can never help: ack it and count it."""


def vertex_job_id_from_log_entry(data: bytes) -> str | None:
    """The Vertex job id a Cloud Logging entry (as a log sink delivers it) is about, if any.

    Only entries of `resource.type="ml_job"` with a numeric job id count (None for any other
    entry). Raises `UnreadableHint` when `data` is not a JSON object at all.
    """
    if nests_too_deeply(data):
        raise UnreadableHint("not a log entry: nested too deeply")
    try:
        entry = json.loads(data)
    except ValueError as error:
        raise UnreadableHint(f"not a JSON log entry: {type(error).__name__}") from None
    if not isinstance(entry, dict):
        raise UnreadableHint(f"not a JSON object: {type(entry).__name__}")
    try:
        resource = entry["resource"]
        if resource.get("type") != "ml_job":
            return None
        job_id = str(resource["labels"]["job_id"])
    except (KeyError, TypeError, AttributeError, RecursionError):
        return None
    return job_id if job_id.isdigit() else None
