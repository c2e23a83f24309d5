"""One message whose handling fails is dead-lettered with `internal: <type>` after a few attempts,
never redelivered for ever, and never pauses the intake (issue 28); only a store that does not
answer holds requests back.

The real intake on a real SQLite store; the "bug" is a store that fails on one job's key only,
which is how a fault specific to one message looks from the boundary. No Pub/Sub or Vertex call
is made (the intake only records), so this runs without devstack.
"""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from controller.service.alerts import AlertSink
from controller.service.http import decode_push_envelope
from controller.service.intake import Intake
from controller.service.intake_guard import MAX_ATTEMPTS, Delivery, IntakeGuard, RetryLater
from controller.service.metrics import Metrics
from controller.settings import Settings
from controller.store.keys import REJECTED_PREFIX, job_key
from controller.store.sqlite import SqliteStateStore

POISON = "poison-1"


class OneBadKeyStore(SqliteStateStore):
    """A state store whose writes of one job raise TypeError (a bug reached by one message only);
    `down` makes every call fail, as an unreachable store does."""

    def __init__(self, path):
        super().__init__(path)
        self.down = False

    def create(self, key, document, *args, **kwargs):
        self._maybe_fail()
        if key == job_key(POISON):
            raise TypeError("a bug that only this request reaches")
        return super().create(key, document, *args, **kwargs)

    def get(self, key):
        self._maybe_fail()
        return super().get(key)

    def together(self, work):
        return work(self)  # each of its calls one by one, through the overrides here

    def _maybe_fail(self):
        if self.down:
            raise ConnectionError("state store unreachable")


def request(job_id: str) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
    }
    document = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool]},
        "checkpoint": {"uri": f"gs://ckpt/{job_id}"},
    }
    return json.dumps(document).encode()


@pytest.fixture
def parts(tmp_path):
    settings = Settings(project="relaunch-dev", region="us-central1", vertex_endpoint="127.0.0.1:9")
    store = OneBadKeyStore(tmp_path / "state.db")
    alerts: list[dict] = []
    dead_letters: list[tuple[bytes, str]] = []
    metrics = Metrics()
    intake = Intake(
        store,
        settings,
        AlertSink(None, None, cooldown_seconds=0, on_alert=alerts.append),
        metrics=metrics,
        dead_letter=lambda data, reason: dead_letters.append((data, reason)),
    )
    return IntakeGuard(intake), store, alerts, dead_letters, metrics


def test_a_message_that_keeps_failing_is_dead_lettered_with_its_type_after_a_few_tries(parts):
    guard, store, alerts, dead_letters, metrics = parts
    body = request(POISON)
    for attempt in range(1, MAX_ATTEMPTS):
        with pytest.raises(RetryLater) as later:
            guard.accept(body, {}, Delivery("m-1", None))  # no dead-letter policy: counted here
        assert not later.value.store_down, f"attempt {attempt} blamed the store"
    result = guard.accept(body, {}, Delivery("m-1", None))
    assert (result.status, result.reason) == ("internal", "internal: TypeError")
    assert dead_letters == [(body, "internal: TypeError")]
    [alert] = [a for a in alerts if a["kind"] == "request_rejected"]
    assert alert["jobId"] == POISON and "internal: TypeError" in alert["summary"]
    [record] = store.list(REJECTED_PREFIX)
    assert record.document["reason"] == "internal: TypeError"
    assert b'relaunch_rejected_requests_total{reason="internal"} 1.0' in metrics.render()


def test_requests_around_a_failing_one_are_accepted_meanwhile(parts):
    guard, store, *_ = parts
    with pytest.raises(RetryLater):
        guard.accept(request(POISON), {}, Delivery("m-1", None))
    assert guard.accept(request("fine-1"), {}, Delivery("m-2", None)).status == "accepted"
    assert store.get(job_key("fine-1")) is not None


def test_an_accepted_delivery_is_logged_once_with_its_message_id(parts):
    """The intake's "job accepted" line is the delivery's one line: it names the job and the
    Pub/Sub message, so the callback adds no "request handled" line of its own for it."""
    guard, *_ = parts
    with capture_logs() as lines:
        assert guard.accept(request("fine-1"), {}, Delivery("m-7", None)).status == "accepted"
    [accepted] = [line for line in lines if line["event"] == "job accepted"]
    assert (accepted["job_id"], accepted["message_id"]) == ("fine-1", "m-7")


def test_pubsubs_delivery_attempt_counts_the_failures_other_instances_saw(parts):
    """With a dead-letter policy Pub/Sub numbers the deliveries; a message on its third is set
    aside at its first failure here (another instance, or this one before a restart, saw the rest)."""
    guard, _, _, dead_letters, _ = parts
    result = guard.accept(request(POISON), {}, Delivery("m-1", MAX_ATTEMPTS))
    assert result.status == "internal" and len(dead_letters) == 1


def test_without_a_message_id_the_body_identifies_the_message(parts):
    guard, *_ = parts
    for _ in range(MAX_ATTEMPTS - 1):
        with pytest.raises(RetryLater):
            guard.accept(request(POISON), {}, None)
    assert guard.accept(request(POISON), {}, None).status == "internal"


def test_a_failure_that_passes_leaves_no_count_behind(parts):
    """A transient error followed by success: the next failure of the same id starts afresh."""
    guard, store, *_ = parts
    with pytest.raises(RetryLater):
        guard.accept(request(POISON), {}, Delivery("m-1", None))
    assert guard.accept(request("fine-2"), {}, Delivery("m-1", None)).status == "accepted"
    for _ in range(MAX_ATTEMPTS - 1):
        with pytest.raises(RetryLater):
            guard.accept(request(POISON), {}, Delivery("m-1", None))


def test_while_the_store_does_not_answer_nothing_is_dead_lettered_however_often_it_comes(parts):
    guard, store, _, dead_letters, _ = parts
    store.down = True
    for attempt in range(1, 3 * MAX_ATTEMPTS):
        with pytest.raises(RetryLater) as later:
            guard.accept(request("fine-3"), {}, Delivery("m-3", attempt))
        assert later.value.store_down
    assert dead_letters == []
    store.down = False
    assert guard.accept(request("fine-3"), {}, Delivery("m-3", 10)).status == "accepted"


def test_the_remembered_failures_are_bounded_and_the_oldest_go_first(parts):
    """With room for two message ids, a third pushes out the oldest: its count starts again
    (Pub/Sub's own count, where a dead-letter policy sets it, still bounds it)."""
    guard, _, _, dead_letters, _ = parts
    small = IntakeGuard(guard._intake, max_attempts=3, remembered=2)
    for message_id in ("m-0", "m-0", "m-1", "m-2", "m-0", "m-0"):
        with pytest.raises(RetryLater):
            small.accept(request(POISON), {}, Delivery(message_id, None))
    assert small.accept(request(POISON), {}, Delivery("m-0", None)).status == "internal"
    assert len(dead_letters) == 1


@pytest.mark.parametrize(
    ("extra", "attempt"),
    [
        ({"deliveryAttempt": 7}, 7),
        ({}, None),
        ({"deliveryAttempt": "7"}, None),
        ({"deliveryAttempt": True}, None),
    ],
)
def test_a_push_envelope_gives_the_guard_its_message_id_and_delivery_attempt(extra, attempt):
    """Push carries `deliveryAttempt` only with a dead-letter policy (and Google's emulator omits
    it even then): absent or malformed, the guard's own count decides."""
    envelope = {"message": {"data": "e30=", "messageId": "42"}, "subscription": "s", **extra}
    _, _, delivery = decode_push_envelope(json.dumps(envelope).encode())
    assert delivery == Delivery("42", attempt)
