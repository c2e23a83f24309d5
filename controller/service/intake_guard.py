"""The last line of the intake boundary: a message whose handling fails is never redelivered for ever.

Parsing already turns any bytes into a request or a reason (controller.request), so what can
still fail is recording one: the state store, or a bug in a later step. The two are told apart
by asking the store for one record:

- the store does not answer: nothing can be recorded for anyone, so the message is left for
  redelivery (`RetryLater(store_down=True)`) and the daemon pauses pulling until the store
  answers; the message itself is not held to blame.
- the store answers: the failure belongs to this message. It is left for redelivery, since a
  transient error deserves another try, until it has failed `max_attempts` times; then it is
  rejected like an invalid request, with the reason `internal: <exception type>`: recorded under
  `rejected/`, copied to the dead-letter topic, alerted (`request_rejected`) and counted
  (`relaunch_rejected_requests{reason="internal"}`), and acknowledged. Intake is never paused
  for it, so the requests behind it go on.

How the attempts are counted: Pub/Sub's own `delivery_attempt` (push: `deliveryAttempt`) where
the subscription has a dead-letter policy, which is the only case in which Pub/Sub sets it
(0 or absent otherwise, and approximate even then: "1 + NACKs + ack deadline exceeds", see
https://cloud.google.com/pubsub/docs/reference/rpc/google.pubsub.v1#receivedmessage). The
subscriptions Relaunch creates have one. So as not to depend on it, each instance also counts the
failures it saw itself per message id, in a bounded map (the oldest forgotten first); the larger
of the two counts decides. A subscription without a dead-letter policy is still bounded by the
local count; one with a policy is bounded even across restarts and instances.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from controller import logs
from controller.service.intake import Intake, IntakeResult
from controller.store.keys import job_key

log = logs.get("relaunch.intake")

# Failures of one message before it is dead-lettered: enough for a transient error to pass,
# few enough that a bad message is set aside within seconds of Pub/Sub's retry backoff.
MAX_ATTEMPTS = 3
# Message ids whose failures this instance remembers; each entry is about a hundred bytes.
REMEMBERED_MESSAGES = 10_000


@dataclass(frozen=True)
class Delivery:
    """What Pub/Sub says of one delivery: its message id and its `delivery_attempt` (None or 0
    where the subscription has no dead-letter policy)."""

    message_id: str | None = None
    attempt: int | None = None


class RetryLater(Exception):
    """Nothing was recorded: do not acknowledge, let Pub/Sub deliver the message again.
    `store_down` says the whole intake should wait for the store."""

    def __init__(self, error: BaseException, *, store_down: bool):
        super().__init__(f"{type(error).__name__}: {error}")
        self.store_down = store_down


class IntakeGuard:
    def __init__(
        self, intake: Intake, *, max_attempts: int = MAX_ATTEMPTS, remembered: int = REMEMBERED_MESSAGES
    ):
        self._intake = intake
        self._max_attempts = max(1, max_attempts)
        self._remembered = max(1, remembered)
        self._failures: OrderedDict[str, int] = OrderedDict()
        # Stays: the map above is shared by the Pub/Sub callback and HTTP push threads (before the
        # queue, so no one-worker-per-key guarantee applies); it holds messages, never job state.
        self._lock = threading.Lock()

    def accept(
        self, data: bytes, attributes: dict[str, str], delivery: Delivery | None = None
    ) -> IntakeResult:
        """The intake's result (acknowledge it), or `RetryLater` (do not)."""
        delivery = delivery or Delivery()
        key = _message_key(data, delivery)
        try:
            result = self._intake.accept(data, attributes, message_id=delivery.message_id)
        except Exception as error:
            if not self._store_answers():
                log.warning("request intake failed with the state store", error=repr(error))
                raise RetryLater(error, store_down=True) from error
            attempt = self._count_failure(key, delivery.attempt)
            if attempt < self._max_attempts:
                log.warning(
                    "request handling failed; leaving it for redelivery",
                    message_id=delivery.message_id,
                    attempt=None,
                    failed_deliveries=attempt,
                    error=repr(error),
                )
                raise RetryLater(error, store_down=False) from error
            log.exception(
                "request handling keeps failing; dead-lettering it",
                message_id=delivery.message_id,
                attempt=None,
                failed_deliveries=attempt,
            )
            try:
                result = self._intake.reject_unhandled(data, error)
            except Exception as reject_error:  # Pub/Sub's own dead-letter policy is the bound now
                raise RetryLater(reject_error, store_down=False) from reject_error
        self._forget(key)
        return result

    def _store_answers(self) -> bool:
        try:
            self._intake.store.get(job_key("intake-probe"))
        except Exception:
            return False
        return True

    def _count_failure(self, key: str, pubsub_attempt: int | None) -> int:
        with self._lock:
            seen = self._failures.pop(key, 0) + 1
            self._failures[key] = seen
            while len(self._failures) > self._remembered:
                self._failures.popitem(last=False)
        return max(seen, pubsub_attempt or 0)

    def _forget(self, key: str) -> None:
        if self._failures:  # the common case, nothing ever failed, takes no lock
            with self._lock:
                self._failures.pop(key, None)


def _message_key(data: bytes, delivery: Delivery) -> str:
    if delivery.message_id:
        return f"id:{delivery.message_id}"
    return "sha256:" + hashlib.sha256(data).hexdigest()
