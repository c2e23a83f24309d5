"""The copy of a rejected request on the dead-letter topic.

Pub/Sub takes messages of at most 10 MB, and a push body may carry more (the push endpoint reads
up to 16 MB so it can reject oversized requests with a reason). A copy that would not fit is cut
to `max_bytes` and says so in its attributes, with the key of the record the state store keeps,
so an operator can still find what was rejected and why.
"""

from __future__ import annotations

from controller import logs
from controller.service.alerts import Publisher
from controller.store.keys import rejected_key_for_payload

log = logs.get("relaunch.deadletter")

# Attribute values are at most 1,024 bytes in Pub/Sub.
MAX_ATTRIBUTE_BYTES = 1024


class DeadLetterCopy:
    def __init__(self, publisher: Publisher, topic: str, *, max_bytes: int):
        self._publisher = publisher
        self._topic = topic
        self._max_bytes = max_bytes

    def __call__(self, payload: bytes, reason: str) -> None:
        """Publish `payload` (cut if too large) with its reason; failures are logged, not raised:
        the rejection itself is already stored."""
        attributes = {
            "reason": reason.encode()[:MAX_ATTRIBUTE_BYTES].decode("utf-8", errors="ignore"),
            "storedRecord": rejected_key_for_payload(payload),
        }
        data = payload
        if len(payload) > self._max_bytes:
            data = payload[: self._max_bytes]
            attributes.update(truncated="true", originalBytes=str(len(payload)))
        try:
            self._publisher.publish(self._topic, data, **attributes)
        except Exception as error:
            log.error(
                "dead-letter publish failed", error=str(error), stored_record=attributes["storedRecord"]
            )
