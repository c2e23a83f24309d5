"""Checkpoint storage for `gs://` URIs and local paths (`file://` or plain), torch-free.

A `Storage` is rooted at one URI; keys are '/'-separated paths below that root. Writes are
whole-object and atomic (readers see the old object or the new one, never a torn one); the
commit marker goes through `create_only`, which refuses to overwrite an existing object.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from typing import Protocol

from trainer import layout

# Above this size uploads use the resumable protocol in chunks, so a flaky connection costs
# one chunk, not the whole shard.
RESUMABLE_CHUNK_BYTES = 32 * 1024 * 1024


class StorageError(RuntimeError):
    pass


class Storage(Protocol):
    uri: str

    # `metadata`: custom metadata for the object (GCS keeps it; a local file has nowhere to).
    def write_bytes(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None: ...
    def read_bytes(self, key: str) -> bytes: ...
    def upload_file(self, local_path: str, key: str) -> None: ...
    def download_file(self, key: str, local_path: str) -> None: ...
    def create_only(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> bool: ...
    def exists(self, key: str) -> bool: ...
    def list_files(self, prefix: str = "") -> list[str]: ...
    def list_dirs(self, prefix: str = "") -> list[str]: ...
    def delete_prefix(self, prefix: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def move_prefix(self, src: str, dst: str) -> None: ...
    def list_temp_files(self, prefix: str = "") -> list[str]: ...


def open_storage(uri: str) -> Storage:
    if uri.startswith("gs://"):
        return GcsStorage(uri)
    if uri.startswith("file://"):
        return LocalStorage(uri[len("file://") :])
    if "://" in uri:
        raise StorageError(f"unsupported storage URI {uri!r} (use gs://, file:// or a path)")
    return LocalStorage(uri)


def sha256_of_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalStorage:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.uri = "file://" + self.root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *[p for p in key.split("/") if p])

    def _temp_beside(self, path: str) -> str:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return f"{path}.tmp-{uuid.uuid4().hex}"

    def write_bytes(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        path = self._path(key)
        tmp = self._temp_beside(path)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def read_bytes(self, key: str) -> bytes:
        with open(self._path(key), "rb") as fh:
            return fh.read()

    def upload_file(self, local_path: str, key: str) -> None:
        path = self._path(key)
        tmp = self._temp_beside(path)
        shutil.copyfile(local_path, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def download_file(self, key: str, local_path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        shutil.copyfile(self._path(key), local_path)

    def create_only(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> bool:
        # Write the full content under a private name first (O_EXCL), then hard-link it into
        # place: link() fails if the name exists, and a reader never sees a half-written marker.
        path = self._path(key)
        tmp = self._temp_beside(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        finally:
            os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def list_files(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if layout.is_temp_name(name):
                    continue  # an unfinished write (ours, or one killed mid-way): not an object
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                out.append(rel.replace(os.sep, "/"))
        return sorted(out)

    def list_temp_files(self, prefix: str = "") -> list[str]:
        """Leftovers of writes that never finished (a killed process), below a prefix."""
        out = []
        for dirpath, _dirs, files in os.walk(self._path(prefix)):
            for name in files:
                if layout.is_temp_name(name):
                    out.append(os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/"))
        return sorted(out)

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def move_prefix(self, src: str, dst: str) -> None:
        # One rename: readers see the directory at the old name or the new one, never half of it.
        target = self._path(dst)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(self._path(src), target)

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self._path(prefix)
        try:
            return sorted(e.name for e in os.scandir(base) if e.is_dir())
        except FileNotFoundError:
            return []

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class GcsStorage:
    def __init__(self, uri: str):
        from google.cloud import storage as gcs  # imported lazily: local runs need no client

        rest = uri[len("gs://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StorageError(f"no bucket in {uri!r}")
        self.uri = uri.rstrip("/")
        self.prefix = prefix.strip("/")
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # The client reads STORAGE_EMULATOR_HOST for the endpoint; the emulator needs no
            # credentials, and looking them up would fail on a developer machine.
            from google.auth.credentials import AnonymousCredentials

            project = os.environ.get("GOOGLE_CLOUD_PROJECT", "relaunch-dev")
            self.client = gcs.Client(project=project, credentials=AnonymousCredentials())
        else:
            self.client = gcs.Client()
        self.bucket = self.client.bucket(bucket)

    def _name(self, key: str) -> str:
        key = key.strip("/")
        if not self.prefix:
            return key
        return f"{self.prefix}/{key}" if key else self.prefix

    def _dir_name(self, prefix: str) -> str:
        name = self._name(prefix)
        return f"{name}/" if name else ""

    def write_bytes(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        blob = self.bucket.blob(self._name(key))
        blob.metadata = metadata or None  # sent with the upload: one request
        blob.upload_from_string(data)

    def read_bytes(self, key: str) -> bytes:
        from google.api_core import exceptions

        try:
            return self.bucket.blob(self._name(key)).download_as_bytes()
        except exceptions.NotFound as exc:
            raise FileNotFoundError(self._name(key)) from exc

    def upload_file(self, local_path: str, key: str) -> None:
        blob = self.bucket.blob(self._name(key))
        if os.path.getsize(local_path) > RESUMABLE_CHUNK_BYTES:
            blob.chunk_size = RESUMABLE_CHUNK_BYTES  # chunked resumable upload
        blob.upload_from_filename(local_path)

    def download_file(self, key: str, local_path: str) -> None:
        from google.api_core import exceptions

        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        try:
            self.bucket.blob(self._name(key)).download_to_filename(local_path)
        except exceptions.NotFound as exc:  # a missing shard, told apart from a failed read
            raise FileNotFoundError(self._name(key)) from exc

    def create_only(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> bool:
        from google.api_core import exceptions

        blob = self.bucket.blob(self._name(key))
        blob.metadata = metadata or None
        try:
            # ifGenerationMatch=0: the write succeeds only if no live object has this name.
            blob.upload_from_string(data, if_generation_match=0)
            return True
        except exceptions.PreconditionFailed:
            return False

    def exists(self, key: str) -> bool:
        return self.bucket.blob(self._name(key)).exists()

    def list_files(self, prefix: str = "") -> list[str]:
        start = len(self.prefix) + 1 if self.prefix else 0
        blobs = self.client.list_blobs(self.bucket, prefix=self._dir_name(prefix))
        return sorted(b.name[start:] for b in blobs)

    def list_dirs(self, prefix: str = "") -> list[str]:
        listing = self.client.list_blobs(self.bucket, prefix=self._dir_name(prefix), delimiter="/")
        for _page in listing.pages:  # prefixes fill in while the pages are read
            pass
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing.prefixes)

    def delete_prefix(self, prefix: str) -> None:
        for blob in self.client.list_blobs(self.bucket, prefix=self._dir_name(prefix)):
            try:
                blob.delete()
            except Exception:  # best effort: a leftover shard is harmless
                pass

    def list_temp_files(self, prefix: str = "") -> list[str]:
        return []  # GCS objects appear whole at the end of their upload: no temp names

    def delete(self, key: str) -> None:
        from google.api_core import exceptions

        try:
            self.bucket.blob(self._name(key)).delete()
        except exceptions.NotFound:
            pass

    def move_prefix(self, src: str, dst: str) -> None:
        # GCS has no rename: copy every object (server side), then delete the originals. The
        # quarantine marker is deleted last and the commit marker first, so a move cut short
        # leaves a directory that is still quarantined or not committed, never a trusted one.
        start = len(self.prefix) + 1 if self.prefix else 0
        keys = [b.name[start:] for b in self.client.list_blobs(self.bucket, prefix=self._dir_name(src))]
        src_dir = src.strip("/") + "/"
        for key in keys:
            self.bucket.copy_blob(
                self.bucket.blob(self._name(key)), self.bucket, self._name(dst + "/" + key[len(src_dir) :])
            )

        def order(key: str) -> int:
            name = key.rsplit("/", 1)[-1]
            return (
                0 if name == layout.COMMIT_MARKER_NAME else 2 if name == layout.QUARANTINE_MARKER_NAME else 1
            )

        for key in sorted(keys, key=order):
            self.delete(key)


def read_marker(store: Storage, step: int) -> layout.CommitMarker | None:
    """The valid commit marker of one step, or None (absent, unreadable, or for another step)."""
    key = layout.commit_marker_path(layout.step_dir_name(step))
    try:
        marker = layout.CommitMarker.from_json(store.read_bytes(key))
    except (FileNotFoundError, layout.LayoutError):
        return None
    return marker if marker.step == step else None


def read_quarantine(store: Storage, step: int) -> layout.QuarantineRecord | None:
    """The quarantine marker of one step, or None if that step is not quarantined."""
    key = layout.quarantine_marker_path(layout.step_dir_name(step))
    try:
        data = store.read_bytes(key)
    except FileNotFoundError:
        return None
    try:
        return layout.QuarantineRecord.from_json(data)
    except layout.LayoutError:
        # Garbled, but someone meant to quarantine this step: it stays quarantined.
        return layout.QuarantineRecord(step, "unreadable_marker", "QUARANTINED.json is garbled", "", 0)


def is_quarantined(store: Storage, step: int) -> bool:
    return read_quarantine(store, step) is not None


def quarantine(store: Storage, record: layout.QuarantineRecord) -> bool:
    """Mark a step unusable (create-only). False if it already was."""
    key = layout.quarantine_marker_path(layout.step_dir_name(record.step))
    return store.create_only(key, record.to_json().encode())


def read_usable_marker(store: Storage, step: int) -> layout.CommitMarker | None:
    """The commit marker of a step that is committed and not quarantined, else None."""
    marker = read_marker(store, step)
    if marker is None or is_quarantined(store, step):
        return None
    return marker


def list_step_dirs(store: Storage) -> list[int]:
    """Steps of every checkpoint directory under the root, committed or not."""
    steps = (layout.parse_step_dir(name) for name in store.list_dirs(""))
    return sorted(s for s in steps if s is not None)


def list_committed_steps(root: str | Storage) -> list[int]:
    """Steps with a valid commit marker and no quarantine marker: the checkpoints anyone may use."""
    store = open_storage(root) if isinstance(root, str) else root
    return [s for s in list_step_dirs(store) if read_usable_marker(store, s) is not None]


def list_quarantined_steps(root: str | Storage) -> list[int]:
    store = open_storage(root) if isinstance(root, str) else root
    return [s for s in list_step_dirs(store) if is_quarantined(store, s)]


def latest_committed(root: str | Storage, at_or_below: int | None = None) -> layout.CommitMarker | None:
    """The newest usable checkpoint (committed, not quarantined), at or below a step if given."""
    store = open_storage(root) if isinstance(root, str) else root
    for step in reversed(list_step_dirs(store)):
        if at_or_below is not None and step > at_or_below:
            continue
        marker = read_usable_marker(store, step)
        if marker is not None:
            return marker
    return None


def read_exit_record(
    root: str | Storage, attempt: int, vertex_job_id: str | None = None
) -> layout.ExitRecord | None:
    """An attempt's exit record: the one keyed by its CustomJob id if given, else the legacy name."""
    store = open_storage(root) if isinstance(root, str) else root
    try:
        return layout.ExitRecord.from_json(store.read_bytes(layout.exit_record_key(attempt, vertex_job_id)))
    except (FileNotFoundError, layout.LayoutError):
        return None


def write_exit_record(root: str | Storage, record: layout.ExitRecord) -> None:
    """Write the record under its CustomJob's own name and, for readers that do not know the id
    yet, under the legacy `exits/attempt-NNNN.json` (last writer wins there)."""
    store = open_storage(root) if isinstance(root, str) else root
    data = record.to_json().encode()
    meta = layout.record_metadata(data)
    if record.vertex_job_id:
        store.write_bytes(layout.exit_record_key(record.attempt, record.vertex_job_id), data, meta)
    store.write_bytes(layout.exit_record_key(record.attempt), data, meta)


def write_replica_exit(root: str | Storage, record: layout.ReplicaExit) -> None:
    store = open_storage(root) if isinstance(root, str) else root
    key = layout.replica_exit_key(record.attempt, record.vertex_job_id, record.replica)
    data = record.to_json().encode()
    store.write_bytes(key, data, layout.record_metadata(data))


def read_replica_exits(
    root: str | Storage, attempt: int, vertex_job_id: str | None = None
) -> list[layout.ReplicaExit]:
    """Every replica's exit record of one attempt's CustomJob (garbled ones skipped)."""
    store = open_storage(root) if isinstance(root, str) else root
    keys = layout.list_replica_exit_paths(
        store.list_files(layout.replica_exits_key(attempt, vertex_job_id)), attempt, vertex_job_id
    )
    out = []
    for key in keys:
        try:
            out.append(layout.ReplicaExit.from_json(store.read_bytes(key)))
        except (FileNotFoundError, layout.LayoutError):
            continue
    return out


def read_run_records(root: str | Storage, attempt: int, vertex_job_id: str | None) -> list[layout.RunRecord]:
    """The run records of one attempt's CustomJob, in run order (garbled ones skipped)."""
    store = open_storage(root) if isinstance(root, str) else root
    folder = layout.runs_key(attempt, vertex_job_id)
    keys = sorted(
        (run, key) for key in store.list_files(folder) if (run := layout.parse_run_key(key)) is not None
    )
    out = []
    for _, key in keys:
        try:
            out.append(layout.RunRecord.from_json(store.read_bytes(key)))
        except (FileNotFoundError, layout.LayoutError):
            continue
    return out


def record_run_start(
    root: str | Storage, job_id: str, attempt: int, vertex_job_id: str, resume_step: int | None
) -> layout.RunRecord:
    """Record that a run of this attempt's CustomJob begins (its chief calls it once, first).

    A run that finds earlier ones is a restart in place: it keeps the previous run's exit
    records (`layout.records_of_run`: older ones speak of an older run) before this run's own
    overwrite them. Create-only, so two writers never share a run number."""
    store = open_storage(root) if isinstance(root, str) else root
    for _ in range(5):
        runs = read_run_records(store, attempt, vertex_job_id)
        previous = runs[-1] if runs else None
        number = previous.run + 1 if previous is not None else 1
        chief: layout.ExitRecord | None = None
        replicas: tuple[layout.ReplicaExit, ...] = ()
        if previous is not None:
            chief, replicas = layout.records_of_run(
                previous,
                read_exit_record(store, attempt, vertex_job_id),
                read_replica_exits(store, attempt, vertex_job_id),
            )
        record = layout.RunRecord(
            job_id=job_id,
            attempt=attempt,
            vertex_job_id=vertex_job_id,
            run=number,
            resume_step=resume_step,
            previous_started=previous.time if previous is not None else None,
            previous_chief=chief,
            previous_replicas=replicas,
        )
        data = record.to_json().encode()
        if store.create_only(
            layout.run_record_key(attempt, vertex_job_id, number), data, layout.record_metadata(data)
        ):
            return record
    raise StorageError(f"could not record the start of a run of attempt {attempt}: run numbers kept clashing")
