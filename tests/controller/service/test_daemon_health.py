"""The daemon's health means something (issue 12, findings 1 and 2): readiness says when a
subscription stream is not delivering and recovers when it is back, `controller_degraded` fires once
and resolves, liveness fails while the control loop is wedged, and unreadable events are acked and
counted instead of redelivered for ever.

The controller runs in this process (its loop on a thread) against devstack, so the test can wedge
its loop and move its clock; Pub/Sub, the store and Vertex are the real clients on devstack.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest
import requests
from google.cloud import pubsub_v1

from controller.service.daemon import Controller
from controller.settings import Settings
from tests.support.daemon import free_port, wait_for
from tests.support.engine import PROJECT, REGION, read_alerts
from tests.support.engine import request as job_request


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@pytest.fixture
def names(devstack):
    tag = uuid.uuid4().hex[:6]
    return {
        "requests_topic": f"requests-{tag}",
        "requests_subscription": f"requests-{tag}-ctl",
        "events_topic": f"events-{tag}",
        "events_subscription": f"events-{tag}-ctl",
        "alerts_topic": f"alerts-{tag}",
        "dead_letter_topic": f"dead-{tag}",
    }


@pytest.fixture
def run_controller(devstack, tmp_path):
    started: list[tuple[Controller, threading.Thread]] = []

    def start(clock=None, prepare=lambda controller: None, **overrides) -> Controller:
        settings = Settings(
            project=PROJECT,
            region=REGION,
            vertex_endpoint=devstack.vertex.host_port,
            state_store=f"sqlite:///{tmp_path}/state-{len(started)}.db",
            port=free_port(),
            **overrides,
        )
        controller = Controller(settings, **({"clock": clock} if clock else {}))
        prepare(controller)
        thread = threading.Thread(
            target=controller.run, kwargs={"install_signal_handlers": False}, daemon=True
        )
        thread.start()
        started.append((controller, thread))
        return controller

    yield start
    for controller, thread in started:
        controller.stop()
        thread.join(timeout=60)


def get(controller: Controller, path: str) -> requests.Response | None:
    try:
        return requests.get(f"http://127.0.0.1:{controller.settings.port}{path}", timeout=5)
    except requests.ConnectionError:
        return None  # not listening yet


def answer_of(controller: Controller, path: str) -> tuple[int, str]:
    reply = get(controller, path)
    return (reply.status_code, reply.text) if reply is not None else (0, "")


def test_a_missing_requests_subscription_makes_readiness_false_and_is_picked_up_once_created(
    devstack, bucket, names, run_controller
):
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    settings = Settings(project=PROJECT, **names)
    for topic in ("requests_topic", "events_topic", "alerts_topic", "dead_letter_topic"):
        publisher.create_topic(name=settings.topic_path(names[topic]))
    subscriber.create_subscription(
        name=settings.subscription_path(names["events_subscription"]),
        topic=settings.topic_path(names["events_topic"]),
    )
    alerts = settings.subscription_path(names["alerts_topic"] + "-read")
    subscriber.create_subscription(name=alerts, topic=settings.topic_path(names["alerts_topic"]))

    controller = run_controller(stream_retry_max_seconds=1, **names)  # the requests subscription is missing
    status, text = wait_for(
        lambda: (a := answer_of(controller, "/readyz"))[0] == 503 and a, what="readiness false"
    )
    assert "requests: subscription" in text and "not found" in text
    firing = read_alerts(alerts, want=1)
    assert [(a["kind"], a["state"]) for a in firing] == [("controller_degraded", "firing")]
    assert names["requests_subscription"] in firing[0]["summary"]

    subscriber.create_subscription(
        name=settings.subscription_path(names["requests_subscription"]),
        topic=settings.topic_path(names["requests_topic"]),
    )
    wait_for(lambda: answer_of(controller, "/readyz") == (200, "ready: leader\n"), what="ready again")
    resolved = read_alerts(alerts, want=1)
    assert [(a["kind"], a["state"]) for a in resolved] == [("controller_degraded", "resolved")]

    # And it really delivers: a request published now is accepted.
    publisher.publish(
        settings.topic_path(names["requests_topic"]),
        job_request("after-recreate", bucket, args=["--steps", "1"]),
    ).result(timeout=30)
    wait_for(lambda: answer_of(controller, "/v1/jobs/after-recreate")[0] == 200, what="request accepted")


def test_liveness_fails_while_the_control_loop_is_wedged_and_recovers_after(devstack, names, run_controller):
    clock = FakeClock()
    wedge, entered, release = threading.Event(), threading.Event(), threading.Event()
    reconciled = threading.Event()

    def wedge_reconcile_on_demand(controller: Controller) -> None:
        one_pass = controller.sources._pass  # the periodic pass, as a queue worker runs it

        def pass_or_hang(period: float) -> None:
            if wedge.is_set():
                entered.set()
                release.wait(120)
            one_pass(period)
            reconciled.set()

        controller.sources._pass = pass_or_hang

    controller = run_controller(
        clock=clock,
        prepare=wedge_reconcile_on_demand,
        create_subscriptions=True,
        reconcile_seconds=50,
        loop_stall_seconds=100,
        **names,
    )
    wait_for(lambda: answer_of(controller, "/healthz") == (200, "ok\n"), what="alive")
    assert reconciled.wait(120), "the first reconcile pass never finished"

    wedge.set()
    clock.advance(51)  # the next pass is due: a queue worker enters it and hangs
    assert entered.wait(120), "no worker entered the due pass"
    clock.advance(101)
    assert answer_of(controller, "/healthz")[0] == 503

    wedge.clear()
    release.set()
    wait_for(lambda: answer_of(controller, "/healthz") == (200, "ok\n"), what="alive again")


def unreadable_hints(controller: Controller) -> float:
    reply = get(controller, "/metrics")
    for line in reply.text.splitlines() if reply is not None else []:
        if line.startswith("relaunch_unreadable_hints_total "):
            return float(line.split()[1])
    return 0.0


def test_unreadable_events_are_acked_and_counted_not_redelivered(devstack, names, run_controller):
    controller = run_controller(create_subscriptions=True, **names)
    wait_for(lambda: answer_of(controller, "/readyz")[0] == 200, what="ready")
    publisher = pubsub_v1.PublisherClient()
    topic = controller.settings.topic_path(names["events_topic"])
    poison = [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe not json", json.dumps([1, 2]).encode()]
    for data in poison:
        publisher.publish(topic, data).result(timeout=30)
    wait_for(lambda: unreadable_hints(controller) >= 3, what="three unreadable hints counted")
    assert answer_of(controller, "/readyz")[0] == 200
