"""Counting the requests a stand-in serves, so that a benchmark or a test can say how many Vertex
and GCS calls a controller made without wrapping (or mocking) any Google client."""

from __future__ import annotations

import threading
from collections import Counter, deque


class CallLog:
    """Thread-safe: a count per kind of call, and the most recent calls themselves (bounded)."""

    def __init__(self, keep: int = 20000) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._recent: deque[tuple[str, str]] = deque(maxlen=keep)

    def record(self, kind: str, detail: str = "") -> None:
        with self._lock:
            self._counts[kind] += 1
            self._recent.append((kind, detail))

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def recent(self) -> list[tuple[str, str]]:
        """(kind, detail) of the most recent calls, oldest first."""
        with self._lock:
            return list(self._recent)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._recent.clear()
