"""Thread-safe object storage on top of gcp-storage-emulator's `Storage`.

The library keeps bucket and object resources in dicts and persists them as one JSON file;
we keep that (buckets, listing, IAM stubs all come from it) and change what it lacks for
concurrent, large, conditional writes:

- object bytes live in a `BlobStore`, one blob per generation, streamed rather than held;
- every check-and-write of one object runs under that object's lock, so two create-only
  writes (`ifGenerationMatch=0`) cannot both succeed;
- generations are strictly increasing microsecond timestamps (the library uses raw
  time_ns, which can repeat on coarse clocks);
- deletes are hard deletes (the library soft-deletes by copying the bytes, which would
  double the disk use of every rotated checkpoint);
- an object write appends one line to a journal beside the metadata file instead of rewriting
  the whole file, so a write costs the same with 100 or 100,000 objects in the bucket; the
  file is rewritten (compacted) only when the journal outgrows the live objects, and on the
  library's rare bucket-level changes. A killed process leaves the old or the new state: the
  snapshot is replaced atomically, and a torn last journal line is ignored on start;
- each bucket's object names are also kept in one sorted list (the listing index), so a
  listing page starts with a binary search and reads only the names it serves (plus, with a
  delimiter, one name per rolled-up prefix) instead of filtering and sorting every object in
  the bucket on every page.

Lock order is always object lock, then `self.lock` (the dicts); never the reverse.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import threading
import time
from pathlib import Path

from gcp_storage_emulator import settings
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.storage import Storage

from devstack.gcs.blobs import BlobStore, UploadBuffer, blob_key
from devstack.gcs.preconditions import Preconditions


class ObjectLocks:
    """One lock per (bucket, object) in use; entries are dropped when nobody holds them."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], list] = {}  # key -> [lock, users]

    @contextlib.contextmanager
    def hold(self, bucket: str, name: str):
        key = (bucket, name)
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]


def _with_generation(resource: dict, generation: int) -> dict:
    bucket, name = resource["bucket"], resource["name"]
    resource["generation"] = str(generation)
    resource["metageneration"] = "1"
    resource["id"] = f"{bucket}/{name}/{generation}"
    resource.pop("mediaLink", None)  # made per reply, with the server's current address
    return resource


def _past(names: list[str], rolled: str, at: int) -> int:
    """Index of the first name at or after `at` that does not start with `rolled`."""
    last = rolled[-1]
    if ord(last) == 0x10FFFF:  # no successor character: step over one name at a time
        while at < len(names) and names[at].startswith(rolled):
            at += 1
        return at
    # Every name starting with `rolled` sorts before `rolled` with its last character bumped.
    return bisect.bisect_left(names, rolled[:-1] + chr(ord(last) + 1), at)


class GcsStorage(Storage):
    def __init__(self, data_dir: str | None):
        self.lock = threading.RLock()
        self.object_locks = ObjectLocks()
        # bucket -> its object names, sorted (the listing index). Built on first listing,
        # kept up to date by commit and remove; rebuilt whenever its size disagrees with the
        # bucket's (a library path that added or dropped a name behind our back, a wipe, a load).
        self._names: dict[str, list[str]] = {}
        self.names_examined = 0  # names a listing has looked at since start (tests read it)
        self._meta_path = None
        if data_dir is not None:
            data_dir = os.path.abspath(data_dir)
            self._meta_path = Path(data_dir) / settings.STORAGE_DIR / ".meta"
        super().__init__(use_memory_fs=data_dir is None, data_dir=data_dir)
        self.blobs = BlobStore(data_dir)
        self._last_generation = max(
            (int(o["generation"]) for objs in self.objects.values() for o in objs.values()),
            default=0,
        )

    # ---- persistence -------------------------------------------------------------------
    # The snapshot (`.meta`, the library's format) plus a journal (`.meta.log`) of object
    # changes since it was written, one JSON line each: [bucket, name, resource or null].
    # Replaying a line sets one object's whole resource, so replaying a line twice is harmless
    # (a crash between writing a snapshot and emptying the journal leaves lines the snapshot
    # already holds).
    _journal = None  # the open journal file, or None in memory mode
    _journal_lines = 0
    compact_at_least = 1024  # journal lines before a rewrite is considered (tests lower it)

    def _journal_path(self) -> Path:
        assert self._meta_path is not None
        return self._meta_path.with_name(".meta.log")

    def _read_config_from_file(self):
        super()._read_config_from_file()
        if self._meta_path is None:
            return
        path = self._journal_path()
        if path.exists():
            lines = path.read_bytes().split(b"\n")
            for number, line in enumerate(lines):
                try:
                    bucket, name, resource = json.loads(line)
                except ValueError:
                    if number == len(lines) - 1:
                        break  # the empty tail, or a line torn by a kill mid-append: never acknowledged
                    raise
                self._apply_journal_entry(bucket, name, resource)
        self._names = {}
        self._write_config_to_file()  # fold the journal into a fresh snapshot, start a new journal

    def _apply_journal_entry(self, bucket: str, name: str, resource: dict | None) -> None:
        if resource is None:
            self.objects.get(bucket, {}).pop(name, None)
        else:
            self.objects.setdefault(bucket, {})[name] = resource

    def _write_config_to_file(self):
        """Rewrite the whole snapshot and empty the journal (compaction)."""
        if self._meta_path is None:
            return  # memory mode: the dicts are the truth, nothing to serialise
        data = {
            "buckets": self.buckets,
            "objects": self.objects,
            "bucket_iam_policies": self.bucket_iam_policies,
        }
        tmp = self._meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self._meta_path)
        if self._journal is not None:
            self._journal.close()
        self._journal = open(self._journal_path(), "wb")  # held open: one append per object write
        self._journal_lines = 0

    def _record(self, bucket: str, name: str, resource: dict | None) -> None:
        """Persist one object's change; call with `self.lock` held, after changing the dicts."""
        if self._journal is None:
            return  # memory mode
        live = sum(len(objs) for objs in self.objects.values())
        if self._journal_lines >= max(self.compact_at_least, live):
            self._write_config_to_file()  # amortised: at most one rewrite per `live` writes
            return
        self._journal.write(json.dumps([bucket, name, resource]).encode() + b"\n")
        self._journal.flush()  # to the OS: a killed process loses nothing acknowledged
        self._journal_lines += 1

    # ---- reads -------------------------------------------------------------------------
    def live(self, bucket: str, name: str) -> dict | None:
        """A copy of the live resource, or None. NotFound if the bucket does not exist."""
        with self.lock:
            if bucket not in self.buckets:
                raise NotFound(f"No such bucket: {bucket}")
            resource = self.objects.get(bucket, {}).get(name)
            return dict(resource) if resource else None

    def open_live(self, bucket: str, name: str):
        """(resource, open blob) of the live generation, consistent with each other."""
        with self.lock:
            resource = self.live(bucket, name)
            if resource is None:
                raise NotFound(f"No such object: {bucket}/{name}")
            return resource, self.blobs.open(blob_key(bucket, name, resource["generation"]))

    # ---- the listing index ---------------------------------------------------------------
    def _sorted_names(self, bucket: str) -> list[str]:
        objects = self.objects.get(bucket, {})
        names = self._names.get(bucket)
        if names is None or len(names) != len(objects):
            names = self._names[bucket] = sorted(objects)
        return names

    def _index_add(self, bucket: str, name: str) -> None:
        names = self._names.get(bucket)
        if names is not None:
            bisect.insort(names, name)

    def _index_remove(self, bucket: str, name: str) -> None:
        names = self._names.get(bucket)
        if names is not None:
            at = bisect.bisect_left(names, name)
            if at < len(names) and names[at] == name:
                del names[at]

    def list_page(
        self, bucket: str, prefix: str, delimiter: str, after: str, max_results: int
    ) -> tuple[list[dict], list[str], bool]:
        """One objects.list page from the index: (items, prefixes, more items remain).

        Items are the objects under `prefix` whose name sorts after `after` (all of them when
        `after` is empty), in name order, at most `max_results`; with a delimiter, names whose
        rest holds it are rolled up into prefixes instead. Prefixes are gathered only on the
        first page (`after` empty), as the handler serves them all there. Cost: a binary search,
        then the names served and one more to know whether more remain; with a delimiter, one
        name per rolled-up prefix passed (the rest of it is skipped by a binary search), and on
        the first page the names directly under `prefix` up to the last prefix, never the
        objects inside the rolled-up prefixes.
        """
        with self.lock:
            if bucket not in self.buckets:
                raise NotFound(f"No such bucket: {bucket}")
            names = self._sorted_names(bucket)
            objects = self.objects[bucket] if bucket in self.objects else {}
            at = bisect.bisect_right(names, after) if after else bisect.bisect_left(names, prefix)
            items: list[dict] = []
            prefixes: list[str] = []
            more = False
            while at < len(names):
                name = names[at]
                self.names_examined += 1
                if not name.startswith(prefix):
                    break
                head, found, _ = name[len(prefix) :].partition(delimiter) if delimiter else ("", "", "")
                if found:
                    rolled = prefix + head + delimiter
                    if not after:
                        prefixes.append(rolled)
                    at = _past(names, rolled, at)
                    continue
                if len(items) == max_results:
                    more = True
                    if after or not delimiter:
                        break  # the first page with a delimiter walks on for its prefixes
                else:
                    items.append(objects[name])
                at += 1
            return items, sorted(prefixes), more

    # ---- writes ------------------------------------------------------------------------
    def _next_generation(self) -> int:
        self._last_generation = max(time.time_ns() // 1000, self._last_generation + 1)
        return self._last_generation

    def commit(
        self,
        resource: dict,
        content: UploadBuffer | bytes,
        preconditions: Preconditions = Preconditions(),
    ) -> dict:
        """Make `content` the live generation of resource's object if the preconditions hold.

        Raises NotFound (no bucket) or PreconditionFailed; the content is discarded then.
        """
        bucket, name = resource["bucket"], resource["name"]
        with self.object_locks.hold(bucket, name):
            try:
                with self.lock:
                    current = self.live(bucket, name)
                    preconditions.check(current)
                    _with_generation(resource, self._next_generation())
            except Exception:
                if isinstance(content, UploadBuffer):
                    self.blobs.discard(content)
                raise
            key = blob_key(bucket, name, resource["generation"])
            if isinstance(content, UploadBuffer):
                self.blobs.commit(content, key)
            else:
                self.blobs.put_bytes(key, content)
            with self.lock:
                if bucket not in self.buckets:  # deleted while we were writing
                    self.blobs.delete(key)
                    raise NotFound(f"No such bucket: {bucket}")
                objects = self.objects.setdefault(bucket, {})
                if name not in objects:
                    self._index_add(bucket, name)
                objects[name] = resource
                self._record(bucket, name, resource)
            if current:
                self.blobs.delete(blob_key(bucket, name, current["generation"]))
        return dict(resource)

    def update_metadata(
        self, bucket: str, name: str, change, preconditions: Preconditions, generation: str | None = None
    ) -> dict:
        """Apply `change(resource) -> resource` to the live object under its lock."""
        with self.object_locks.hold(bucket, name), self.lock:
            current = self.live(bucket, name)
            if current is None or (generation and generation != current["generation"]):
                raise NotFound(f"No such object: {bucket}/{name}")
            preconditions.check(current)
            updated = change(current)
            self.objects[bucket][name] = updated
            self._record(bucket, name, updated)
            return dict(updated)

    def remove(
        self,
        bucket: str,
        name: str,
        preconditions: Preconditions = Preconditions(),
        generation: str | None = None,
    ) -> None:
        with self.object_locks.hold(bucket, name):
            with self.lock:
                current = self.live(bucket, name)
                if current is None or (generation and generation != current["generation"]):
                    raise NotFound(f"No such object: {bucket}/{name}")
                preconditions.check(current)
                del self.objects[bucket][name]
                self._index_remove(bucket, name)
                self._record(bucket, name, None)
            self.blobs.delete(blob_key(bucket, name, current["generation"]))

    # ---- the library's entry points, used by the handlers we reuse unchanged ------------
    def get_file_obj(self, bucket_name, file_name):
        resource = self.live(bucket_name, file_name)
        if resource is None:
            raise NotFound
        return resource

    def get_file(self, bucket_name, file_name, show_error=True):
        try:
            resource, blob = self.open_live(bucket_name, file_name)
        except FileNotFoundError:
            raise NotFound from None
        with blob:
            return blob.read()

    def create_file(self, bucket_name, file_name, content, file_obj, file_id=None):
        file_obj.update(bucket=bucket_name, name=file_name)
        self.commit(file_obj, content or b"")

    def patch_object(self, bucket_name, file_name, file_obj):
        self.update_metadata(bucket_name, file_name, lambda _: file_obj, Preconditions())

    def delete_file(self, bucket_name, file_name):
        self.remove(bucket_name, file_name)

    def get_file_list(self, *args, **kwargs):
        with self.lock:
            return super().get_file_list(*args, **kwargs)

    def wipe(self, keep_buckets=False):
        with self.lock:
            super().wipe(keep_buckets)
            self._names = {}
            self.blobs.clear()
