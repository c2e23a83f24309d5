"""Object bytes, kept apart from object metadata.

Each stored blob is one (bucket, object, generation). Writers stream into an upload buffer
(a temporary file on disk, or a BytesIO in memory) while the checksums are computed on the
fly, so a checkpoint shard of hundreds of MB is never held twice. Committing an upload is a
rename (disk) or a dict insert (memory); readers get a seekable file object, which on disk
stays valid even if the generation is replaced or deleted while it is being read.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import BinaryIO

import google_crc32c


def blob_key(bucket: str, name: str, generation: str | int) -> str:
    # Hashing keeps object names out of the file system: "a" and "a/b" may both be objects.
    raw = f"{bucket}\0{name}\0{generation}".encode()
    return hashlib.sha256(raw).hexdigest()


class UploadBuffer:
    """Bytes of one upload in progress, with running crc32c and md5."""

    def __init__(self, sink: BinaryIO, path: Path | None):
        self._sink = sink
        self.path = path
        self.size = 0
        self._crc32c = google_crc32c.Checksum()
        self._md5 = hashlib.md5()

    def append(self, chunk: bytes) -> None:
        self._sink.write(chunk)
        self._crc32c.update(chunk)
        self._md5.update(chunk)
        self.size += len(chunk)

    @property
    def crc32c(self) -> str:
        return base64.b64encode(self._crc32c.digest()).decode("ascii")

    @property
    def md5(self) -> str:
        return base64.b64encode(self._md5.digest()).decode("ascii")

    def close(self) -> None:
        if self.path is not None:
            self._sink.close()

    def memory_bytes(self) -> bytes:
        """The bytes of an in-memory upload (no path)."""
        return self._sink.getvalue()


class BlobStore:
    """Blob bytes in a directory (`root`) or, with root=None, in memory."""

    def __init__(self, root: str | os.PathLike | None):
        self._lock = threading.Lock()
        self._memory: dict[str, bytes] | None = None
        if root is None:
            self._memory = {}
            self._blobs = self._uploads = None
            return
        self._blobs = Path(root) / "blobs"
        self._uploads = Path(root) / "uploads"
        self._blobs.mkdir(parents=True, exist_ok=True)
        # Unfinished uploads do not survive a restart (their sessions lived in memory).
        shutil.rmtree(self._uploads, ignore_errors=True)
        self._uploads.mkdir(parents=True, exist_ok=True)

    def new_upload(self) -> UploadBuffer:
        if self._memory is not None:
            return UploadBuffer(io.BytesIO(), None)
        path = self._uploads / secrets.token_hex(16)
        return UploadBuffer(open(path, "wb"), path)

    def discard(self, upload: UploadBuffer) -> None:
        upload.close()
        if upload.path is not None:
            upload.path.unlink(missing_ok=True)

    def commit(self, upload: UploadBuffer, key: str) -> None:
        upload.close()
        if self._memory is None:
            os.replace(upload.path, self._blobs / key)
            return
        data = upload.memory_bytes()
        with self._lock:
            self._memory[key] = data

    def put_bytes(self, key: str, data: bytes) -> None:
        if self._memory is not None:
            with self._lock:
                self._memory[key] = bytes(data)
            return
        upload = self.new_upload()
        upload.append(data)
        self.commit(upload, key)

    def open(self, key: str) -> BinaryIO:
        """A readable, seekable view of the blob; FileNotFoundError if it is gone."""
        if self._memory is None:
            return open(self._blobs / key, "rb")
        with self._lock:
            data = self._memory.get(key)
        if data is None:
            raise FileNotFoundError(key)
        return io.BytesIO(data)  # shares the immutable bytes, no copy

    def delete(self, key: str) -> None:
        if self._memory is not None:
            with self._lock:
                self._memory.pop(key, None)
            return
        (self._blobs / key).unlink(missing_ok=True)

    def clear(self) -> None:
        if self._memory is not None:
            with self._lock:
                self._memory.clear()
            return
        for path in self._blobs.iterdir():
            path.unlink(missing_ok=True)
