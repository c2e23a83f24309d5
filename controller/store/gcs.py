"""The production state store: one JSON object per key in a GCS bucket.

`{prefix}/{key}.json` holds an envelope `{"format", "version", "fence", "document"}`; `get`
returns only `document`. The store's version is a counter in the envelope (1 on create, +1 per
put, as the contract and the SQLite store have it) rather than the raw GCS generation, which
is a large server-assigned number.

Every write is an upload with `ifGenerationMatch` set to the generation whose envelope was just
read and checked (version and fence), or 0 for create. GCS refuses it with 412 if anyone wrote
in between, so read-check-write acts as one compare-and-set and the counter cannot fork. The
store remembers the version, fence and generation of what it last read or wrote at each name, so
a put right after its own read or write skips the read: the remembered generation is the upload's
precondition, and if anyone wrote since, GCS answers 412 and the put reads and judges as above.

Listing without a GET per object: each upload also sets custom metadata on the same object (so
in the same atomic write): `relaunch-live` ("1"/"0", the live index of base.py) and, when the
envelope is small enough, the envelope itself (`relaunch-envelope`). `list` and `list_live` page
through objects.list (up to 1,000 objects per call) asking only for names, generations and
metadata, and GET an object only when its envelope was not embedded. Live documents are embedded
up to EMBED_LIMIT bytes (custom metadata is limited to 8 KiB per object, [GCS docs: "Object
metadata", custom metadata limits]); finished documents only when tiny, so the listing a reconcile
pass makes stays small however much history the bucket holds (the pass skips them by their
`relaunch-live` flag, reading nothing else of them). Objects written before this carry no flag:
they are read and classified on read.

The fence floor is one more object, `{prefix}/fence-floor` (no `.json`, so it is never listed as
a key), holding `{"fence": N}`; fenced writes read it first. GCS has no transaction across two
objects, so a write that read the floor just before a new leader raised it can still land: the
floor narrows a deposed leader's window to one read-to-write gap, the per-document fence and the
lease check before every side effect close the rest.

One round trip per write: the leader tells the store its lease (`trust_lease`). While that
lease is held (its own view, safety margin deducted), no successor can have taken it, so no
higher fence exists and the floor, raised only by new leaders, is at most ours: a write with
exactly our fence skips reading it. A put whose generation is remembered is then one
conditional upload; a create one create-only upload. Once the lease is not held (run out,
abandoned, released, or lost), every fenced write reads the floor again, so a deposed leader
is refused as before. The window left is of the same kind the floor read leaves: a write sent
while the lease was held that lands after a successor raised the floor. It needs a write in
flight longer than the lease's safety margin, as a successor takes the lease only after ours
ran out on its own clock, whereas a floor read can be overtaken by a raise at any moment.
The lease check before every side effect stays as it was.

Each read, write, listing page and delete is one JSON API request (controller/adapters/gcs_api.py)
rather than a trip through the storage library's Blob machinery, which cost two to five times the
client CPU per call; the intake makes four of them per new job. Preconditions, timeouts, the retry
policy and the errors seen here are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters import gcs as gcs_client
from controller.adapters.gcs_api import JsonApi
from controller.store.base import (
    AlreadyExists,
    Fenced,
    Liveness,
    StoreError,
    StoreOps,
    T,
    VersionConflict,
    Versioned,
    check_key,
)
from controller.store.keys import is_live

ENVELOPE_FORMAT = "relaunch-state/v1"
_SUFFIX = ".json"
FENCE_FLOOR_NAME = "fence-floor"
LIVE_KEY = "relaunch-live"
ENVELOPE_KEY = "relaunch-envelope"
# Custom metadata holds at most 8 KiB per object; the write id and the flag need a little of it.
EMBED_LIMIT = 6000
# Finished documents are embedded only when this small (cancels, claims, rejections).
EMBED_FINISHED_LIMIT = 1024
# Objects whose (version, fence, generation) the store remembers, so that a put of what it has
# just read or written skips reading it again (a bound on memory, not a tuning knob).
KNOWN_LIMIT = 200_000
LIST_PAGE_SIZE = 1000  # the most objects.list returns per call
_LIST_FIELDS = "items(name,generation,metadata),nextPageToken"
_log = logs.get("relaunch.store.gcs")


@dataclass(frozen=True)
class _Stored:
    document: dict[str, Any]
    version: int
    fence: int
    generation: int


@dataclass(frozen=True)
class _Seen:
    """What the store last read or wrote at an object name (the document itself is not kept)."""

    version: int
    fence: int
    generation: int


class GcsStateStore:
    def __init__(
        self,
        bucket: str,
        prefix: str,
        client=None,
        *,
        timeout: float = gcs_client.CALL_TIMEOUT_SECONDS,
        liveness: Liveness = is_live,
    ):
        self._liveness = liveness
        if not bucket:
            raise ValueError("GcsStateStore needs a bucket name")
        self._client = client or gcs_client.make_client()
        self._bucket = self._client.bucket(bucket)
        # Every call goes to the JSON API directly (gcs_api.py): a fraction of the client CPU
        # of the library's Blob path, with the same endpoint, credentials and errors.
        self._api = JsonApi(self._client)
        self._prefix = prefix.strip("/")
        self._timeout = timeout
        # object name -> what this store last read or wrote there. Only a shortcut: a put sends
        # the remembered generation as its precondition, so if anyone wrote since, GCS refuses
        # it (412) and the put reads the object and judges it as if nothing had been remembered.
        self._known: dict[str, _Seen] = {}
        # (fence, held) from the leader's lease (`trust_lease`): writes with that fence skip the
        # floor while held() says the lease is still ours.
        self._lease: tuple[int, Callable[[], bool]] | None = None

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
        try:
            body, live_generation = gcs_client.call(
                lambda: self._api.download(
                    self._bucket.name, name, if_generation_match=generation, timeout=self._timeout
                ),
                what=f"download {name}",
            )
        except (gexc.NotFound, gexc.PreconditionFailed):
            if generation is None:
                self._known.pop(name, None)
            return None
        # The download's headers carry the generation of these bytes.
        return self._remember(name, self._parse(name, body, live_generation))

    def _remember(self, name: str, stored: _Stored) -> _Stored:
        if len(self._known) >= KNOWN_LIMIT:
            self._known.clear()
        self._known[name] = _Seen(stored.version, stored.fence, stored.generation)
        return stored

    def _parse(self, name: str, body: bytes, generation: int) -> _Stored:
        try:
            envelope = json.loads(body)
            if envelope.get("format") != ENVELOPE_FORMAT:
                raise ValueError(f"format is {envelope.get('format')!r}")
            return _Stored(
                dict(envelope["document"]), int(envelope["version"]), int(envelope["fence"]), generation
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"gs://{self._bucket.name}/{name} is not a state document: {exc}") from exc

    def get(self, key: str) -> Versioned | None:
        stored = self._read(self._object_name(key))
        return None if stored is None else Versioned(key, stored.document, stored.version)

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        return self._listed(prefix, live_only=False)

    def list_live(self, prefix: str = "") -> Iterator[Versioned]:
        return self._listed(prefix, live_only=True)

    def _listed(self, prefix: str, *, live_only: bool) -> Iterator[Versioned]:
        list_prefix = f"{self._prefix}/{prefix}" if self._prefix else prefix
        # Key order differs from object-name order ("a-b.json" < "a.json"), so the (small)
        # listing entries are gathered before any document is read.
        listed = []
        for item in self._list_pages(list_prefix):
            key = self._key_of(item["name"])
            if key is None:
                continue
            if live_only and (item.get("metadata") or {}).get(LIVE_KEY) == "0":
                continue  # finished when last written: nothing of it is read
            listed.append((key, item))
        for key, item in sorted(listed, key=lambda entry: entry[0]):
            name, metadata, generation = item["name"], item.get("metadata") or {}, int(item["generation"])
            stored = self._embedded(name, metadata, generation)
            if stored is None:
                # Fetch the generation the listing saw; if it moved on, read whatever is live now.
                stored = self._read(name, generation=generation) or self._read(name)
            if stored is None:  # deleted since the listing, it is simply gone
                continue
            if live_only and LIVE_KEY not in metadata and not self._liveness(key, stored.document):
                continue  # written before the flag existed: classified on read
            yield Versioned(key, stored.document, stored.version)

    def _list_pages(self, list_prefix: str) -> Iterator[dict[str, Any]]:
        """Every object under the prefix (its resource: name, generation, metadata), one
        objects.list call per page (each retried on its own)."""
        token: str | None = None
        while True:

            def page(token: str | None = token) -> tuple[list[dict[str, Any]], str | None]:
                return self._api.list_page(
                    self._bucket.name,
                    list_prefix,
                    page_size=LIST_PAGE_SIZE,
                    fields=_LIST_FIELDS,
                    page_token=token,
                    timeout=self._timeout,
                )

            items, token = gcs_client.call(page, what=f"list {list_prefix}")
            yield from items
            if not token:
                return

    def _embedded(self, name: str, metadata: dict[str, str], generation: int) -> _Stored | None:
        raw = metadata.get(ENVELOPE_KEY)
        if raw is None:
            return None
        try:
            return self._remember(name, self._parse(name, raw.encode(), generation))
        except StoreError:
            return None  # read the object itself instead

    # -- the fence floor -----------------------------------------------------------------

    def _floor_name(self) -> str:
        return f"{self._prefix}/{FENCE_FLOOR_NAME}" if self._prefix else FENCE_FLOOR_NAME

    def _read_floor(self) -> tuple[int, int]:
        """(floor, generation of the floor object); (0, 0) when there is none yet."""
        try:
            body, generation = gcs_client.call(
                lambda: self._api.download(self._bucket.name, self._floor_name(), timeout=self._timeout),
                what="read fence floor",
            )
        except gexc.NotFound:
            return 0, 0
        try:
            return int(json.loads(body)["fence"]), generation
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"gs://{self._bucket.name}/{self._floor_name()} is garbled: {exc}") from exc

    def trust_lease(self, fence: int, held: Callable[[], bool]) -> None:
        self._lease = (fence, held)

    def _check_floor(self, key: str, fence: int) -> None:
        lease = self._lease
        if lease is not None and fence > 0 and fence == lease[0] and lease[1]():
            return  # our lease is held: nobody has a higher fence to raise the floor with
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
                self._api.conditional_upload(
                    self._bucket.name,
                    self._floor_name(),
                    json.dumps({"fence": fence}).encode(),
                    if_generation_match=generation,
                    metadata={},
                    timeout=self._timeout,
                )
                return
            except gexc.PreconditionFailed:
                continue  # someone moved it meanwhile: look again

    # -- writes --------------------------------------------------------------------------

    def _upload(
        self, name: str, document: dict[str, Any], *, version: int, fence: int, if_generation_match: int
    ) -> None:
        """Write the envelope if the object is at `if_generation_match`; remembers what it wrote."""
        envelope = {"format": ENVELOPE_FORMAT, "version": version, "fence": fence, "document": document}
        body = json.dumps(envelope, sort_keys=True)
        live = self._liveness(self._key_of(name) or "", document)
        metadata = {LIVE_KEY: "1" if live else "0"}
        if len(body) <= (EMBED_LIMIT if live else EMBED_FINISHED_LIMIT):
            metadata[ENVELOPE_KEY] = body
        try:
            generation = self._api.conditional_upload(
                self._bucket.name,
                name,
                body.encode(),
                if_generation_match=if_generation_match,
                metadata=metadata,
                timeout=self._timeout,
            )
        except BaseException:
            self._known.pop(name, None)  # whatever is there now, it is not what we remembered
            raise
        self._remember(name, _Stored(document, version, fence, generation))

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
        known = self._known.get(name)
        if known is not None and known.version == expected_version and fence >= known.fence:
            # One round trip less: the remembered generation is the precondition, so the upload
            # lands only on exactly the envelope whose version and fence were checked here.
            self._check_floor(key, fence)
            try:
                self._upload(
                    name,
                    document,
                    version=expected_version + 1,
                    fence=fence,
                    if_generation_match=known.generation,
                )
            except gexc.PreconditionFailed:
                pass  # written since it was remembered: read it and judge it below
            else:
                return expected_version + 1
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

    def together(self, work: Callable[[StoreOps], T]) -> T:
        """No transaction spans objects: each of `work`'s calls is its own step, in order."""
        return work(self)

    def delete(self, key: str, *, expected_version: int) -> None:
        name = self._object_name(key)
        live = self._read(name)
        if live is None or live.version != expected_version:
            raise VersionConflict(f"{key}: not at version {expected_version}")
        tries = 0

        def delete() -> None:
            nonlocal tries
            tries += 1
            self._api.delete(
                self._bucket.name, name, if_generation_match=live.generation, timeout=self._timeout
            )

        try:
            gcs_client.call(delete, what=f"delete {name}")
        except gexc.NotFound:
            if tries == 1:
                raise VersionConflict(f"{key}: deleted by someone else") from None
            # A retry found it gone: the try whose reply was lost had deleted it.
        except gexc.PreconditionFailed:
            raise VersionConflict(f"{key}: changed while being deleted") from None
