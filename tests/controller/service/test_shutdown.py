"""Shutdown fits Cloud Run's 10 s (issue 12, finding 8): SIGTERM is followed by SIGKILL 10 s later,
so draining the subscriptions must not hold the leader lease hostage. A stream that never drains
used to cost 10 s per stream before the lease was released; now the whole shutdown stays within
`RELAUNCH_SHUTDOWN_SECONDS` and the lease is released in time, so a successor takes over at once.

The controller runs in this process on devstack (real Pub/Sub, GCS lease and store); the stuck
stream is the controller's own stream object replaced by one whose drain never finishes.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import TimeoutError as FutureTimeout

from controller.adapters.lease import Lease
from controller.service.daemon import Controller
from controller.settings import Settings
from tests.support.daemon import free_port, wait_for
from tests.support.engine import PROJECT, REGION


class StreamThatNeverDrains:
    """In-flight callbacks that never finish: `result` runs out its whole timeout."""

    def __init__(self) -> None:
        self.never = threading.Event()
        self.problem = None
        self.name = "stuck"

    def cancel(self) -> None:
        pass

    def check(self) -> None:
        return None

    def result(self, timeout: float | None = None) -> None:
        self.never.wait(timeout)
        raise FutureTimeout()


def test_shutdown_releases_the_lease_within_its_budget_even_when_a_stream_never_drains(devstack, bucket):
    tag = uuid.uuid4().hex[:6]
    settings = Settings(
        project=PROJECT,
        region=REGION,
        vertex_endpoint=devstack.vertex.host_port,
        state_store=f"gs://{bucket}/state",
        port=free_port(),
        lease_seconds=30,  # long: a successor can only take over at once if the lease is released
        lease_renew_seconds=1,
        shutdown_seconds=4,
        create_subscriptions=True,
        requests_topic=f"requests-{tag}",
        requests_subscription=f"requests-{tag}-ctl",
        events_topic=f"events-{tag}",
        events_subscription=f"events-{tag}-ctl",
        alerts_topic=f"alerts-{tag}",
        dead_letter_topic=f"dead-{tag}",
    )
    controller = Controller(settings)
    thread = threading.Thread(target=controller.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    wait_for(lambda: controller.is_ready() == (True, "leader"), 60, what="the controller leads")
    controller._streams["stuck"] = StreamThatNeverDrains()

    asked = time.monotonic()
    controller.stop()
    thread.join(timeout=60)
    took = time.monotonic() - asked
    assert not thread.is_alive()
    assert took <= settings.shutdown_seconds + 2.0, f"shutdown took {took:.1f}s"

    successor = Lease(bucket, "state", "successor", 30)
    assert successor.try_acquire(), "the lease was not released: the successor would wait it out"
