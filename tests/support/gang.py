"""Harness for trainer tests: start `python -m trainer` node processes, follow their JSON logs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

# Small enough for 2 shared CPU cores; large enough to cross an epoch boundary (183 samples).
TINY = ["--batch-size", "4", "--lr", "3e-3", "--seed", "1234", "--log-every", "1", "--grace-seconds", "20"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node:
    """One launcher process; its stdout lines are collected by a thread and can be awaited."""

    def __init__(self, args: list[str], env: dict[str, str], name: str):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainer", *args],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def records(self) -> list[dict]:
        out = []
        for line in list(self.lines):
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def find(self, message: str) -> list[dict]:
        return [r for r in self.records() if r.get("message") == message]

    def wait_for(self, message: str, timeout: float = 120, **fields) -> dict:
        """The first log record with this message (and fields), waiting up to `timeout` seconds."""

        def match():
            for rec in self.records():
                if rec.get("message") == message and all(rec.get(k) == v for k, v in fields.items()):
                    return rec
            return None

        with self._changed:
            found = self._changed.wait_for(
                lambda: match() or self.proc.poll() is not None and not self._reader.is_alive(),
                timeout=timeout,
            )
        rec = match()
        if rec is None:
            raise AssertionError(
                f"{self.name}: no {message!r} {fields} within {timeout}s "
                f"(found={found}); output:\n" + self.output()
            )
        return rec

    def wait(self, timeout: float = 180) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as error:
            self.kill_tree()
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s; output:\n" + self.output()
            ) from error
        self._reader.join(timeout=10)
        return code

    def output(self) -> str:
        return "\n".join(self.lines[-80:])

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill_tree(self) -> None:
        """SIGKILL the launcher and every worker it started, like a VM vanishing."""
        try:
            family = [psutil.Process(self.proc.pid)] + psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for proc in family:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(family, timeout=30)


def base_env(
    tmp_path: Path, attempt: int, checkpoint_uri: str | None, extra: dict | None = None
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RELAUNCH_", "MASTER_", "CLUSTER_SPEC", "NODE_RANK", "NNODES", "WORLD_SIZE"))
    }
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "DS_ACCELERATOR": "cpu",
            "RELAUNCH_JOB_ID": "test-job",
            "RELAUNCH_ATTEMPT": str(attempt),
            "TMPDIR": str(tmp_path),
        }
    )
    if checkpoint_uri:
        env["RELAUNCH_CHECKPOINT_URI"] = checkpoint_uri
    env.update(extra or {})
    return env


class Gang:
    """All nodes of one attempt, each a `python -m trainer` with torchrun-style variables."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes

    @property
    def chief(self) -> Node:
        return self.nodes[0]

    def terminate(self) -> None:
        for node in self.nodes:
            node.terminate()

    def wait(self, timeout: float = 180) -> list[int]:
        return [node.wait(timeout) for node in self.nodes]

    def kill(self) -> None:
        for node in self.nodes:
            node.kill_tree()
