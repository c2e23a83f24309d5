"""A GCS stand-in with one bucket, reached through the real storage client (for test fixtures)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from devstack.gcs import start_gcs


@contextlib.contextmanager
def gcs_client_with_bucket(bucket: str) -> Iterator[storage.Client]:
    """Start a fresh GCS stand-in, point STORAGE_EMULATOR_HOST at it, create `bucket`."""
    with start_gcs() as emulator, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        client = storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())
        client.create_bucket(bucket)
        yield client


class FlakyProxy:
    """An HTTP proxy in front of the stand-in that can answer 503 to the next few object
    requests, either instead of forwarding them or after forwarding them (a reply lost on the
    way back), or alter the last byte of the next object reply's body (bytes damaged on the way,
    headers as the stand-in sent them). Bucket requests (the client library's own background metadata lookups) pass
    through untouched and unrecorded, so they cannot eat a planned fault."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.requests: list[tuple[str, int]] = []  # (method, status the client saw)
        self._faults: list[bool] = []  # True = forward, then fail anyway
        self._corrupt = 0  # object replies still to damage
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                about_objects = "/o" in self.path.split("?", 1)[0]
                with proxy._lock:
                    fault = proxy._faults.pop(0) if proxy._faults and about_objects else None
                status, headers, content = 503, {}, b'{"error": {"code": 503}}'
                if fault is None or fault:
                    reply = requests.request(
                        self.command,
                        proxy.upstream + self.path,
                        data=body,
                        timeout=10,
                        headers={k: v for k, v in self.headers.items() if k.lower() != "host"},
                    )
                    if fault is None:
                        status, content = reply.status_code, reply.content
                        with proxy._lock:
                            damage = bool(content) and proxy._corrupt > 0 and about_objects
                            proxy._corrupt -= damage
                        if damage:
                            content = content[:-1] + bytes([content[-1] ^ 1])
                        headers = {
                            k: v
                            for k, v in reply.headers.items()
                            if k.lower()
                            not in ("content-length", "transfer-encoding", "connection", "content-encoding")
                        }
                if about_objects:
                    with proxy._lock:
                        proxy.requests.append((self.command, status))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def fail_next(self, count: int, *, after_forwarding: bool = False) -> None:
        with self._lock:
            self._faults.extend([after_forwarding] * count)

    def corrupt_next(self, count: int = 1) -> None:
        with self._lock:
            self._corrupt += count

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
