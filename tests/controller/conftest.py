"""Fixtures for controller tests: the engine wired to devstack's stand-ins through real clients."""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import uuid
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1, storage

from controller.alerts import AlertSink
from controller.checkpoints import CheckpointProbe
from controller.engine import Dependencies, Engine
from controller.pubsub_io import TopicPublisher
from controller.settings import Settings
from controller.store.sqlite import SqliteStateStore
from controller.vertex import VertexBackend
from devstack.gcs import start_gcs
from devstack.pubsub import start_pubsub
from devstack.vertex import start_vertex

PROJECT = "relaunch-dev"
REGION = "us-central1"
FAKE_TRAINER = str(Path(__file__).with_name("fake_trainer.py"))


class Stack:
    """The three stand-ins plus the log entries Vertex emitted (the 'events' a sink delivers)."""

    def __init__(self, workdir: Path):
        self.entries: list[dict] = []
        self._entries_lock = threading.Lock()
        self.pubsub = start_pubsub()
        self.gcs = start_gcs()
        self.vertex = start_vertex(
            project=PROJECT,
            region=REGION,
            workdir=str(workdir),
            event_sink=self._record,
            provisioning_seconds=0.2,
            kill_grace_seconds=2.0,
        )
        self.env = {
            "PUBSUB_EMULATOR_HOST": self.pubsub.host_port,
            "STORAGE_EMULATOR_HOST": self.gcs.url,
            "RELAUNCH_VERTEX_ENDPOINT": self.vertex.host_port,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "RELAUNCH_REGION": REGION,
        }

    def _record(self, entry: dict) -> None:
        with self._entries_lock:
            self.entries.append(entry)

    def stop(self) -> None:
        self.vertex.stop()
        self.gcs.stop()
        self.pubsub.stop()


@pytest.fixture(scope="package")
def stack(tmp_path_factory):
    saved = dict(os.environ)
    stack = Stack(tmp_path_factory.mktemp("vertex"))
    os.environ.update(stack.env)
    yield stack
    stack.stop()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def bucket(stack):
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(name)
    return name


@pytest.fixture
def alerts_topic(stack):
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{PROJECT}/topics/alerts-{uuid.uuid4().hex[:8]}"
    subscription = f"projects/{PROJECT}/subscriptions/alerts-{uuid.uuid4().hex[:8]}"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    return topic, subscription


def read_alerts(subscription: str, want: int = 1, timeout: float = 20.0) -> list[dict]:
    """Pull alerts from the alerts topic with the real subscriber client."""
    subscriber = pubsub_v1.SubscriberClient()
    found: list[dict] = []
    import time as _time

    deadline = _time.monotonic() + timeout
    while len(found) < want and _time.monotonic() < deadline:
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
        for received in response.received_messages:
            found.append(json.loads(received.message.data))
        if response.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
            )
    return found


@pytest.fixture
def make_engine(stack, tmp_path, alerts_topic):
    """Build an Engine on a fresh SQLite store; calling it again reopens the same store
    (what a restarted controller sees)."""
    db = tmp_path / "state.db"

    def build(**overrides) -> Engine:
        values = {
            "vertex_endpoint": stack.vertex.host_port,
            "project": PROJECT,
            "region": REGION,
            "reconcile_seconds": 1,
            "submit_retry_seconds": 0.5,
            **overrides,
        }
        settings = Settings(**values)
        alerts = AlertSink(TopicPublisher(), alerts_topic[0], cooldown_seconds=0)
        deps = Dependencies(
            store=SqliteStateStore(db),
            vertex=VertexBackend(settings, retry_max_wait=0.5),
            checkpoints=CheckpointProbe(),
            alerts=alerts,
        )
        return Engine(settings, deps, rng=random.Random(1))

    return build


def request(job_id: str, bucket: str, *, args=(), replicas: int = 1, policy=None) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": [sys.executable, FAKE_TRAINER, *args],
        },
    }
    pools = [pool]
    if replicas > 1:
        pools.append({**pool, "replicaCount": replicas - 1})
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": pools, "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
        "restartPolicy": policy or {"backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
    }
    return json.dumps(body).encode()
