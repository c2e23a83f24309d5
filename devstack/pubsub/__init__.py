"""Local stand-in for Google Cloud Pub/Sub, speaking the real gRPC protocol.

`google.cloud.pubsub_v1.PublisherClient` and `SubscriberClient` work against it unchanged with
`PUBSUB_EMULATOR_HOST=<emulator.host_port>`::

    with start_pubsub() as emulator:          # port 0: any free port
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host_port

Checked against Google's own emulator by the tests (devstack/README.md, "Pub/Sub conformance";
`devstack.pubsub.official.OfficialEmulator` runs it). `devstack.pubsub.testing` has
`running_emulator()` (starts one and sets/restores the variable)
and `wait_until(predicate, timeout)` for tests. `python -m devstack.pubsub --port N` runs it in
the foreground and prints the export line.

Covered
-------
- Publisher: CreateTopic, GetTopic, UpdateTopic, ListTopics, ListTopicSubscriptions, DeleteTopic,
  DetachSubscription, Publish (attributes, ordering keys; numeric message ids, publish_time).
- Subscriber: Create/Get/Update/List/DeleteSubscription, ModifyPushConfig, Pull, Acknowledge,
  ModifyAckDeadline, StreamingPull (as `SubscriberClient.subscribe()` drives it: initial request
  with stream_ack_deadline_seconds and flow control, acks / nacks / deadline extensions on the
  stream or by unary calls, keep-alives; server-side max_outstanding_messages/bytes; new messages
  delivered as published, on condition variables, no polling).
- Messages up to Pub/Sub's 10 MB (quotas page): a PublishRequest above 10,000,000 bytes is refused
  with INVALID_ARGUMENT ("The value for request_size is too large. ..."); gRPC accepts up to
  32 MiB so that this answer, not a transport error, comes back; pull and stream responses hold
  about 10 MB of messages at most (one message always fits). A stock SubscriberClient on
  PUBSUB_EMULATOR_HOST still cannot receive > 4 MiB (client-library channel):
  `devstack.pubsub.clients.subscriber_client()` gives it the production limits.
- Defaults filled in on create as the service does: ack deadline 10 s, message retention 7 days,
  retry policy backoffs 10 s / 600 s, max_delivery_attempts 5. Bounds: max_delivery_attempts
  5-100 (OUT_OF_RANGE), backoffs 0-600 s and maximum >= minimum (INVALID_ARGUMENT), malformed
  ack ids (INVALID_ARGUMENT; stale ones are ignored).
- NOT_FOUND / ALREADY_EXISTS / INVALID_ARGUMENT as the real service answers them; a subscription
  outlives its topic (topic reads `_deleted-topic_`); messages published before a subscription
  existed are not delivered to it.
- Redelivery after the ack deadline or a nack; `retry_policy` exponential backoff
  (minimum_backoff * 2^(attempt-1), capped at maximum_backoff); without one, pull redelivers at
  once and push backs off from 0.1 s to 60 s.
- Dead-letter policy: after `max_delivery_attempts` failed deliveries the message is published to
  the dead-letter topic with the CloudPubSubDeadLetterSource* attributes; `delivery_attempt` is set
  only when a dead-letter policy exists.
- `enable_message_ordering`: messages of one ordering key go out in publish order, one
  outstanding at a time per key.
- Push subscriptions: the real JSON envelope POSTed to `push_endpoint` (http allowed); 102, 200,
  201, 202, 204 acknowledge, anything else or a timeout (the ack deadline) is a failed delivery.
  With `oidc_token`, `Authorization: Bearer <RS256 ID token>` (iss https://accounts.google.com,
  aud = audience or the endpoint, email, email_verified, sub, iat, exp = 1 h, kid header) signed by
  a local key whose certificate is served at `certs_url` ({kid: PEM}), so
  `google.oauth2.id_token.verify_token(token, request, audience=..., certs_url=...)` works.
  `mint_token` makes valid, expired, wrong-audience and forged tokens for tests.

Deviations and NOT emulated
---------------------------
- Ack deadlines down to `min_ack_deadline_seconds` (default 1 s) are accepted on subscriptions
  (the real minimum is 10 s), so tests run fast. Note the Python client still extends leases by
  at least 10 s itself.
- Pull without return_immediately waits at most 2 s for a message, then answers empty.
- Exactly-once delivery (accepted, but delivery stays at-least-once and acks are not confirmed),
  filters (rejected with INVALID_ARGUMENT), snapshots and Seek (UNIMPLEMENTED), schemas and the
  SchemaService, IAM, message retention / expiration (messages stay until acknowledged;
  `retain_acked_messages` is ignored), subscription expiration, BigQuery / Cloud Storage
  subscriptions, `no_wrapper` push, message transforms, topic message storage policy, and
  StreamingPull stream rebalancing or periodic stream closes.
- Nothing is persisted: state lives in memory for the life of the process.
"""

from devstack.pubsub.server import PubSubEmulator, start_pubsub

__all__ = ["PubSubEmulator", "start_pubsub"]
