"""Start `relaunch controller` processes by forking a parent that has already imported it.

A controller spends most of its start-up importing its libraries (several CPU-seconds on this
machine). A fault run that kills a controller every second or two would spend nearly all its CPU
on imports, so `bench/fault_run.py --fork` starts each controller from Python's forkserver with
the controller's modules preloaded: the child is still a separate process that runs the same
`relaunch controller` code from its own `main()`, takes its own lease, opens its own gRPC channels
(none exist in the parent: it only imports), and dies of SIGKILL or freezes under SIGSTOP exactly
like a spawned one. Only its import cost is paid once.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

PRELOAD = ["controller.cli.main", "controller.service.daemon"]

_lock = threading.Lock()
_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    with _lock:  # the fault run starts controllers from one thread; this only guards the first
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _context = context
        return _context


def _child(env: dict[str, str], log_path: str, argv: list[str]) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # Line-buffered and written through: every line is on disk before a kill -9 or SIGSTOP,
    # as PYTHONUNBUFFERED gives a spawned controller.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True)
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from controller.cli.main import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ForkedProcess:
    """The part of `subprocess.Popen` that ControllerProcess uses, for a forkserver child."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path):
        self._process = _forkserver().Process(target=_child, args=(env, str(log_path), argv), daemon=False)
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["relaunch", "controller"], timeout or 0.0)
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
