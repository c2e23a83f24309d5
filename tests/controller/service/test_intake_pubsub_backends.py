"""The controller's intake through Pub/Sub, against devstack's Pub/Sub and Google's own emulator.

A real `relaunch controller` process pulls requests from whichever Pub/Sub `pubsub_backend` names
(Vertex and Cloud Storage stay on devstack): a valid request becomes a job that runs to the end,
a second copy of it changes nothing, and an invalid one is copied to the dead-letter topic with
its reason. The same outcome on both servers shows the intake does not lean on a quirk of ours.
"""

from __future__ import annotations

import json
import uuid

from google.cloud import pubsub_v1

from tests.support.daemon import ControllerProcess, wait_for
from tests.support.engine import request


def test_requests_are_recorded_once_and_bad_ones_dead_lettered(
    pubsub_backend, devstack, bucket, tmp_path, monkeypatch
):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_backend.host_port)
    project = pubsub_backend.project
    tag = uuid.uuid4().hex[:6]
    topics = {name: f"projects/{project}/topics/{name}-{tag}" for name in ("requests", "dead")}
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for topic in topics.values():
        publisher.create_topic(name=topic)
    dead_letters = f"projects/{project}/subscriptions/dead-{tag}-read"
    subscriber.create_subscription(name=dead_letters, topic=topics["dead"])

    controller = ControllerProcess(
        {**devstack.env(), "PUBSUB_EMULATOR_HOST": pubsub_backend.host_port},
        tmp_path / "controller.log",
        RELAUNCH_STATE_STORE=f"sqlite:///{tmp_path}/state.db",
        RELAUNCH_RECONCILE_SECONDS="1",
        RELAUNCH_REQUESTS_TOPIC=f"requests-{tag}",
        RELAUNCH_REQUESTS_SUBSCRIPTION=f"requests-{tag}-ctl",
        RELAUNCH_EVENTS_TOPIC=f"events-{tag}",
        RELAUNCH_EVENTS_SUBSCRIPTION=f"events-{tag}-ctl",
        RELAUNCH_ALERTS_TOPIC=f"alerts-{tag}",
        RELAUNCH_DEAD_LETTER_TOPIC=f"dead-{tag}",
    )
    try:
        controller.wait_ready("leader")
        job_id = f"intake-{tag}"
        body = request(job_id, bucket, args=["--steps", "3"])
        for data in (body, body, b'{"jobId": "Not A Valid Id"}'):
            publisher.publish(topics["requests"], data).result(timeout=30)

        done = wait_for(
            lambda: (doc := controller.job(job_id)) and doc["phase"] == "succeeded" and doc,
            120,
            what=f"{job_id} succeeded",
        )
        assert done["attempt"] == 1  # the duplicate made no second attempt

        def dead_letter():
            reply = subscriber.pull(subscription=dead_letters, max_messages=5, timeout=10)
            return reply.received_messages or None

        (received,) = wait_for(dead_letter, 60, what="the invalid request on the dead-letter topic")
        assert json.loads(received.message.data) == {"jobId": "Not A Valid Id"}
        assert "jobId" in received.message.attributes["reason"]
    finally:
        controller.stop()
        subscriber.close()
