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

    def write_bytes(self, key: str, data: bytes) -> None: ...
    def read_bytes(self, key: str) -> bytes: ...
    def upload_file(self, local_path: str, key: str) -> None: ...
    def download_file(self, key: str, local_path: str) -> None: ...
    def create_only(self, key: str, data: bytes) -> bool: ...
    def exists(self, key: str) -> bool: ...
    def list_files(self, prefix: str = "") -> list[str]: ...
    def list_dirs(self, prefix: str = "") -> list[str]: ...
    def delete_prefix(self, prefix: str) -> None: ...


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

    def write_bytes(self, key: str, data: bytes) -> None:
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

    def create_only(self, key: str, data: bytes) -> bool:
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
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                out.append(rel.replace(os.sep, "/"))
        return sorted(out)

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

    def write_bytes(self, key: str, data: bytes) -> None:
        self.bucket.blob(self._name(key)).upload_from_string(data)

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
        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        self.bucket.blob(self._name(key)).download_to_filename(local_path)

    def create_only(self, key: str, data: bytes) -> bool:
        from google.api_core import exceptions

        try:
            # ifGenerationMatch=0: the write succeeds only if no live object has this name.
            self.bucket.blob(self._name(key)).upload_from_string(data, if_generation_match=0)
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


def read_marker(store: Storage, step: int) -> layout.CommitMarker | None:
    """The valid commit marker of one step, or None (absent, unreadable, or for another step)."""
    key = layout.commit_marker_path(layout.step_dir_name(step))
    try:
        marker = layout.CommitMarker.from_json(store.read_bytes(key))
    except (FileNotFoundError, layout.LayoutError):
        return None
    return marker if marker.step == step else None


def list_step_dirs(store: Storage) -> list[int]:
    """Steps of every checkpoint directory under the root, committed or not."""
    steps = (layout.parse_step_dir(name) for name in store.list_dirs(""))
    return sorted(s for s in steps if s is not None)


def list_committed_steps(root: str | Storage) -> list[int]:
    store = open_storage(root) if isinstance(root, str) else root
    return [s for s in list_step_dirs(store) if read_marker(store, s) is not None]


def latest_committed(root: str | Storage, at_or_below: int | None = None) -> layout.CommitMarker | None:
    """The newest checkpoint with a valid marker (at or below a step, if given)."""
    store = open_storage(root) if isinstance(root, str) else root
    for step in reversed(list_step_dirs(store)):
        if at_or_below is not None and step > at_or_below:
            continue
        marker = read_marker(store, step)
        if marker is not None:
            return marker
    return None


def read_exit_record(root: str | Storage, attempt: int) -> layout.ExitRecord | None:
    store = open_storage(root) if isinstance(root, str) else root
    key = f"{layout.EXITS_DIR_NAME}/attempt-{attempt:04d}.json"
    try:
        return layout.ExitRecord.from_json(store.read_bytes(key))
    except (FileNotFoundError, layout.LayoutError):
        return None


def write_exit_record(root: str | Storage, record: layout.ExitRecord) -> None:
    store = open_storage(root) if isinstance(root, str) else root
    store.write_bytes(f"{layout.EXITS_DIR_NAME}/attempt-{record.attempt:04d}.json", record.to_json().encode())
