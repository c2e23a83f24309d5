"""Cloud Storage's JSON API spoken directly, for the state store's small and frequent calls.

Through the storage library a call to read, write, list or delete one small object costs about
1.5 ms of client CPU here (the Blob and resumable-media machinery, requests' request
preparation), and the state store makes four such calls per accepted request. Here each call is
one HTTP request, as the JSON API documents it, on a kept pool of connections:

- read: `GET /download/storage/v1/b/{bucket}/o/{object}?alt=media`; the object's generation comes
  back in `X-Goog-Generation`, and the body's CRC32C is checked against `X-Goog-Hash`, as the
  library checks it (https://cloud.google.com/storage/docs/json_api/v1/objects/get,
  https://cloud.google.com/storage/docs/xml-api/reference-headers).
- write: `POST /upload/storage/v1/b/{bucket}/o?uploadType=multipart`: the object's metadata
  (name, content type, custom metadata, CRC32C so GCS verifies the bytes) and its bytes in one
  request (https://cloud.google.com/storage/docs/uploading-objects,
  https://cloud.google.com/storage/docs/json_api/v1/objects/insert).
- list: `GET /storage/v1/b/{bucket}/o?prefix=&maxResults=&pageToken=&fields=`
  (https://cloud.google.com/storage/docs/json_api/v1/objects/list).
- delete: `DELETE /storage/v1/b/{bucket}/o/{object}`, metadata: `GET` of the same path
  (https://cloud.google.com/storage/docs/json_api/v1/objects/delete).
- preconditions: `ifGenerationMatch` on each of them, 0 meaning "must not exist"
  (https://cloud.google.com/storage/docs/request-preconditions).

Same endpoint, same credentials, same errors as the library: the base URL is the storage
client's own (so `STORAGE_EMULATOR_HOST` and `api_endpoint` are honoured), requests are
authorized with the client's credentials by google-auth's urllib3 transport (which refreshes the
token and tries once more on 401, as the library's session does), and an answer other than 2xx
becomes google.api_core's exception for its status (404 NotFound, 412 PreconditionFailed, 429 and
5xx the transient ones), which is what the library raised. Nothing is retried here (urllib3's own
retries are off): callers run every call under gcs.py's one policy. Where the environment names
proxies, or the client's session uses mutual TLS, the requests go through the client's own
(requests) session instead, which applies them; the requests and answers are the same.
"""

from __future__ import annotations

import base64
import json
import random
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import certifi
import google_crc32c
import urllib3
from google.api_core import exceptions as gexc
from google.auth.transport.urllib3 import AuthorizedHttp

from controller.adapters.gcs import POOL_CONNECTIONS, WRITE_ID_KEY, ca_bundle, new_write_id, write_once


class ChecksumMismatch(Exception):
    """The bytes read are not the bytes GCS holds (their CRC32C differs from X-Goog-Hash)."""


def crc32c_b64(data: bytes) -> str:
    """CRC32C as the JSON API spells it: base64 of the big-endian 32-bit value."""
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class JsonApi:
    """The handful of JSON API calls the state store makes, on one kept, authorized pool."""

    def __init__(self, client: Any):
        connection = client._connection
        self._media_base = f"{connection.API_BASE_URL}"  # where the library uploads and downloads
        self._api_base = f"{connection.get_api_base_url_for_mtls()}/storage/v1"
        self._headers = {"User-Agent": connection.user_agent.strip() or "relaunch"}
        session = client._http
        self._session: Any = None
        self._http: Any = None
        if urllib.request.getproxies_environment() or getattr(session, "is_mtls", False):
            self._session = session
        else:
            pool = urllib3.PoolManager(
                maxsize=POOL_CONNECTIONS, cert_reqs="CERT_REQUIRED", ca_certs=ca_bundle() or certifi.where()
            )
            self._http = AuthorizedHttp(client._credentials, http=pool)

    def _send(
        self,
        method: str,
        url: str,
        timeout: float,
        body: bytes | None = None,
        headers: Mapping[str, str] = {},
    ) -> tuple[Mapping[str, str], bytes]:
        """(headers, body) of a 2xx answer; otherwise raises the api_core exception of its status."""
        all_headers = {**self._headers, **headers}
        if self._http is not None:
            reply = self._http.urlopen(
                method, url, body=body, headers=all_headers, timeout=timeout, retries=False, redirect=False
            )
            status, reply_headers, data = reply.status, reply.headers, reply.data
        else:
            answer = self._session.request(method, url, data=body, headers=all_headers, timeout=timeout)
            status, reply_headers, data = answer.status_code, answer.headers, answer.content
        if status >= 300:
            raise gexc.from_http_status(status, f"{method} {url}: {_message(data)}")
        return reply_headers, data

    def download(
        self, bucket: str, name: str, *, timeout: float, if_generation_match: int | None = None
    ) -> tuple[bytes, int]:
        """(bytes, generation) of the live object; NotFound, or PreconditionFailed if not at the given one."""
        url = f"{self._media_base}/download/storage/v1/b/{bucket}/o/{_quote(name)}?alt=media"
        if if_generation_match is not None:
            url += f"&ifGenerationMatch={if_generation_match}"
        headers, data = self._send("GET", url, timeout)
        for item in (headers.get("X-Goog-Hash") or "").split(","):
            kind, _, value = item.strip().partition("=")
            if kind == "crc32c" and value != crc32c_b64(data):
                raise ChecksumMismatch(
                    f"gs://{bucket}/{name}: CRC32C {value} expected, the bytes read differ"
                )
        return data, int(headers["X-Goog-Generation"])

    def upload(
        self,
        bucket: str,
        name: str,
        data: bytes,
        *,
        if_generation_match: int,
        metadata: Mapping[str, str],
        content_type: str,
        timeout: float,
    ) -> dict[str, Any]:
        """Write the object (bytes and metadata at once) if it is at `if_generation_match`; its resource."""
        resource = {
            "name": name,
            "contentType": content_type,
            "metadata": dict(metadata),
            "crc32c": crc32c_b64(data),
        }
        boundary = f"==============={random.randrange(1 << 62)}==".encode()
        body = b"".join(
            (
                b"--" + boundary + b"\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n",
                json.dumps(resource).encode(),
                b"\r\n--" + boundary + b"\r\ncontent-type: " + content_type.encode() + b"\r\n\r\n",
                data,
                b"\r\n--" + boundary + b"--\r\n",
            )
        )
        url = (
            f"{self._media_base}/upload/storage/v1/b/{bucket}/o"
            f"?uploadType=multipart&ifGenerationMatch={if_generation_match}"
        )
        headers = {"Content-Type": f'multipart/related; boundary="{boundary.decode()}"'}
        _, reply = self._send("POST", url, timeout, body, headers)
        written: dict[str, Any] = json.loads(reply)
        return written

    def conditional_upload(
        self,
        bucket: str,
        name: str,
        data: bytes,
        *,
        if_generation_match: int,
        metadata: Mapping[str, str],
        timeout: float,
        content_type: str = "application/json",
    ) -> int:
        """gcs.conditional_upload's guarantees (retried; a lost reply's write is recognised as
        ours by its write id) for one multipart upload; returns the new generation."""
        write_id = new_write_id()
        tagged = {**metadata, WRITE_ID_KEY: write_id}

        def upload() -> int:
            written = self.upload(
                bucket,
                name,
                data,
                if_generation_match=if_generation_match,
                metadata=tagged,
                content_type=content_type,
                timeout=timeout,
            )
            return int(written["generation"])

        def read_back() -> tuple[str | None, int] | None:
            live = self.metadata(bucket, name, timeout=timeout)
            if live is None:
                return None
            return (live.get("metadata") or {}).get(WRITE_ID_KEY), int(live["generation"])

        return write_once(upload, read_back, write_id, what=name)

    def metadata(self, bucket: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        """The object's resource (generation, custom metadata, ...), or None when there is none."""
        try:
            _, reply = self._send("GET", f"{self._api_base}/b/{bucket}/o/{_quote(name)}", timeout)
        except gexc.NotFound:
            return None
        resource: dict[str, Any] = json.loads(reply)
        return resource

    def list_page(
        self, bucket: str, prefix: str, *, page_size: int, fields: str, page_token: str | None, timeout: float
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of objects.list: (object resources, the next page's token or None)."""
        query = {"prefix": prefix, "maxResults": str(page_size), "fields": fields}
        if page_token:
            query["pageToken"] = page_token
        url = f"{self._api_base}/b/{bucket}/o?{urllib.parse.urlencode(query)}"
        _, reply = self._send("GET", url, timeout)
        page = json.loads(reply)
        return list(page.get("items", [])), page.get("nextPageToken") or None

    def delete(self, bucket: str, name: str, *, if_generation_match: int, timeout: float) -> None:
        url = f"{self._api_base}/b/{bucket}/o/{_quote(name)}?ifGenerationMatch={if_generation_match}"
        self._send("DELETE", url, timeout)


def _message(data: bytes) -> str:
    """The error's message from a JSON API error body, or the body's start."""
    try:
        return str(json.loads(data)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return data[:200].decode("utf-8", errors="replace")
