"""Start `relaunch controller` as a real process against devstack, and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

RELAUNCH = str(Path(sys.executable).with_name("relaunch"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ControllerProcess:
    def __init__(self, env: dict[str, str], log_path: Path, **settings: str):
        self.port = free_port()
        self.log_path = log_path
        full_env = {
            **os.environ,
            **env,
            "PORT": str(self.port),
            "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
            **settings,
        }
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [RELAUNCH, "controller"], env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def get(self, path: str):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as reply:
                body = reply.read()
                return reply.status, (json.loads(body) if path.startswith("/v1") else body.decode())
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def ready(self) -> tuple[bool, str]:
        try:
            status, body = self.get("/readyz")
        except (urllib.error.URLError, ConnectionError, OSError):
            return False, "not listening"
        return status == 200, body

    def wait_ready(self, want: str | None = None, timeout: float = 60.0) -> str:
        def ready_as_wanted() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"controller exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            ok, body = self.ready()
            return body if ok and (want is None or want in body) else None

        try:
            return wait_for(ready_as_wanted, timeout, what=f"controller ready ({want})")
        except TimeoutError as error:
            raise AssertionError(f"{error}:\n{self.logs()[-3000:]}") from None

    def job(self, job_id: str) -> dict | None:
        status, body = self.get(f"/v1/jobs/{job_id}")
        return body if status == 200 else None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
        return self.proc.returncode


def wait_for(check, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)  # polling another process's state over HTTP/gRPC
    raise TimeoutError(f"{what} not reached in {timeout}s")
