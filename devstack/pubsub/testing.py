"""Helpers for tests that run against the Pub/Sub stand-in (no pytest dependency)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from devstack.pubsub.server import PubSubEmulator, start_pubsub


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    """Poll `predicate` until it returns something truthy (returned) or fail after `timeout` s."""
    give_up = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= give_up:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def running_emulator(**options) -> Iterator[PubSubEmulator]:
    """Start an emulator on a free port with PUBSUB_EMULATOR_HOST pointing at it; restore the
    variable and stop the emulator afterwards."""
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    with start_pubsub(**options) as emulator:
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host_port
        try:
            yield emulator
        finally:
            if previous is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = previous
