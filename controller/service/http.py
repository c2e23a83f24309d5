"""The daemon's HTTP server: health probes, metrics, job status and the Pub/Sub push endpoint.

Stdlib `HTTPServer` on a background thread, handing each connection to a bounded pool of worker
threads; when all are busy and the short queue is full, a connection is answered 503 at once. The
controller sits behind the `ControllerApp` protocol: this module knows nothing of jobs.

Push acknowledgement rule: 2xx acknowledges, anything else makes Pub/Sub redeliver. What the
controller has durably recorded (invalid and conflicting requests too, which it dead-letters) is
acknowledged with 204; only infrastructure trouble (state store down) answers 500, and the intake
guard (intake_guard.py) dead-letters a message that keeps failing, so no push gets 500 for ever.
Client input never answers 500: a bad path or job id 404, not a push envelope 400, a bad token 401/403.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from controller import logs
from controller.request.limits import JOB_ID_RE
from controller.request.nesting import nests_too_deeply
from controller.service import status_page
from controller.service.intake import IntakeResult
from controller.service.intake_guard import Delivery
from controller.service.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from controller.service.metrics import Metrics
from controller.service.push_auth import PushAuthError, PushVerifier

PUSH_PATH = "/pubsub/push"
JOBS_PATH = "/v1/jobs"
# A Pub/Sub message is at most 10 MB; base64 and the envelope add about a third.
MAX_PUSH_BODY_BYTES = 16 * 1024 * 1024
# A client that stops sending mid-request must not hold a server thread forever.
SOCKET_TIMEOUT_SECONDS = 60
# An idle keep-alive connection gives its worker back this soon, so a few idle push connections
# cannot hold every worker while a probe waits.
KEEPALIVE_IDLE_SECONDS = 5
DEFAULT_MAX_WORKERS = 16
# How soon serve_forever notices stop(); short so shutdown (and each test) does not wait 0.5 s.
_SHUTDOWN_POLL_SECONDS = 0.05

_log = logs.get("relaunch.http")


class ControllerApp(Protocol):
    """What the HTTP server needs from the controller."""

    def accept_request(
        self, data: bytes, attributes: dict[str, str], delivery: Delivery | None = None
    ) -> IntakeResult:
        """Record one job request; never raises for bad input, may raise for infrastructure."""

    def job_document(self, job_id: str) -> dict | None: ...

    def list_job_documents(self) -> list[dict]: ...

    def is_alive(self) -> bool: ...

    def is_ready(self) -> tuple[bool, str]: ...


class MalformedEnvelope(ValueError):
    """The push body is not a Pub/Sub push envelope."""


def decode_push_envelope(body: bytes) -> tuple[bytes, dict[str, str], Delivery]:
    """(data, attributes, delivery) of a push envelope: {"message": {"data": b64, ...}, ...}.

    A message may carry attributes only (no `data`), so absent data decodes to b"". The
    envelope's `deliveryAttempt` is there only where the subscription has a dead-letter policy.
    """
    if nests_too_deeply(body):
        raise MalformedEnvelope("body is nested too deeply to be a push envelope")
    try:
        envelope = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedEnvelope(f"body is not JSON: {error}") from error
    if not isinstance(envelope, dict) or not isinstance(envelope.get("message"), dict):
        raise MalformedEnvelope("envelope has no message object")
    message = envelope["message"]
    encoded = message.get("data", "")
    if not isinstance(encoded, str):
        raise MalformedEnvelope("message.data is not a string")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MalformedEnvelope(f"message.data is not base64: {error}") from error
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise MalformedEnvelope("message.attributes is not a string map")
    message_id = message.get("messageId") or message.get("message_id")
    attempt = envelope.get("deliveryAttempt")
    attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None
    return data, dict(attributes), Delivery(message_id if isinstance(message_id, str) else None, attempt)


class _Server(HTTPServer):
    def __init__(
        self,
        address,
        app: ControllerApp,
        metrics: Metrics,
        verifier: PushVerifier | None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        keepalive_idle_seconds: float = KEEPALIVE_IDLE_SECONDS,
    ):
        self.app, self.metrics, self.verifier = app, metrics, verifier
        self.keepalive_idle_seconds = keepalive_idle_seconds
        self._workers = ThreadPoolExecutor(max_workers, thread_name_prefix="relaunch-http")
        # Connections being served or waiting for a worker: as many waiting as there are workers.
        self._slots = threading.BoundedSemaphore(2 * max_workers)
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse_busy(request)
            return
        try:
            self._workers.submit(self._serve_one, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._slots.release()
            self.shutdown_request(request)

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def _refuse_busy(self, request: socket.socket) -> None:
        """Answer 503 without reading the request, on the accepting thread (never blocks long)."""
        self.metrics.http_refused.inc()
        body = b"busy: every worker is serving a connection\n"
        try:
            request.settimeout(1.0)
            request.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
        except OSError:
            pass
        self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._workers.shutdown(wait=False, cancel_futures=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive for Pub/Sub's push connections
    timeout = SOCKET_TIMEOUT_SECONDS
    server_version = "relaunch"

    # --- dispatch ------------------------------------------------------------------------------
    def handle_one_request(self) -> None:
        # Waiting for the next request on a kept-alive connection: give the worker back soon.
        self.connection.settimeout(self.server.keepalive_idle_seconds)
        super().handle_one_request()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        self.connection.settimeout(SOCKET_TIMEOUT_SECONDS)  # the request has begun: the full timeout
        path = urlsplit(self.path).path
        self._body_read = False
        try:
            route = self._route(method, path)
            if route is None:
                return
            route()
        except Exception:  # a bug in one request must not take the server down
            _log.exception("request handler failed", method=method, path=path)
            self.close_connection = True
            try:
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})
            except OSError:
                pass  # the client is gone or the response was already started

    def _route(self, method: str, path: str):
        get_routes = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/metrics": self._metrics,
            JOBS_PATH: self._list_jobs,
        }
        if method == "GET" and status_page.handles(path):  # read-only HTML: status_page.py
            return lambda: self._send(*status_page.response(path, self.server.app))
        if path in get_routes or path.startswith(JOBS_PATH + "/"):
            if method != "GET":
                return self._not_allowed("GET")
            if path.startswith(JOBS_PATH + "/"):
                return lambda: self._get_job(unquote(path[len(JOBS_PATH) + 1 :]))
            return get_routes[path]
        if path == PUSH_PATH and self.server.verifier is not None:
            return self._push if method == "POST" else self._not_allowed("POST")
        self._json(HTTPStatus.NOT_FOUND, {"error": f"no route for {path}"})
        return None

    def _not_allowed(self, allowed: str):
        return lambda: self._json(
            HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"use {allowed}"}, extra_headers={"Allow": allowed}
        )

    # --- routes --------------------------------------------------------------------------------
    def _healthz(self) -> None:
        try:
            alive = bool(self.server.app.is_alive())
        except Exception as error:  # a controller that cannot answer is not alive
            _log.error("liveness check raised", error=repr(error))
            alive = False
        self._text(HTTPStatus.OK if alive else HTTPStatus.SERVICE_UNAVAILABLE, "ok" if alive else "not alive")

    def _readyz(self) -> None:
        try:
            ready, why = self.server.app.is_ready()
        except Exception as error:
            ready, why = False, f"readiness check raised {error!r}"
        if ready:
            self._text(HTTPStatus.OK, f"ready: {why}")
        else:
            self._text(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {why}")

    def _metrics(self) -> None:
        self._send(HTTPStatus.OK, self.server.metrics.render(), METRICS_CONTENT_TYPE)

    def _list_jobs(self) -> None:
        self._json(HTTPStatus.OK, self.server.app.list_job_documents())

    def _get_job(self, job_id: str) -> None:
        if not JOB_ID_RE.fullmatch(job_id):
            self._json(HTTPStatus.NOT_FOUND, {"error": "not a valid job id", "jobId": job_id[:100]})
            return
        document = self.server.app.job_document(job_id)
        if document is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "job not found", "jobId": job_id})
        else:
            self._json(HTTPStatus.OK, document)

    def _push(self) -> None:
        assert self.server.verifier is not None  # routed here only when push is enabled
        try:
            self.server.verifier.verify(self.headers.get("Authorization"))
        except PushAuthError as refusal:
            _log.warning(
                "push refused", status=refusal.status, reason=refusal.reason, client=self.client_address[0]
            )
            self._json(refusal.status, {"error": refusal.reason})
            return
        try:
            data, attributes, delivery = decode_push_envelope(self._read_body())
        except MalformedEnvelope as error:
            _log.warning("malformed push envelope", reason=str(error))
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            return
        try:
            result = self.server.app.accept_request(data, attributes, delivery)
        except Exception:
            # Nothing was recorded: answer non-2xx so Pub/Sub delivers the request again.
            _log.exception("request intake failed; push not acknowledged", message_id=delivery.message_id)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "request intake failed"})
            return
        level = _log.info if result.status in ("accepted", "duplicate", "cancel") else _log.warning
        level(
            "push request handled",
            job_id=result.job_id,
            outcome=result.status,
            reason=result.reason,
            message_id=delivery.message_id,
        )
        self._send(HTTPStatus.NO_CONTENT, b"", None)

    def _read_body(self) -> bytes:
        length_header = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or length_header is None:
            self.close_connection = True
            raise MalformedEnvelope("push body needs a Content-Length")
        try:
            length = int(length_header)
        except ValueError:
            self.close_connection = True
            raise MalformedEnvelope("bad Content-Length") from None
        if not 0 <= length <= MAX_PUSH_BODY_BYTES:
            self.close_connection = True
            raise MalformedEnvelope(f"push body of {length} bytes is out of bounds")
        body = self.rfile.read(length)
        self._body_read = True
        return body

    # --- responses -----------------------------------------------------------------------------
    def _json(self, status: int, document: Any, extra_headers: dict[str, str] | None = None) -> None:
        body = json.dumps(document, default=str, separators=(",", ":")).encode()
        self._send(status, body, "application/json", extra_headers)

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode() + b"\n", "text/plain; charset=utf-8")

    def _send(
        self, status: int, body: bytes, content_type: str | None, extra_headers: dict[str, str] | None = None
    ) -> None:
        if self.command == "POST" and not self._body_read:
            # An unread body would be parsed as the next request: end the connection instead.
            self.close_connection = True
        self.send_response(status)
        if content_type and status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Type", content_type)
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if status != HTTPStatus.NO_CONTENT:
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        # Access lines at debug: probes every few seconds would drown the job logs.
        _log.debug("http request", line=format % args, client=self.client_address[0])


class HttpServer:
    """The running server: `start()` serves on a daemon thread, `stop()` closes the socket."""

    def __init__(self, server: _Server):
        self._server = server
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def start(self) -> HttpServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                args=(_SHUTDOWN_POLL_SECONDS,),
                name="relaunch-http",
                daemon=True,
            )
            self._thread.start()
            _log.info(
                "http server listening",
                host=self.host,
                port=self.port,
                push_enabled=self._server.verifier is not None,
            )
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def make_server(
    host: str,
    port: int,
    app: ControllerApp,
    metrics: Metrics,
    verifier: PushVerifier | None,
    *,
    max_workers: int = DEFAULT_MAX_WORKERS,
    keepalive_idle_seconds: float = KEEPALIVE_IDLE_SECONDS,
) -> HttpServer:
    """Bind (port 0 = any free port) without serving yet; `verifier=None` disables push (404)."""
    return HttpServer(_Server((host, port), app, metrics, verifier, max_workers, keepalive_idle_seconds))
