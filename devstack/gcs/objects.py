"""Object read, metadata patch and delete handlers, with preconditions and streaming
range downloads. Signature: handler(request, response, backend)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from http import HTTPStatus

from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers.objects import _WRITABLE_FIELDS

from devstack.gcs import replies
from devstack.gcs.preconditions import Preconditions


def _generation_param(request) -> str | None:
    values = request.query.get("generation")
    return values[0] if values else None


def _live_or_404(request, resource):
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    wanted = _generation_param(request)
    if resource is None or (wanted and wanted != resource["generation"]):
        raise NotFound(f"No such object: {bucket}/{name}")
    return resource


def get(request, response, backend):
    if request.query.get("alt", [""])[0] == "media":
        return download(request, response, backend)
    conditions = Preconditions.from_query(request.query)
    resource = backend.storage.live(request.params["bucket_name"], request.params["object_id"])
    resource = _live_or_404(request, resource)
    conditions.check(resource)
    response.json(resource)


_RANGE = re.compile(r"^\s*bytes=(?P<start>\d*)-(?P<end>\d*)\s*$")


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, length) for a satisfiable Range header; None for no range; ValueError if
    the range cannot be satisfied."""
    if not header or size == 0:
        return None
    match = _RANGE.match(header)
    if not match or (not match["start"] and not match["end"]):
        return None  # unparseable ranges are ignored, as HTTP allows
    if not match["start"]:  # suffix: the last N bytes
        length = min(int(match["end"]), size)
        return size - length, length
    start = int(match["start"])
    end = min(int(match["end"]), size - 1) if match["end"] else size - 1
    if start >= size or end < start:
        raise ValueError(header)
    return start, end - start + 1


def download(request, response, backend):
    conditions = Preconditions.from_query(request.query)
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    resource, blob = backend.storage.open_live(bucket, name)
    try:
        _live_or_404(request, resource)
        conditions.check(resource)
        size = int(resource["size"])
        try:
            byte_range = _byte_range(request.get_header("Range"), size)
        except ValueError:
            response["Content-Range"] = f"bytes */{size}"
            replies.error(
                response,
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                "requestedRangeNotSatisfiable",
                "The requested range cannot be satisfied.",
            )
            blob.close()
            return
    except Exception:
        blob.close()
        raise
    # GCS sends the whole object's hashes even for a range; clients check them only on 200.
    response["X-Goog-Hash"] = f"crc32c={resource['crc32c']},md5={resource['md5Hash']}"
    response["X-Goog-Generation"] = resource["generation"]
    response["X-Goog-Metageneration"] = resource["metageneration"]
    response["X-Goog-Stored-Content-Length"] = str(size)
    response["Accept-Ranges"] = "bytes"
    for key, value in (resource.get("metadata") or {}).items():
        if value is not None:
            response[f"x-goog-meta-{key}"] = str(value)
    if "response-content-disposition" in request.query:
        response["Content-Disposition"] = request.query["response-content-disposition"][0]
    start, length = byte_range or (0, size)
    if byte_range:
        response.status = HTTPStatus.PARTIAL_CONTENT
        response["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
    response.stream(blob, start, length, resource.get("contentType") or "application/octet-stream")


def _apply_patch(current: dict, body: dict) -> dict:
    updated = dict(current)
    for key in _WRITABLE_FIELDS:
        if key in ("metadata", "acl", "crc32c", "md5Hash") or key not in body:
            continue
        if body[key] is None:
            updated.pop(key, None)
        else:
            updated[key] = body[key]
    if "metadata" in body:
        # GCS merges custom metadata key by key; a null value removes that key.
        custom = dict(current.get("metadata") or {}) if body["metadata"] is not None else {}
        for key, value in (body["metadata"] or {}).items():
            if value is None:
                custom.pop(key, None)
            else:
                custom[key] = value
        updated["metadata"] = custom
    updated["metageneration"] = str(int(current["metageneration"]) + 1)
    updated["updated"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return updated


def patch(request, response, backend):
    conditions = Preconditions.from_query(request.query)
    body = request.data or {}
    if not isinstance(body, dict):
        return replies.bad_request(response, "The request body must be a JSON object.")
    resource = backend.storage.update_metadata(
        request.params["bucket_name"],
        request.params["object_id"],
        lambda current: _apply_patch(current, body),
        conditions,
        _generation_param(request),
    )
    response.json(resource)


def delete(request, response, backend):
    conditions = Preconditions.from_query(request.query)
    backend.storage.remove(
        request.params["bucket_name"], request.params["object_id"], conditions, _generation_param(request)
    )
    response.status = HTTPStatus.NO_CONTENT


LIST_MAX_RESULTS = 1000  # objects.list returns at most 1,000 items per page [JSON API objects.list]


def list_objects(request, response, backend):
    """objects.list with `maxResults` and `pageToken` [JSON API objects.list]: names in order,
    at most 1,000 a page, `nextPageToken` while more remain. The token is the last name served
    (opaque to clients). Prefixes (with a delimiter) all come on the first page."""
    query = request.query

    def one(name):
        values = query.get(name)
        return values[0] if values else None

    try:
        max_results = int(one("maxResults") or LIST_MAX_RESULTS)
    except ValueError:
        return replies.bad_request(response, "maxResults must be an integer")
    if max_results <= 0:
        max_results = LIST_MAX_RESULTS
    max_results = min(max_results, LIST_MAX_RESULTS)
    token = one("pageToken") or ""
    soft_deleted = (one("softDeleted") or "").lower() in ("1", "true", "yes")
    if one("matchGlob") is None and not soft_deleted:
        # The common case, served from the name index: the page's cost does not grow with
        # the bucket.
        page, prefixes, more = backend.storage.list_page(
            request.params["bucket_name"], one("prefix") or "", one("delimiter") or "", token, max_results
        )
    else:
        with backend.storage.lock:
            files, prefixes = backend.storage.get_file_list(
                request.params["bucket_name"],
                one("prefix"),
                one("delimiter"),
                one("matchGlob"),
                soft_deleted=soft_deleted,
            )
        files = sorted(files, key=lambda item: item["name"])
        if token:
            files = [item for item in files if item["name"] > token]
        page, more = files[:max_results], len(files) > max_results
    body = {"kind": "storage#objects", "items": page, "prefixes": [] if token else prefixes}
    if more:
        body["nextPageToken"] = page[-1]["name"]
    response.json(body)
