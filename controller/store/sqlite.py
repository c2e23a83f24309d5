"""The embedded state store: one SQLite file in WAL mode.

The live index is a `live` column of each document's row, set by the same statement that writes
the body (base.py); a partial index over the live rows makes `list_live` cost what the live
documents cost, however many finished ones the file holds. A file from before the column is
upgraded when opened: the column is added and filled from the bodies once.

Every write is committed with `synchronous=FULL` before it returns, so a record that `create` or
`put` returned for is on disk and survives `kill -9` (and a power cut, as far as the file system
keeps its promises).

Group commit: writes that arrive from several threads at once (the subscriber's callbacks, the
queue's workers) share one transaction, and so one fsync. A writer queues its write; if no batch
is being committed it leads: it commits everything queued, and when done hands the lead to the
oldest write queued meanwhile. Every other writer sleeps on its own event until the batch that
holds its write is committed (or the lead is handed to it), so a commit in progress never makes a
finished writer wait for the next one, and no writer is woken for nothing. Each write runs inside
its own savepoint, so one write's refusal (AlreadyExists, VersionConflict, Fenced) undoes only
that write; no writer returns before the COMMIT that holds its write has returned, so a crash
mid-batch loses only writes nobody was told about.

Reads use a second connection (WAL lets it read the last commit while a batch is being written),
so they never wait behind an fsync.

`together(work)`: reads and writes that belong together (the intake's checkpoint-root claim, the
check of its neighbours and the job's record) run as one write of a batch, on the writing
connection: one commit wait instead of one per write, reads that no other writer can change
before the commit, and all of its writes undone by its savepoint if it raises.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


class _Write:
    """One queued write: `run` executes it on the writing connection inside the batch."""

    __slots__ = ("run", "done", "result", "error", "wake")

    def __init__(self, run: Callable[[sqlite3.Connection], Any]):
        self.run = run
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        # Set when the batch holding this write is committed, or when the lead is handed to it.
        self.wake = threading.Event()


class SqliteStateStore:
    def __init__(self, path: str | Path, *, liveness: Liveness = is_live):
        self.path = str(path)
        self._liveness = liveness
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._lock = threading.Lock()  # the writing connection: held by the thread committing a batch
        self._queue: list[_Write] = []
        self._queue_lock = threading.Lock()  # guards _queue and _leading
        self._leading = False  # a writer is committing a batch (and will hand the lead on)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._add_live_index()
        if self.path == ":memory:":  # a second connection would open a different database
            self._reader, self._read_lock = self._db, self._lock
        else:
            self._reader = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._read_lock = threading.Lock()

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
        if self._reader is not self._db:
            with self._read_lock:
                self._reader.close()
        with self._lock:
            self._db.close()

    def get(self, key: str) -> Versioned | None:
        check_key(key)
        with self._read_lock:
            return _get(self._reader, key)

    # -- group commit ------------------------------------------------------------------------
    def _write(self, run: Callable[[sqlite3.Connection], Any]) -> Any:
        """Queue one write and return once a COMMIT holding it has returned (or raise its error)."""
        write = _Write(run)
        with self._queue_lock:
            self._queue.append(write)
            lead = not self._leading
            self._leading = True
        if not lead:
            write.wake.wait()  # committed by the leader's batch, or the lead handed to this write
        if not write.done:
            self._lead()
        if write.error is not None:
            raise write.error
        return write.result

    def _lead(self) -> None:
        """Commit everything queued, then hand the lead to the oldest write queued meanwhile (or
        give it up when none is): a leader commits one batch, so no writer waits on others' writes."""
        with self._queue_lock:
            batch, self._queue = self._queue, []
        try:
            with self._lock:
                self._commit(batch)
        except BaseException as error:  # not even begun (the commit itself reports its own errors)
            for write in batch:
                if not write.done:
                    write.result, write.error, write.done = None, error, True
            raise
        finally:
            with self._queue_lock:
                if self._queue:
                    self._queue[0].wake.set()  # its writer leads the next batch
                else:
                    self._leading = False
            for write in batch:
                write.wake.set()

    def _commit(self, batch: list[_Write]) -> None:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                for write in batch:
                    db.execute("SAVEPOINT one_write")
                    try:
                        write.result = write.run(db)
                    except (StoreError, sqlite3.IntegrityError) as error:
                        db.execute("ROLLBACK TO one_write")  # undo this write only
                        write.error = error
                    db.execute("RELEASE one_write")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except BaseException as error:
            # Nothing of this batch is durable: every writer in it gets the error.
            for write in batch:
                write.result, write.error = None, error
        for write in batch:
            write.done = True

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int:
        check_key(key)
        body = json.dumps(document, sort_keys=True)
        live = int(self._liveness(key, document))
        return self._write(lambda db: self._insert(db, key, body, live, fence))

    def _insert(self, db: sqlite3.Connection, key: str, body: str, live: int, fence: int) -> int:
        if fence > 0:
            self._check_floor(key, fence)
        try:
            db.execute(
                "INSERT INTO documents (key, body, version, fence, live) VALUES (?, ?, 1, ?, ?)",
                (key, body, fence, live),
            )
        except sqlite3.IntegrityError:
            raise AlreadyExists(key) from None
        return 1

    def _check_floor(self, key: str, fence: int) -> None:
        row = self._db.execute("SELECT fence FROM fence_floor WHERE id = 1").fetchone()
        if row is not None and fence < row[0]:
            raise Fenced(f"{key}: a controller with fence {row[0]} leads now, this writer has {fence}")

    def raise_fence(self, fence: int) -> None:
        def run(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO fence_floor (id, fence) VALUES (1, ?) "
                "ON CONFLICT(id) DO UPDATE SET fence = MAX(fence, excluded.fence)",
                (fence,),
            )

        self._write(run)

    def trust_lease(self, fence: int, held: Callable[[], bool]) -> None:
        """Nothing to save: the floor is read inside each write's own transaction."""

    def put(self, key: str, document: dict[str, Any], *, expected_version: int, fence: int = 0) -> int:
        check_key(key)
        body = json.dumps(document, sort_keys=True)
        live = int(self._liveness(key, document))

        def run(db: sqlite3.Connection) -> int:
            row = db.execute("SELECT version, fence FROM documents WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] != expected_version:
                raise VersionConflict(
                    f"{key}: expected version {expected_version}, "
                    f"found {'nothing' if row is None else row[0]}"
                )
            if fence < row[1]:
                raise Fenced(f"{key}: written under fence {row[1]}, this writer has {fence}")
            self._check_floor(key, fence)
            db.execute(
                "UPDATE documents SET body = ?, version = ?, fence = ?, live = ? WHERE key = ?",
                (body, expected_version + 1, fence, live, key),
            )
            return expected_version + 1

        return self._write(run)

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        return self._select(prefix, "")

    def list_live(self, prefix: str = "") -> Iterator[Versioned]:
        return self._select(prefix, "live = 1 AND ")

    def _select(self, prefix: str, condition: str) -> Iterator[Versioned]:
        with self._read_lock:
            rows = _rows(self._reader, prefix, condition)
        for key, body, version in rows:
            yield Versioned(key, json.loads(body), version)

    def delete(self, key: str, *, expected_version: int) -> None:
        check_key(key)
        self._write(lambda db: _remove(db, key, expected_version))

    def together(self, work: Callable[[StoreOps], T]) -> T:
        """`work` as one write of the group commit: its writes share the batch's COMMIT, and its
        own savepoint undoes them all when it raises (only its writes: the batch goes on)."""

        def run(db: sqlite3.Connection) -> T:
            try:
                return work(_InBatch(self, db))
            except (StoreError, sqlite3.Error):
                raise
            except Exception as error:  # undone like a refused write, and raised to the caller
                raise _Undone(error) from error

        try:
            return self._write(run)
        except _Undone as undone:
            raise undone.error from None


class _Undone(StoreError):
    """A `together` call's work raised something not the store's: its savepoint is rolled back
    (as for a refused write) and the caller gets the error itself."""

    def __init__(self, error: Exception):
        super().__init__(repr(error))
        self.error = error


class _InBatch:
    """The store as a `together` call's work sees it: the writing connection, inside the batch
    that holds the work (reads see the last commit and the batch's writes so far)."""

    def __init__(self, store: SqliteStateStore, db: sqlite3.Connection):
        self._store = store
        self._db = db

    def get(self, key: str) -> Versioned | None:
        check_key(key)
        return _get(self._db, key)

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        rows = _rows(self._db, prefix, "")
        return (Versioned(key, json.loads(body), version) for key, body, version in rows)

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int:
        check_key(key)
        live = int(self._store._liveness(key, document))
        return self._store._insert(self._db, key, json.dumps(document, sort_keys=True), live, fence)

    def delete(self, key: str, *, expected_version: int) -> None:
        check_key(key)
        _remove(self._db, key, expected_version)


def _get(db: sqlite3.Connection, key: str) -> Versioned | None:
    row = db.execute("SELECT body, version FROM documents WHERE key = ?", (key,)).fetchone()
    return Versioned(key, json.loads(row[0]), row[1]) if row else None


def _rows(db: sqlite3.Connection, prefix: str, condition: str) -> list[tuple[str, str, int]]:
    # A key range, not LIKE, so that the primary key's index is used: a prefix listing costs
    # what it returns, not a scan of every document (the intake lists on every request).
    # Every key character sorts below DEL (0x7f), so prefix + DEL bounds the prefix.
    return db.execute(
        f"SELECT key, body, version FROM documents WHERE {condition}key >= ? AND key < ? ORDER BY key",
        (prefix, prefix + "\x7f"),
    ).fetchall()


def _remove(db: sqlite3.Connection, key: str, expected_version: int) -> None:
    cursor = db.execute("DELETE FROM documents WHERE key = ? AND version = ?", (key, expected_version))
    if cursor.rowcount != 1:
        raise VersionConflict(f"{key}: not at version {expected_version}")
