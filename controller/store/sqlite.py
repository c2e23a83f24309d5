"""The embedded state store: one SQLite file in WAL mode.

The live index is a `live` column of each document's row, set by the same statement that writes
the body (base.py); a partial index over the live rows makes `list_live` cost what the live
documents cost, however many finished ones the file holds. A file from before the column is
upgraded when opened: the column is added and filled from the bodies once.

Each write is a single transaction with `synchronous=FULL`, so a record that `put` returned for is
on disk and survives `kill -9` (and a power cut, as far as the file system keeps its promises).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller.store.base import (
    AlreadyExists,
    Fenced,
    Liveness,
    VersionConflict,
    Versioned,
    check_key,
)
from controller.store.keys import is_live

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    key TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    version INTEGER NOT NULL,
    fence INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS fence_floor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    fence INTEGER NOT NULL
)
"""


class SqliteStateStore:
    def __init__(self, path: str | Path, *, liveness: Liveness = is_live):
        self.path = str(path)
        self._liveness = liveness
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One connection guarded by a lock: the controller's writes are few and small.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._add_live_index()

    def _add_live_index(self) -> None:
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(documents)")}
        if "live" not in columns:
            self._db.execute("ALTER TABLE documents ADD COLUMN live INTEGER")
        unclassified = self._db.execute("SELECT key, body FROM documents WHERE live IS NULL").fetchall()
        if unclassified:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "UPDATE documents SET live = ? WHERE key = ?",
                [(int(self._liveness(key, json.loads(body))), key) for key, body in unclassified],
            )
            self._db.execute("COMMIT")
        self._db.execute("CREATE INDEX IF NOT EXISTS documents_live ON documents (key) WHERE live = 1")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, key: str) -> Versioned | None:
        check_key(key)
        with self._lock:
            row = self._db.execute("SELECT body, version FROM documents WHERE key = ?", (key,)).fetchone()
        return Versioned(key, json.loads(row[0]), row[1]) if row else None

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int:
        check_key(key)
        body = json.dumps(document, sort_keys=True)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if fence > 0:
                    self._check_floor(key, fence)
                self._db.execute(
                    "INSERT INTO documents (key, body, version, fence, live) VALUES (?, ?, 1, ?, ?)",
                    (key, body, fence, int(self._liveness(key, document))),
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                raise AlreadyExists(key) from None
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return 1

    def _check_floor(self, key: str, fence: int) -> None:
        row = self._db.execute("SELECT fence FROM fence_floor WHERE id = 1").fetchone()
        if row is not None and fence < row[0]:
            raise Fenced(f"{key}: a controller with fence {row[0]} leads now, this writer has {fence}")

    def raise_fence(self, fence: int) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO fence_floor (id, fence) VALUES (1, ?) "
                "ON CONFLICT(id) DO UPDATE SET fence = MAX(fence, excluded.fence)",
                (fence,),
            )

    def put(self, key: str, document: dict[str, Any], *, expected_version: int, fence: int = 0) -> int:
        check_key(key)
        body = json.dumps(document, sort_keys=True)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT version, fence FROM documents WHERE key = ?", (key,)
                ).fetchone()
                if row is None or row[0] != expected_version:
                    raise VersionConflict(
                        f"{key}: expected version {expected_version}, "
                        f"found {'nothing' if row is None else row[0]}"
                    )
                if fence < row[1]:
                    raise Fenced(f"{key}: written under fence {row[1]}, this writer has {fence}")
                self._check_floor(key, fence)
                self._db.execute(
                    "UPDATE documents SET body = ?, version = ?, fence = ?, live = ? WHERE key = ?",
                    (body, expected_version + 1, fence, int(self._liveness(key, document)), key),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return expected_version + 1

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        return self._select(prefix, "")

    def list_live(self, prefix: str = "") -> Iterator[Versioned]:
        return self._select(prefix, "live = 1 AND ")

    def _select(self, prefix: str, condition: str) -> Iterator[Versioned]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._lock:
            rows = self._db.execute(
                f"SELECT key, body, version FROM documents WHERE {condition}key LIKE ? ESCAPE '\\' "
                "ORDER BY key",
                (escaped + "%",),
            ).fetchall()
        for key, body, version in rows:
            yield Versioned(key, json.loads(body), version)

    def delete(self, key: str, *, expected_version: int) -> None:
        check_key(key)
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM documents WHERE key = ? AND version = ?", (key, expected_version)
            )
        if cursor.rowcount != 1:
            raise VersionConflict(f"{key}: not at version {expected_version}")
