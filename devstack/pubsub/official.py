"""Google's own Pub/Sub emulator (`gcloud beta emulators pubsub start`) as a subprocess, so that
devstack's Pub/Sub can be checked against Google's code with the same tests.

    reason = official_emulator_missing()      # None when it can run here
    with OfficialEmulator(data_dir) as official:
        os.environ["PUBSUB_EMULATOR_HOST"] = official.host_port
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import grpc
from google.pubsub_v1 import types as pubsub

# gcloud starts a Java server; on a loaded 2-core machine it has been seen to take 2-10 s.
DEFAULT_START_TIMEOUT_SECONDS = 90.0
_PROBE_RPC_SECONDS = 2.0
_LIST_TOPICS = "/google.pubsub.v1.Publisher/ListTopics"


def official_emulator_missing() -> str | None:
    """Why Google's emulator cannot run on this machine ("gcloud not found", ...), or None."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return "gcloud not found on PATH"
    if shutil.which("java") is None:
        return "java not found on PATH (the emulator needs Java 17+)"
    sdk_root = Path(os.path.realpath(gcloud)).parent.parent
    if not (sdk_root / "platform" / "pubsub-emulator").is_dir():
        return f"the gcloud 'pubsub-emulator' component is not installed under {sdk_root}"
    return None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class OfficialEmulator:
    """A running `gcloud beta emulators pubsub start` on a free port with its own data dir.

    gcloud starts the Java server as a child; both run in their own process group so that
    `stop()` ends exactly them.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        *,
        host: str = "127.0.0.1",
        start_timeout: float = DEFAULT_START_TIMEOUT_SECONDS,
    ):
        missing = official_emulator_missing()
        if missing:
            raise RuntimeError(f"Google's Pub/Sub emulator cannot run here: {missing}")
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "emulator.log"
        port = _free_port(host)
        self.host_port = f"{host}:{port}"
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [
                    "gcloud",
                    "beta",
                    "emulators",
                    "pubsub",
                    "start",
                    f"--host-port={self.host_port}",
                    f"--data-dir={self.data_dir}",
                    "--quiet",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_until_serving(start_timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _wait_until_serving(self, timeout: float) -> None:
        """Ready means a real RPC (ListTopics) answers. Each attempt blocks on the channel with
        its own deadline (wait_for_ready), so nothing sleeps; between attempts the process is
        checked so that a crash is reported at once with its log."""
        give_up = time.monotonic() + timeout
        request = pubsub.ListTopicsRequest(project="projects/readiness-probe")
        with grpc.insecure_channel(self.host_port) as channel:
            list_topics = channel.unary_unary(
                _LIST_TOPICS,
                request_serializer=pubsub.ListTopicsRequest.serialize,
                response_deserializer=pubsub.ListTopicsResponse.deserialize,
            )
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(
                        f"Google's Pub/Sub emulator exited with {self._process.returncode} "
                        f"before serving:\n{self.log_tail()}"
                    )
                left = give_up - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"Google's Pub/Sub emulator did not answer ListTopics on {self.host_port} "
                        f"within {timeout:g}s:\n{self.log_tail()}"
                    )
                try:
                    list_topics(request, timeout=min(_PROBE_RPC_SECONDS, left), wait_for_ready=True)
                    return
                except grpc.RpcError as error:
                    if error.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                        raise

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        if self._process.poll() is not None:
            return
        group = self._process.pid  # start_new_session: the group id is gcloud's pid
        try:
            os.killpg(group, signal.SIGTERM)
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self._process.wait(timeout)
        except ProcessLookupError:
            pass
        # gcloud may exit before its Java child: make sure nothing of the group is left.
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> OfficialEmulator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
