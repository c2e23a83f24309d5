"""How `submit --wait` and `wait` show a job's progress: one live line on a terminal, plain
lines (one per change, with a UTC time) when the output is piped or redirected."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from controller.cli import common as view
from controller.readmodel.printable import printable


def describe(status: dict) -> str:
    step = status["latestCheckpointStep"]
    checkpoint = "no checkpoint yet" if step is None else f"checkpoint step {step}"
    return f"{printable(status['jobId'])}: {status['phase']}, attempt {status['attempt']}, {checkpoint}"


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self._attempt = None
        self._started = time.monotonic()
        self._open = False  # a live line is on screen, without its newline yet

    def __call__(self, status: dict) -> None:
        if not self.live:
            print(f"{view.utc(time.time())} UTC  {describe(status)}", file=self.stream, flush=True)
            return
        if self._open and status["attempt"] != self._attempt:
            self.stream.write("\n")  # keep each attempt's last line on screen
        self._attempt = status["attempt"]
        elapsed = int(time.monotonic() - self._started)
        self.stream.write(f"\r\x1b[K{describe(status)}  [{elapsed // 60}m{elapsed % 60:02d}s]")
        self.stream.flush()
        self._open = True

    def note(self, text: str) -> None:
        self.done()
        print(text, file=self.stream, flush=True)

    def done(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
