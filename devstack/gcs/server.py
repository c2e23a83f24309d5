"""The HTTP server: gcp-storage-emulator's route table and request parsing, served by a
threading server, with our object handlers in place of the library's where it falls short
(preconditions, streaming, generations) and errors mapped to GCS status codes."""

from __future__ import annotations

import logging
import re
import socket
import sys
import threading
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gcp_storage_emulator import server as lib_server
from gcp_storage_emulator.exceptions import BadRequest, Conflict, NotFound
from gcp_storage_emulator.handlers import buckets as lib_buckets
from gcp_storage_emulator.handlers import objects as lib_objects

from devstack.calls import CallLog
from devstack.gcs import objects, replies, uploads
from devstack.gcs.preconditions import InvalidPrecondition, PreconditionFailed
from devstack.gcs.storage import GcsStorage

log = logging.getLogger(__name__)

_PIECE = 1 << 20  # bytes moved per read/write when streaming bodies


class Request(lib_server.Request):
    """The library's request, plus streaming access to the body."""

    def __init__(self, handler, method):
        super().__init__(handler, method)
        self._body_read = False  # set once the body has been taken off the socket

    @property
    def data(self):
        if self._body_read and self._data is lib_server._UNSET:
            return None  # streamed away by iter_body()
        self._body_read = True
        return super().data

    def iter_body(self):
        """Yield the request body in pieces without holding it all."""
        if self._body_read:
            return
        self._body_read = True
        rfile = self._request_handler.rfile
        length = self.get_header("Content-Length")
        if length is not None:
            remaining = int(length)
            while remaining > 0:
                piece = rfile.read(min(_PIECE, remaining))
                if not piece:
                    raise ConnectionError("client closed the connection mid-body")
                remaining -= len(piece)
                yield piece
        elif (self.get_header("Transfer-Encoding") or "").lower() == "chunked":
            while True:
                size = int(rfile.readline().strip() or b"0", 16)
                if size == 0:
                    rfile.readline()
                    return
                yield rfile.read(size)
                rfile.readline()

    def drain(self):
        for _ in self.iter_body():
            pass


def _with_media_link(resource: dict, base_url: str) -> dict:
    # Stored resources carry no host: a restarted server listens on another port, and
    # clients download from mediaLink verbatim.
    name = urllib.parse.quote(resource["name"], safe="")
    link = (
        f"{base_url}/download/storage/v1/b/{resource['bucket']}/o/{name}"
        f"?generation={resource['generation']}&alt=media"
    )
    return {**resource, "mediaLink": link}


class Response(lib_server.Response):
    """The library's response, plus a streamed body from a file object, and object
    resources whose mediaLink points at this server."""

    _blob = None

    def __init__(self, handler, base_url: str):
        super().__init__(handler)
        self._base_url = base_url

    def json(self, obj):
        if isinstance(obj, dict):
            if obj.get("kind") == "storage#object":
                obj = _with_media_link(obj, self._base_url)
            elif isinstance(obj.get("items"), list) and obj.get("kind") == "storage#objects":
                obj = {**obj, "items": [_with_media_link(o, self._base_url) for o in obj["items"]]}
            elif isinstance(obj.get("resource"), dict):  # rewrite replies
                obj = {**obj, "resource": _with_media_link(obj["resource"], self._base_url)}
        super().json(obj)

    def stream(self, blob, start: int, length: int, content_type: str):
        self["Content-Type"] = content_type
        self._blob, self._start, self._length = blob, start, length

    def close(self):
        if self._blob is None:
            return super().close()
        handler = self._handler
        with self._blob as blob:
            handler.send_response(self.status.value, self.status.phrase)
            for key, value in self._headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(self._length))
            handler.end_headers()
            blob.seek(self._start)
            remaining = self._length
            while remaining > 0:
                piece = blob.read(min(_PIECE, remaining))
                if not piece:
                    break
                handler.wfile.write(piece)
                remaining -= len(piece)


class Disturbances:
    """Fault injection: a whole-service outage (every request answers 503, as GCS does while it
    is unavailable) and per-bucket refusals (e.g. 403 for a bucket the caller may not read;
    the stand-in has no IAM, so this knob stands in for a missing role)."""

    _BUCKET_IN_PATH = re.compile(r"/b/([^/]+)")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outage = False
        self._refused: dict[str, HTTPStatus] = {}

    def set_outage(self, down: bool) -> None:
        with self._lock:
            self.outage = bool(down)

    def refuse_bucket(self, bucket: str, status: int | None) -> None:
        with self._lock:
            if status is None:
                self._refused.pop(bucket, None)
            else:
                self._refused[bucket] = HTTPStatus(int(status))

    def refusal(self, path: str) -> HTTPStatus | None:
        with self._lock:
            if self.outage:
                return HTTPStatus.SERVICE_UNAVAILABLE
            match = self._BUCKET_IN_PATH.search(path)
            return self._refused.get(match.group(1)) if match else None


@dataclass
class Backend:
    storage: GcsStorage
    sessions: uploads.UploadSessions = field(default_factory=uploads.UploadSessions)
    disturbances: Disturbances = field(default_factory=Disturbances)
    calls: CallLog = field(default_factory=CallLog)


# Library handlers replaced by ours; these take (request, response, backend).
_OURS = {
    lib_objects.insert: uploads.insert,
    lib_objects.upload_partial: uploads.upload_chunk,
    lib_objects.get: objects.get,
    lib_objects.download: objects.download,
    lib_objects.patch: objects.patch,
    lib_objects.delete: objects.delete,
    lib_objects.ls: objects.list_objects,
}


def _route(handler):
    if handler in _OURS:
        return _OURS[handler]

    def reused(request, response, backend):
        storage = backend.storage
        if handler.__module__ == lib_buckets.__name__:
            _ = request.data  # read the body before taking the lock: a slow client must not block all
            with storage.lock:
                return handler(request, response, storage)
        return handler(request, response, storage)  # GcsStorage's methods lock themselves

    return reused


_ROUTES = [
    (re.compile(regex), {method: _route(fn) for method, fn in methods.items()})
    for regex, methods in lib_server.HANDLERS
]


_OBJECTS = re.compile(r"/b/[^/]+/o/?$")
_OBJECT = re.compile(r"/b/[^/]+/o/.+")


def _call_kind(request: Request) -> str:
    """What a request is, coarsely, for counting: e.g. ``GET list``, ``GET download``, ``POST upload``."""
    path = request.path
    if path.startswith("/upload/"):
        return f"{request.method} upload"
    if path.startswith("/download/") or request.query.get("alt") == ["media"]:
        return f"{request.method} download"
    if _OBJECTS.search(path):
        return f"{request.method} list" if request.method == "GET" else f"{request.method} objects"
    if _OBJECT.search(path):
        return f"{request.method} object"
    return f"{request.method} other"


def dispatch(request: Request, response: Response, backend: Backend) -> None:
    prefix = request.query.get("prefix", [""])[0]
    detail = urllib.parse.unquote(request.path) + (f"?prefix={prefix}" if prefix else "")
    backend.calls.record(_call_kind(request), detail)
    refusal = backend.disturbances.refusal(request.path)
    if refusal is not None:
        reason = "backendError" if refusal >= 500 else "forbidden" if refusal == 403 else "refused"
        replies.error(response, refusal, reason, f"fault injection: {refusal.phrase}")
        return
    for pattern, methods in _ROUTES:
        match = pattern.fullmatch(request.path)
        if not match:
            continue
        request.set_match(match)
        handler = methods.get(request.method)
        if handler is None and request.method == "POST" and request.query.get("uploadType"):
            handler = uploads.insert  # some clients POST uploads without the /upload prefix
        if handler is None:
            break
        try:
            handler(request, response, backend)
        except NotFound as err:
            replies.not_found(response, str(err) or "Not Found")
        except PreconditionFailed:
            replies.precondition_failed(response)
        except (InvalidPrecondition, BadRequest, Conflict) as err:
            replies.bad_request(response, str(err))
        except Exception as err:  # the client should see a 500, not a dropped connection
            log.exception("GCS stand-in failed on %s %s", request.method, request.path)
            replies.error(response, HTTPStatus.INTERNAL_SERVER_ERROR, "backendError", repr(err))
        return
    replies.error(
        response,
        HTTPStatus.NOT_IMPLEMENTED,
        "notImplemented",
        f"{request.method} {request.path} is not emulated",
    )


class _RequestHandler(BaseHTTPRequestHandler):
    backend: Backend  # set on the subclass made per server
    # Persistent connections, as Cloud Storage keeps them: a client's pooled connection serves
    # call after call (every reply carries its Content-Length). Without Nagle's algorithm, as the
    # reply's headers and body go out in two writes and would wait for the client's delayed ACK.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _handle(self):
        method = self.headers.get("X-HTTP-Method-Override") or self.command
        request = Request(self, method)
        response = Response(self, request.base_url)
        dispatch(request, response, self.backend)
        request.drain()  # unread bytes would be taken for the connection's next request
        response.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format, *args):
        log.debug(format, *args)


class _ThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections: set = set()  # open client connections (each served by its thread)
        self.connections_accepted = 0  # ever (only the serving thread counts)

    def get_request(self):
        connection, address = super().get_request()
        self.connections.add(connection)
        self.connections_accepted += 1
        return connection, address

    def shutdown_request(self, request):
        self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-connection (killed, or closing a kept connection) is
        routine, as it is for the service; anything else is still printed."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            log.debug("client %s went away", client_address)
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """End every open connection, so that no client goes on talking to a stopped server."""
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed by its client meanwhile


class GcsEmulator:
    """A running GCS stand-in. Use start_gcs() to make one."""

    def __init__(self, host: str, port: int, data_dir: str | None):
        self.storage = GcsStorage(data_dir)
        self.disturbances = Disturbances()
        self.calls = CallLog()  # every request served, by kind (devstack.calls)
        backend = Backend(self.storage, disturbances=self.disturbances, calls=self.calls)
        handler = type("Handler", (_RequestHandler,), {"backend": backend})
        self._server = _ThreadingServer((host, port), handler)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"gcs-stand-in:{self.port}", daemon=True
        )
        self._thread.start()

    @property
    def connections_accepted(self) -> int:
        """How many connections clients have opened to this stand-in so far."""
        return self._server.connections_accepted

    @property
    def connections_open(self) -> int:
        """How many client connections are open now (each ends when its serving thread is done)."""
        return len(self._server.connections)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        self._thread.join(timeout=10)

    def __enter__(self) -> GcsEmulator:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
