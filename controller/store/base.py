"""The state store contract.

A store maps keys (job ids, or `prefix/name` paths) to JSON documents. Every document has a
version; a write names the version it replaces and is refused if the stored one moved on
(compare-and-set), so two writers can never silently overwrite each other.

Fencing: a write may carry a fence token (the controller's lease generation). The store remembers
the highest fence that wrote each document and refuses a write whose fence is lower, so a former
leader that stalled and wakes up cannot overwrite what the new leader decided. It also keeps a
store-wide floor: a new leader raises it (`raise_fence`) before it acts, and from then on every
fenced write below the floor is refused, creates included, even on documents the new leader has
not touched yet. Fence 0 means "unfenced": the intake's create-only records (any instance may
write them, leader or not) carry it; a `put` with fence 0 is still held to the floor.

The live index: every store classifies each document as it writes it, with a liveness function
(default `keys.is_live`: a job not yet in a terminal phase), and stores the answer *with* the
document, in the same atomic write (a column of the same row, custom metadata of the same GCS
object). `list_live` returns only the documents whose last write was live, so a reconcile pass
reads no finished job, and no crash can leave a live document out of the index: there is no
second write to miss. Documents written before the index existed carry no answer; they are
classified when read (derived on read), so an old store needs no migration step.

Implementations: `sqlite.SqliteStateStore` (embedded, the default) and `gcs.GcsStateStore`
(production). `tests/store/contract.py` holds the tests every implementation must pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")


class StoreError(Exception):
    pass


class AlreadyExists(StoreError):
    """`create` found a document under that key."""


class VersionConflict(StoreError):
    """The document changed since it was read (or does not exist any more)."""


class Fenced(StoreError):
    """A writer with a newer fence token has written this document: stop acting."""


# (key, document) -> whether the document belongs to the live index.
Liveness = Callable[[str, dict[str, Any]], bool]


@dataclass(frozen=True)
class Versioned:
    key: str
    document: dict[str, Any]
    version: int


def check_key(key: str) -> str:
    if not _KEY.match(key) or len(key) > 512:
        raise ValueError(
            f"invalid store key {key!r}: lowercase letters, digits, '.', '_', '-' and '/' separators"
        )
    return key


class StoreOps(Protocol):
    """The reads and writes a `StateStore.together` call's work may make (as the store's own)."""

    def get(self, key: str) -> Versioned | None: ...

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int: ...

    def list(self, prefix: str = "") -> Iterator[Versioned]: ...

    def delete(self, key: str, *, expected_version: int) -> None: ...


class StateStore(Protocol):
    def get(self, key: str) -> Versioned | None:
        """The current document and version, or None."""

    def create(self, key: str, document: dict[str, Any], *, fence: int = 0) -> int:
        """Store a new document; raise AlreadyExists if the key is taken. Returns its version.

        Raises Fenced if `fence` is positive and below the store's fence floor."""

    def put(self, key: str, document: dict[str, Any], *, expected_version: int, fence: int = 0) -> int:
        """Replace the document if its version is still `expected_version`.

        Raises VersionConflict if it is not (or the key is gone), Fenced if a higher fence wrote
        it or `fence` is below the store's fence floor. Returns the new version.
        """

    def raise_fence(self, fence: int) -> None:
        """Refuse every later fenced write below `fence` (a new leader calls it before acting).

        The floor only grows; raising it to a lower value changes nothing."""

    def trust_lease(self, fence: int, held: Callable[[], bool]) -> None:
        """The leader holding fence `fence` says: while `held()` is true, no controller with a
        higher fence exists (a successor can take the lease only after ours ran out), so the
        floor is at most `fence` and writes with exactly `fence` need not look at it. A store
        whose floor check costs nothing may ignore this."""

    def list(self, prefix: str = "") -> Iterator[Versioned]:
        """All documents whose key starts with `prefix`, in key order."""

    def list_live(self, prefix: str = "") -> Iterator[Versioned]:
        """The documents under `prefix` that the store's liveness function called live when they
        were last written, in key order; never a document that was not live at its last write."""

    def delete(self, key: str, *, expected_version: int) -> None:
        """Remove the document if its version is still `expected_version`."""

    def together(self, work: Callable[[StoreOps], T]) -> T:
        """Run `work` on a view of the store and return what it returns.

        A store with transactions (SQLite) runs it as one write: its writes become durable in one
        commit when this returns, and none of them does if `work` raises; what it reads is the
        latest committed state plus its own writes, and no other writer comes in between. A store
        without (GCS) hands `work` the store itself: each call is its own durable step, in order,
        and a raise keeps the steps already made. So a caller must be right under both, which the
        second (one step at a time) covers; the first only saves commits and round trips.
        `work` makes no call but these (on SQLite it runs inside the store's commit)."""
