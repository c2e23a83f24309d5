"""Start `relaunch controller` as a real process against devstack, and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.forked import ForkedProcess

RELAUNCH = str(Path(sys.executable).with_name("relaunch"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ControllerProcess:
    def __init__(self, env: dict[str, str], log_path: Path, *, forked: bool = False, **settings: str):
        """`forked`: start it from a parent that has already imported it (tests/support/forked.py)."""
        self.port = free_port()
        self.log_path = log_path
        full_env = {
            **os.environ,
            **env,
            "PORT": str(self.port),
            "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
            "PYTHONUNBUFFERED": "1",  # every log line on disk before a kill -9 or SIGSTOP
            **settings,
        }
        self._log = open(log_path, "ab")
        self.proc: subprocess.Popen | ForkedProcess
        if forked:
            self.proc = ForkedProcess(["controller"], full_env, log_path)
        else:
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

    def pause(self) -> None:
        """SIGSTOP: the process is frozen mid-whatever, as a long GC pause or a stalled VM."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def log_lines(self) -> list[dict]:
        """The structlog JSON lines this process wrote (other lines skipped)."""
        lines = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    continue
        return lines

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
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


def topic_settings(tag: str) -> dict[str, str]:
    """A unique set of topics, so one test's leftovers never reach another's controller."""
    return {
        "RELAUNCH_REQUESTS_TOPIC": f"requests-{tag}",
        "RELAUNCH_REQUESTS_SUBSCRIPTION": f"requests-{tag}-ctl",
        "RELAUNCH_EVENTS_TOPIC": f"events-{tag}",
        "RELAUNCH_EVENTS_SUBSCRIPTION": f"events-{tag}-ctl",
        "RELAUNCH_ALERTS_TOPIC": f"alerts-{tag}",
        "RELAUNCH_DEAD_LETTER_TOPIC": f"dead-{tag}",
    }


def publish(project: str, topic: str, body: bytes) -> None:
    from google.cloud import pubsub_v1

    pubsub_v1.PublisherClient().publish(f"projects/{project}/topics/{topic}", body).result(timeout=30)


def vertex_jobs_for(devstack, job_id: str, attempt: int | None = None) -> list:
    return [
        j
        for j in devstack.vertex.jobs()
        if j.labels.get("relaunch-job") == job_id
        and (attempt is None or j.labels.get("relaunch-attempt") == str(attempt))
    ]


def cancel_vertex_jobs(devstack, job_ids) -> None:
    """Stop the CustomJobs of these jobs (their replicas are real processes that would run on)."""
    from google.cloud import aiplatform_v1

    for job in devstack.vertex.jobs():
        if job.labels.get("relaunch-job") in job_ids:
            try:
                devstack.vertex.cancel_custom_job(aiplatform_v1.CancelCustomJobRequest(name=job.name))
            except Exception:  # already ended: nothing to stop
                pass
