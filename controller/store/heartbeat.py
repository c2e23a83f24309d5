"""The controller's heartbeat: one small document in the state store, rewritten by the leading
controller every few seconds, that whoever reads the store (the CLI, the Python client) uses to
tell "no controller is running" from "the controller has not decided yet". Pub/Sub has no
reply channel, so without it a request sent while no controller runs meets only silence.

Document: {"holder": instance name, "time": epoch seconds of the beat, "everySeconds": period}.
A reader calls it stale after three missed beats plus a margin for clock skew.
"""

from __future__ import annotations

from typing import Any

from controller.store.base import AlreadyExists, StateStore, VersionConflict
from controller.store.keys import HEARTBEAT_KEY

# Clocks of the controller and of a user's laptop differ; a beat this much in the future or the
# past beyond the period is still believed.
SKEW_MARGIN_SECONDS = 5.0


class Heartbeat:
    """Writes the beat at most once per `every_seconds`; cheap to call on every loop turn."""

    def __init__(self, store: StateStore, holder: str, every_seconds: float):
        self._store = store
        self._holder = holder
        self._every = every_seconds
        self._next = 0.0

    def beat(self, now: float, *, fence: int = 0) -> None:
        if now < self._next:
            return
        self._next = now + self._every
        document = {"holder": self._holder, "time": now, "everySeconds": self._every}
        current = self._store.get(HEARTBEAT_KEY)
        try:
            if current is None:
                self._store.create(HEARTBEAT_KEY, document, fence=fence)
            else:
                self._store.put(HEARTBEAT_KEY, document, expected_version=current.version, fence=fence)
        except (AlreadyExists, VersionConflict):
            pass  # another instance beat in between: the store shows a live controller either way


def last_beat(store: StateStore) -> dict[str, Any] | None:
    record = store.get(HEARTBEAT_KEY)
    return record.document if record else None


def is_fresh(beat: dict[str, Any] | None, now: float) -> bool:
    """Whether the beat says a controller was alive within about three of its periods."""
    if not beat or not isinstance(beat.get("time"), int | float):
        return False
    every = float(beat.get("everySeconds") or 10.0)
    return now - float(beat["time"]) <= 3 * every + SKEW_MARGIN_SECONDS
