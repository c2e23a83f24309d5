"""A flood of hostile request messages, with a few valid ones mixed in, published with the real
Pub/Sub client to a real `relaunch controller` process on devstack (issue 28).

    report = HostileFlood(stack, workdir, FloodConfig(hostile=200, valid=5)).run()

What it checks, from the outside: every hostile message reaches the dead-letter topic with a
`reason` attribute (matched by the `storedRecord` key the copy carries, which is derived from
the payload), every valid one is accepted (the controller's "job accepted" log line), the
requests subscription holds nothing afterwards (devstack's broker is asked: Pub/Sub has no call
that counts a backlog), the intake never paused and no handling failed, and /healthz answered
throughout. The hostile set includes messages over gRPC's 4 MiB default and near Pub/Sub's
10 MB limit, and one over it, which Pub/Sub itself refuses.

Used by tests/controller/service/test_hostile_flood.py (small) and bench/hostile_flood.py (2,000).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from controller.request import RequestInvalid, parse_request
from controller.store.keys import rejected_key_for_payload
from tests.support.daemon import ControllerProcess, cancel_vertex_jobs, topic_settings, wait_for
from tests.support.hostile import hostile_message

# Pub/Sub's limit on one message (https://cloud.google.com/pubsub/quotas#resource_limits): 10 MB.
PUBSUB_MAX_MESSAGE_BYTES = 10_000_000
# Over gRPC's 4 MiB default receive size, and up to just under Pub/Sub's limit with the
# request's own framing (a publish request is held to 10 MB too).
LARGE_SIZES = (4_300_000, 6_000_000, 9_500_000)


@dataclass(frozen=True)
class FloodConfig:
    hostile: int = 200
    valid: int = 5
    seed: int = 28
    large_sizes: tuple[int, ...] = LARGE_SIZES
    timeout_seconds: float = 240.0
    controller_root: str | None = None  # run the controller from another source tree (bench)


@dataclass
class FloodReport:
    hostile: int = 0
    valid: int = 0
    over_limit_refused_by_pubsub: bool = False
    dead_lettered_with_reason: int = 0
    dead_lettered_without_reason: int = 0
    missing_hostile: list[str] = field(default_factory=list)  # stored-record keys never seen
    accepted: int = 0
    missing_valid: list[str] = field(default_factory=list)
    hostile_latencies: list[float] = field(default_factory=list)  # publish -> dead-letter copy
    large_latencies: list[float] = field(default_factory=list)
    valid_latencies: list[float] = field(default_factory=list)  # publish -> "job accepted"
    intake_pauses: int = 0
    handling_failures: int = 0
    backlog_after: int = -1
    healthz_ok: int = 0
    healthz_failed: int = 0
    controller_max_rss_mib: float = 0.0
    seconds: float = 0.0

    @property
    def problems(self) -> list[str]:
        found = []
        if self.missing_hostile:
            found.append(f"{len(self.missing_hostile)} hostile messages never dead-lettered")
        if self.dead_lettered_without_reason:
            found.append(f"{self.dead_lettered_without_reason} dead letters without a reason")
        if self.missing_valid:
            found.append(f"valid requests never accepted: {self.missing_valid}")
        if self.intake_pauses:
            found.append(f"intake paused {self.intake_pauses} times")
        if self.handling_failures:
            found.append(f"{self.handling_failures} deliveries failed and were left for redelivery")
        if self.backlog_after != 0:
            found.append(f"{self.backlog_after} messages left on the requests subscription")
        if self.healthz_failed:
            found.append(f"/healthz failed {self.healthz_failed} times")
        if not self.over_limit_refused_by_pubsub:
            found.append("a message over 10 MB was not refused by Pub/Sub")
        return found


def hostile_bodies(count: int, seed: int, large_sizes: tuple[int, ...]) -> list[bytes]:
    """`count` distinct bodies that are all invalid requests, the large ones among them."""
    rng = random.Random(seed)
    large = [
        b'{"jobId": "large-%d", "pad": "' % index + b"x" * size + b'"}'
        if index % 2 == 0
        else rng.randbytes(size)
        for index, size in enumerate(large_sizes)
    ]
    bodies, seen = list(large), set(large)
    while len(bodies) < count:
        body = hostile_message(rng)
        if body in seen or not _invalid(body):
            continue
        seen.add(body)
        bodies.append(body)
    return bodies[:count]


def _invalid(body: bytes) -> bool:
    try:
        parse_request(body)
    except RequestInvalid:
        return True
    return False


def valid_body(job_id: str) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {"imageUri": "flood", "command": [sys.executable, "-c", "pass"]},
    }
    document = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool]},
        "checkpoint": {"uri": f"gs://flood/{job_id}"},
    }
    return json.dumps(document).encode()


class HostileFlood:
    def __init__(self, stack, workdir: Path, config: FloodConfig):
        self.stack = stack
        self.workdir = Path(workdir)
        self.config = config
        self.tag = uuid.uuid4().hex[:6]
        self.names = topic_settings(f"flood-{self.tag}")
        self.project = stack.env()["GOOGLE_CLOUD_PROJECT"]

    def run(self) -> FloodReport:
        config, report = self.config, FloodReport()
        hostile = hostile_bodies(config.hostile, config.seed, config.large_sizes)
        valid = {
            f"flood-{self.tag}-{index}": valid_body(f"flood-{self.tag}-{index}")
            for index in range(config.valid)
        }
        report.hostile, report.valid = len(hostile), len(valid)
        # Valid requests go among the hostile ones, some right behind the large messages.
        order: list[tuple[str, bytes]] = [("hostile", body) for body in hostile]
        rng = random.Random(config.seed)
        for job_id, body in valid.items():
            order.insert(rng.randint(len(config.large_sizes), len(order)), (job_id, body))

        controller = self._start_controller()
        health = _HealthPoller(controller)
        dead_letters = _DeadLetterReader(
            self._subscription(self.names["RELAUNCH_DEAD_LETTER_TOPIC"] + "-inspect")
        )
        started = time.monotonic()
        try:
            controller.wait_ready("leader", timeout=120)
            health.start()
            dead_letters.start()
            report.over_limit_refused_by_pubsub = self._publish_over_limit()
            published = self._publish(order)
            wanted = {rejected_key_for_payload(body): body for body in hostile}
            log = _LogTail(controller.log_path)
            accepted: dict[str, float] = {}

            def settled() -> bool:
                for line in log.new_lines():
                    if line.get("message") == "job accepted" and line.get("job_id"):
                        accepted[line["job_id"]] = _epoch(line["time"])
                return set(wanted) <= dead_letters.keys() and set(valid) <= accepted.keys()

            try:
                wait_for(settled, config.timeout_seconds, what="every message handled")
            except TimeoutError:
                pass  # reported below, message by message
            report.seconds = time.monotonic() - started
            report.backlog_after = self._backlog_after()
            report.controller_max_rss_mib = _max_rss_mib(controller.proc.pid)
        finally:
            health.stop()
            dead_letters.stop()
            controller.stop()
            cancel_vertex_jobs(self.stack, set(valid))

        seen = dead_letters.snapshot()
        for key, body in wanted.items():
            if key not in seen:
                report.missing_hostile.append(key)
                continue
            reason, at = seen[key]
            if reason:
                report.dead_lettered_with_reason += 1
            else:
                report.dead_lettered_without_reason += 1
            latency = at - published[body]
            report.hostile_latencies.append(latency)
            if len(body) > 4 * 1024 * 1024:
                report.large_latencies.append(latency)
        for job_id, body in valid.items():
            if job_id in accepted:
                report.valid_latencies.append(accepted[job_id] - published[body])
            else:
                report.missing_valid.append(job_id)
        messages = [str(line.get("message", "")) for line in controller.log_lines()]
        report.accepted = len(report.valid_latencies)
        report.intake_pauses = sum(1 for text in messages if text.startswith("pausing request intake"))
        # "request handling failed; leaving it for redelivery" (and the guard's "keeps failing")
        report.handling_failures = sum(1 for text in messages if text.startswith("request handling"))
        report.healthz_ok, report.healthz_failed = health.ok, health.failed
        return report

    # --- parts -------------------------------------------------------------------------------
    def _start_controller(self) -> ControllerProcess:
        settings = {
            **self.names,
            "RELAUNCH_STATE_STORE": f"sqlite:///{self.workdir}/state-{self.tag}.db",
            "RELAUNCH_CREATES_PER_MINUTE": "1",  # the intake is measured, not Vertex
            "RELAUNCH_RECONCILE_SECONDS": "3600",
        }
        env = dict(self.stack.env())
        if self.config.controller_root:
            env["PYTHONPATH"] = self.config.controller_root
        process = ControllerProcess(env, self.workdir / f"controller-{self.tag}.log", **settings)
        return process

    def _topic(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def _subscription(self, name: str) -> str:
        return f"projects/{self.project}/subscriptions/{name}"

    def _publish(self, order: list[tuple[str, bytes]]) -> dict[bytes, float]:
        """Publish everything in order with the real client; when each publish was handed over."""
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=100, max_latency=0.01)
        )
        topic = self._topic(self.names["RELAUNCH_REQUESTS_TOPIC"])
        sent: dict[bytes, float] = {}
        futures = []
        for _, body in order:
            sent[body] = time.time()
            futures.append(publisher.publish(topic, body))
        for future in futures:
            future.result(timeout=120)
        publisher.stop()
        return sent

    def _publish_over_limit(self) -> bool:
        """Pub/Sub refuses a message over 10 MB at publish time: it never reaches a subscriber."""
        from google.api_core import exceptions
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient()
        try:
            publisher.publish(
                self._topic(self.names["RELAUNCH_REQUESTS_TOPIC"]), b"x" * (PUBSUB_MAX_MESSAGE_BYTES + 1)
            ).result(timeout=60)
        except (exceptions.InvalidArgument, ValueError):
            return True
        finally:
            publisher.stop()
        return False

    def _backlog_after(self) -> int:
        """Messages still on the requests subscription once acks have had time to land."""
        broker = self.stack.pubsub.broker
        path = self._subscription(self.names["RELAUNCH_REQUESTS_SUBSCRIPTION"])

        def remaining() -> int:
            return len(broker.subscription_state(path).backlog)

        try:
            wait_for(lambda: remaining() == 0, 30, what="requests subscription empty")
        except TimeoutError:
            pass
        return remaining()


class _LogTail:
    """The controller's JSON log lines written since the last call."""

    def __init__(self, path: Path):
        self._path = path
        self._offset = 0

    def new_lines(self) -> list[dict]:
        with open(self._path, "rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        lines = []
        for raw in complete.splitlines():
            if raw.startswith(b"{"):
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    continue
        return lines


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _max_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _DeadLetterReader:
    """Streams the dead-letter topic's inspection subscription: stored-record key -> (reason,
    the copy's publish time)."""

    def __init__(self, subscription: str):
        self._subscription = subscription
        self._seen: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stream = None
        self._client = None

    def start(self) -> None:
        from controller.adapters.pubsub import subscriber_client  # copies can be 9 MB

        self._client = subscriber_client()
        self._stream = self._client.subscribe(self._subscription, self._on_message)

    def _on_message(self, message) -> None:
        key = message.attributes.get("storedRecord") or rejected_key_for_payload(message.data)
        with self._lock:
            self._seen.setdefault(
                key, (message.attributes.get("reason", ""), message.publish_time.timestamp())
            )
        message.ack()

    def keys(self) -> set[str]:
        with self._lock:
            return set(self._seen)

    def snapshot(self) -> dict[str, tuple[str, float]]:
        with self._lock:
            return dict(self._seen)

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            try:
                self._stream.result(timeout=10)
            except Exception:
                pass
        if self._client is not None:
            self._client.close()


class _HealthPoller:
    """GET /healthz every quarter second while the flood runs."""

    def __init__(self, controller: ControllerProcess):
        self._controller = controller
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="healthz-poller", daemon=True)
        self.ok = self.failed = 0

    def start(self) -> None:
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.25):  # a fixed polling period, not synchronisation
            try:
                status, _ = self._controller.get("/healthz")
            except OSError:
                status = 0
            if status == 200:
                self.ok += 1
            else:
                self.failed += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def summary(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (
        f"median {statistics.median(ordered):.2f} s, p95 {p95:.2f} s, max {ordered[-1]:.2f} s "
        f"(n={len(ordered)})"
    )


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
