"""The production state store: one JSON object per key in a GCS bucket.

`{prefix}/{key}.json` holds an envelope `{"format", "version", "fence", "document"}`; `get`
returns only `document`. The store's version is a counter in the envelope (1 on create, +1 per
put, as the contract and the SQLite store have it) rather than the raw GCS generation, which
is a large server-assigned number.

Every write is an upload with `ifGenerationMatch` set to the generation whose envelope was just
read and checked (version and fence), or 0 for create. GCS refuses it with 412 if anyone wrote
in between, so read-check-write acts as one compare-and-set and the counter cannot fork.

The fence floor is one more object, `{prefix}/fence-floor` (no `.json`, so it is never listed as
a key), holding `{"fence": N}`; fenced writes read it first. GCS has no transaction across two
objects, so a write that read the floor just before a new leader raised it can still land: the
floor narrows a deposed leader's window to one read-to-write gap, the per-document fence and the
lease check before every side effect close the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters import gcs as gcs_client
from controller.store.base import (
    AlreadyExists,
    Fenced,
    StoreError,
    VersionConflict,
    Versioned,
    check_key,
)

ENVELOPE_FORMAT = "relaunch-state/v1"
_SUFFIX = ".json"
FENCE_FLOOR_NAME = "fence-floor"
_log = logs.get("relaunch.store.gcs")


@dataclass(frozen=True)
class _Stored:
    document: dict[str, Any]
    version: int
    fence: int
    generation: int


class GcsStateStore:
    def __init__(
        self, bucket: str, prefix: str, client=None, *, timeout: float = gcs_client.CALL_TIMEOUT_SECONDS
    ):
        if not bucket:
            raise ValueError("GcsStateStore needs a bucket name")
        self._client = client or gcs_client.make_client()
        self._bucket = self._client.bucket(bucket)
        self._prefix = prefix.strip("/")
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"GcsStateStore(gs://{self._bucket.name}/{self._prefix})"

    # -- names ---------------------------------------------------------------------------

    def _object_name(self, key: str) -> str:
        check_key(key)
        return f"{self._prefix}/{key}{_SUFFIX}" if self._prefix else f"{key}{_SUFFIX}"

    def _key_of(self, object_name: str) -> str | None:
        start = len(self._prefix) + 1 if self._prefix else 0
        if not object_name.endswith(_SUFFIX):
            return None
        return object_name[start : -len(_SUFFIX)]

    # -- reads ---------------------------------------------------------------------------

    def _read(self, name: str, generation: int | None = None) -> _Stored | None:
        """The live object (exactly `generation`, if given, else None), or None if absent."""
        blob = self._bucket.blob(name)
        try:
            body = gcs_client.call(
                lambda: blob.download_as_bytes(
                    if_generation_match=generation, timeout=self._timeout, retry=None
                ),
                what=f"download {name}",
            )
        except (gexc.NotFound, gexc.PreconditionFailed):
            return None
        try:
            envelope = json.loads(body)
            if envelope.get("format") != ENVELOPE_FORMAT:
                raise ValueError(f"format is {envelope.get('format')!r}")
            stored = _Stored(
                dict(envelope["document"]),
                int(envelope["version"]),
                int(envelope["fence"]),
                # The download's headers carry the generation of these bytes.
                int(blob.generation),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"gs://{self._bucket.name}/{name} is not a state document: {exc}") from exc
        return stored

    def get(self, key: str) -> Versioned | None:
        stored = self._read(self._object_name(key))
        return None if stored is None else Versioned(key, stored.document, stored.version)

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        list_prefix = f"{self._prefix}/{prefix}" if self._prefix else prefix
        blobs = gcs_client.call(
            lambda: list(
                self._client.list_blobs(self._bucket, prefix=list_prefix, timeout=self._timeout, retry=None)
            ),
            what=f"list {list_prefix}",
        )
        keyed = sorted((key, blob) for blob in blobs if (key := self._key_of(blob.name)) is not None)
        for key, blob in keyed:
            # Fetch the generation the listing saw; if it moved on, read whatever is live now.
            stored = self._read(blob.name, generation=blob.generation) or self._read(blob.name)
            if stored is not None:  # None: deleted since the listing, it is simply gone
                yield Versioned(key, stored.document, stored.version)

    # -- the fence floor -----------------------------------------------------------------

    def _floor_name(self) -> str:
        return f"{self._prefix}/{FENCE_FLOOR_NAME}" if self._prefix else FENCE_FLOOR_NAME

    def _read_floor(self) -> tuple[int, int]:
        """(floor, generation of the floor object); (0, 0) when there is none yet."""
        blob = self._bucket.blob(self._floor_name())
        try:
            body = gcs_client.call(
                lambda: blob.download_as_bytes(timeout=self._timeout, retry=None), what="read fence floor"
            )
        except gexc.NotFound:
            return 0, 0
        try:
            return int(json.loads(body)["fence"]), int(blob.generation)
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"gs://{self._bucket.name}/{self._floor_name()} is garbled: {exc}") from exc

    def _check_floor(self, key: str, fence: int) -> None:
        floor, _ = self._read_floor()
        if fence < floor:
            _log.warning("write below the fence floor refused", key=key, fence=fence, floor=floor)
            raise Fenced(f"{key}: a controller with fence {floor} leads now, this writer has {fence}")

    def raise_fence(self, fence: int) -> None:
        while True:
            floor, generation = self._read_floor()
            if floor >= fence:
                return
            try:
                gcs_client.conditional_upload(
                    self._bucket.blob(self._floor_name()),
                    json.dumps({"fence": fence}).encode(),
                    if_generation_match=generation,
                    timeout=self._timeout,
                )
                return
            except gexc.PreconditionFailed:
                continue  # someone moved it meanwhile: look again

    # -- writes --------------------------------------------------------------------------

    def _upload(
        self, name: str, document: dict[str, Any], *, version: int, fence: int, if_generation_match: int
    ) -> None:
        envelope = {"format": ENVELOPE_FORMAT, "version": version, "fence": fence, "document": document}
        gcs_client.conditional_upload(
            self._bucket.blob(name),
            json.dumps(envelope, sort_keys=True).encode(),
            if_generation_match=if_generation_match,
            timeout=self._timeout,
        )

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int:
        name = self._object_name(key)
        if fence > 0:
            self._check_floor(key, fence)
        try:
            self._upload(name, document, version=1, fence=fence, if_generation_match=0)
        except gexc.PreconditionFailed:
            raise AlreadyExists(key) from None
        return 1

    def put(self, key: str, document: dict[str, Any], *, expected_version: int, fence: int = 0) -> int:
        name = self._object_name(key)
        live = self._read(name)
        if live is None or live.version != expected_version:
            raise VersionConflict(
                f"{key}: expected version {expected_version}, "
                f"found {'nothing' if live is None else live.version}"
            )
        if fence < live.fence:
            _log.warning("fenced write refused", key=key, fence=fence, stored_fence=live.fence)
            raise Fenced(f"{key}: written under fence {live.fence}, this writer has {fence}")
        self._check_floor(key, fence)
        try:
            self._upload(
                name, document, version=expected_version + 1, fence=fence, if_generation_match=live.generation
            )
        except gexc.PreconditionFailed:
            raise VersionConflict(
                f"{key}: changed while being written (expected version {expected_version})"
            ) from None
        return expected_version + 1

    def delete(self, key: str, *, expected_version: int) -> None:
        name = self._object_name(key)
        live = self._read(name)
        if live is None or live.version != expected_version:
            raise VersionConflict(f"{key}: not at version {expected_version}")
        blob = self._bucket.blob(name)
        tries = 0

        def delete() -> None:
            nonlocal tries
            tries += 1
            blob.delete(if_generation_match=live.generation, timeout=self._timeout, retry=None)

        try:
            gcs_client.call(delete, what=f"delete {name}")
        except gexc.NotFound:
            if tries == 1:
                raise VersionConflict(f"{key}: deleted by someone else") from None
            # A retry found it gone: the try whose reply was lost had deleted it.
        except gexc.PreconditionFailed:
            raise VersionConflict(f"{key}: changed while being deleted") from None
