"""Pub/Sub clients for an emulator that can receive messages up to Pub/Sub's 10 MB limit.

With PUBSUB_EMULATOR_HOST set, google-cloud-pubsub (2.x) opens a bare `grpc.insecure_channel`
for the emulator, without the unlimited message sizes it sets on its production channel, so a
subscriber cannot receive a message above gRPC's 4 MiB default from *any* emulator (devstack's
or Google's): the stream fails with "CLIENT: Received message larger than max". These helpers
give the emulator channel the same limits as production. Without PUBSUB_EMULATOR_HOST they return
the stock clients.
"""

from __future__ import annotations

import os

import grpc
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

# The sizes google-cloud-pubsub sets on its own (non-emulator) channel: no client-side limit.
_UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def emulator_channel(host_port: str) -> grpc.Channel:
    return grpc.insecure_channel(host_port, options=_UNLIMITED)


def subscriber_client(host_port: str | None = None) -> pubsub_v1.SubscriberClient:
    """A SubscriberClient for `host_port` (default: PUBSUB_EMULATOR_HOST) that can receive
    messages of any size the server sends."""
    host_port = host_port or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host_port:
        return pubsub_v1.SubscriberClient()
    return pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=emulator_channel(host_port)))


def publisher_client(host_port: str | None = None, **options) -> pubsub_v1.PublisherClient:
    """A PublisherClient for `host_port` (default: PUBSUB_EMULATOR_HOST); `options` go to
    PublisherClient (e.g. publisher_options)."""
    host_port = host_port or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host_port:
        return pubsub_v1.PublisherClient(**options)
    transport = PublisherGrpcTransport(channel=emulator_channel(host_port))
    return pubsub_v1.PublisherClient(transport=transport, **options)
