"""Object uploads: media, multipart and resumable (JSON API), all conditional.

Resumable sessions stream each chunk straight into an upload buffer (see blobs.py); the
library's version re-reads and rewrites the whole partial object for every chunk, which is
quadratic and holds several copies of a checkpoint shard in memory. Preconditions are checked
when a session starts (fail fast) and again, atomically, when the last byte arrives.
"""

from __future__ import annotations

import secrets
import threading
import urllib.parse
from dataclasses import dataclass, field

from gcp_storage_emulator.exceptions import Conflict
from gcp_storage_emulator.handlers.objects import (
    GoogleHTTPStatus,
    _checksums,
    _make_object_resource,
    _parse_resumable_content_range,
)

from devstack.gcs import replies
from devstack.gcs.blobs import UploadBuffer
from devstack.gcs.preconditions import Preconditions


@dataclass
class UploadSession:
    resource: dict
    conditions: Preconditions
    buffer: UploadBuffer
    lock: threading.Lock = field(default_factory=threading.Lock)
    result: dict | None = None  # the object resource once the upload completed


class UploadSessions:
    def __init__(self):
        self._lock = threading.Lock()
        self._sessions: dict[str, UploadSession] = {}

    def add(self, session: UploadSession) -> str:
        upload_id = secrets.token_urlsafe(24)
        with self._lock:
            self._sessions[upload_id] = session
        return upload_id

    def get(self, upload_id: str) -> UploadSession | None:
        with self._lock:
            return self._sessions.get(upload_id)

    def drop(self, upload_id: str) -> None:
        with self._lock:
            self._sessions.pop(upload_id, None)


def _object_name(request, metadata: dict | None) -> str | None:
    if request.query.get("name"):
        return request.query["name"][0]
    return (metadata or {}).get("name")


def _multipart(request) -> dict | None:
    """The library's parse of a multipart upload (its metadata part and its content), or None
    when the body is empty or is not a metadata part followed by a content part."""
    try:
        parts = request.data
    except (ValueError, IndexError, TypeError, AttributeError):  # what the library's parser raises
        return None
    if not isinstance(parts, dict) or not isinstance(parts.get("meta"), dict):
        return None
    return parts


def _new_resource(request, name, content_type, metadata=None) -> dict:
    resource = _make_object_resource(
        request.base_url, request.params["bucket_name"], name, content_type, "0", metadata
    )
    resource["contentType"] = (metadata or {}).get("contentType") or content_type
    return resource


def _finish(resource: dict, buffer: UploadBuffer) -> dict:
    """Fill size and hashes from the streamed bytes; Conflict if the client's differ."""
    for field_name, actual in (("crc32c", buffer.crc32c), ("md5Hash", buffer.md5)):
        claimed = resource.get(field_name)
        if claimed and claimed != actual:
            raise Conflict(f"Provided {field_name} {claimed!r} does not match the data ({actual!r}).")
        resource[field_name] = actual
    resource["size"] = str(buffer.size)
    resource["etag"] = buffer.md5
    return resource


def insert(request, response, backend):
    upload_type = request.query.get("uploadType", [""])[0]
    conditions = Preconditions.from_query(request.query)
    if upload_type == "resumable" and "upload_id" in request.query:
        return upload_chunk(request, response, backend)
    if upload_type == "resumable":
        return _start_resumable(request, response, backend, conditions)
    if upload_type == "multipart":
        parts = _multipart(request)
        if parts is None:
            # Cloud Storage answers a request it cannot parse with 400 "invalid"
            # (https://cloud.google.com/storage/docs/json_api/v1/status-codes); a client killed
            # while sending its body leaves one behind.
            return replies.bad_request(response, "The multipart upload's body is empty or malformed.")
        name = _object_name(request, parts["meta"])
        if not name:
            return replies.bad_request(response, "Required object name is missing.")
        resource = _new_resource(request, name, parts["content-type"], parts["meta"])
        resource["size"] = str(len(parts["content"]))
        try:
            resource = _checksums(parts["content"], resource)
        except Conflict as err:
            return replies.bad_request(response, str(err))
        return response.json(backend.storage.commit(resource, parts["content"], conditions))
    if upload_type == "media":
        name = _object_name(request, None)
        if not name:
            request.drain()
            return replies.bad_request(response, "Required object name is missing.")
        buffer = backend.storage.blobs.new_upload()
        for piece in request.iter_body():
            buffer.append(piece)
        content_type = request.get_header("Content-Type") or "application/octet-stream"
        resource = _finish(_new_resource(request, name, content_type), buffer)
        return response.json(backend.storage.commit(resource, buffer, conditions))
    request.drain()
    replies.bad_request(response, f"Unsupported uploadType {upload_type!r}.")


def _start_resumable(request, response, backend, conditions):
    metadata = request.data if isinstance(request.data, dict) else {}
    bucket = request.params["bucket_name"]
    name = _object_name(request, metadata)
    if not name:
        return replies.bad_request(response, "Required object name is missing.")
    content_type = request.get_header("X-Upload-Content-Type") or "application/octet-stream"
    # Fail fast (404 / 412); the binding check happens again at the last byte.
    conditions.check(backend.storage.live(bucket, name))
    resource = _new_resource(request, name, content_type, {**metadata, "name": name})
    session = UploadSession(resource, conditions, backend.storage.blobs.new_upload())
    upload_id = backend.sessions.add(session)
    query = urllib.parse.urlencode({"uploadType": "resumable", "upload_id": upload_id})
    response["Location"] = f"{request.base_url}/upload/storage/v1/b/{bucket}/o?{query}"
    response.json({})


def _incomplete(response, received: int) -> None:
    response.status = GoogleHTTPStatus.RESUME_INCOMPLETE
    if received:
        response["Range"] = f"bytes=0-{received - 1}"


def _client_hashes(request) -> dict[str, str]:
    """The X-Goog-Hash header the client sends with the last chunk: crc32c=..,md5=.."""
    hashes = {}
    for item in (request.get_header("X-Goog-Hash") or "").split(","):
        label, sep, value = item.strip().partition("=")
        if sep:
            hashes[{"md5": "md5Hash"}.get(label, label)] = value
    return hashes


def upload_chunk(request, response, backend):
    upload_id = request.query.get("upload_id", [""])[0]
    session = backend.sessions.get(upload_id)
    if session is None:
        request.drain()
        return replies.not_found(response, "No such upload session.")
    content_range = _parse_resumable_content_range(request.get_header("Content-Range") or "")
    with session.lock:
        if session.result is not None:
            request.drain()
            return response.json(session.result)
        buffer = session.buffer
        if content_range is None:  # a single PUT with the whole object
            content_range = {"kind": "chunk", "start": 0, "end": None, "total": None}
            whole = True
        else:
            whole = False
        total = content_range["total"]
        if content_range["kind"] != "status":
            skip = buffer.size - content_range["start"]  # bytes the client resent
            if skip < 0:
                request.drain()
                return _incomplete(response, buffer.size)
            for piece in request.iter_body():
                if skip >= len(piece):
                    skip -= len(piece)
                    continue
                buffer.append(piece[skip:] if skip else piece)
                skip = 0
            if whole or (content_range["end"] is None and total is None):
                total = buffer.size
        if total is None or buffer.size < total:
            return _incomplete(response, buffer.size)
        if buffer.size > total:
            backend.sessions.drop(upload_id)
            backend.storage.blobs.discard(buffer)
            return replies.bad_request(response, "More bytes were sent than the declared size.")
        resource = session.resource
        resource.update(_client_hashes(request))
        try:
            _finish(resource, buffer)
            session.result = backend.storage.commit(resource, buffer, session.conditions)
        except Exception:
            # A failed finalisation ends the session, as on GCS; commit() already
            # discarded the bytes if it got that far, discarding twice is harmless.
            backend.sessions.drop(upload_id)
            backend.storage.blobs.discard(buffer)
            raise
        # The session stays, so a client that retries the last request gets the object.
        response.json(session.result)
