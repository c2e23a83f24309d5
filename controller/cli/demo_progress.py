"""What `relaunch demo` prints while it waits, so that it is never silent for long: a heartbeat
naming what it waits for (with the reason the controller gives, where it gives one), and the
trainer's own progress read from the chief replica's log (workers starting, resumed, steps, loss,
commits)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

QUIET_SECONDS = 5.0  # the heartbeat speaks after this long without a line


class Narrator:
    """Progress lines with the time since the demo started; a heartbeat thread prints what the
    demo is waiting for whenever nothing was printed for QUIET_SECONDS."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.t0 = time.monotonic()
        # Looked up now, not when this module was imported: the stream may have been replaced
        # since (a test capturing output, a caller redirecting it).
        self.out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._last = self.t0
        self._activity: Callable[[], str] | None = None
        self._since = self.t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        with self._lock:
            now = time.monotonic()
            print(f"[{now - self.t0:6.1f}s] {text}", file=self.out, flush=True)
            self._last = now

    def waiting_for(self, activity: str | Callable[[], str] | None) -> None:
        """What the heartbeat names from now on (None: nothing to say)."""
        with self._lock:
            self._activity = (lambda: activity) if isinstance(activity, str) else activity
            self._since = time.monotonic()
        if self._thread is None and activity is not None:
            self._thread = threading.Thread(target=self._beat, name="demo-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                activity, quiet = self._activity, time.monotonic() - self._last
                waited = time.monotonic() - self._since
            if activity is None or quiet < QUIET_SECONDS:
                continue
            try:
                text = activity()
            except Exception as error:  # the heartbeat must never end the demo
                text = f"(progress unavailable: {error})"
            self.say(f"  ... {text} ({waited:.0f}s)")


class ChiefLog:
    """The trainer's JSON records from one replica's log, as they are appended."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def new_records(self) -> list[dict]:
        try:
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        records = []
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records


def describe(record: dict, steps: int | None) -> str | None:
    """One progress line for a trainer record worth showing; None for the others."""
    message = record.get("message")
    of = f"/{steps}" if steps else ""
    if message == "launching workers":
        return (
            f"chief replica up: starting {record.get('nproc_per_node')} worker process(es) per node "
            f"on {record.get('nodes')} node(s) (importing torch, joining the gloo group)"
        )
    if message == "starting fresh":
        return f"training started from scratch (world size {record.get('world_size')})"
    if message == "resumed":
        return f"training resumed from step {record.get('from_step')} (world size {record.get('world_size')})"
    if message == "train":
        return f"step {record.get('step')}{of}, loss {float(record.get('loss', 0)):.3f}"
    if message == "checkpoint committed":
        return f"checkpoint at step {record.get('step')} committed"
    if message == "training completed":
        return f"training completed at step {record.get('step')}"
    if message == "launcher got a termination signal; workers were told to stop":
        return "SIGTERM received: saving an emergency checkpoint"
    return None
