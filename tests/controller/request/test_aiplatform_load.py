"""The Vertex API package is imported once, by one thread, however many threads reach for it
first: its `__init__` and its services import each other, and two threads importing it at once
can each see the other's half-built module (ImportError). Here the import itself is replaced by a
slow stand-in (our own seam, no Google class), and the threads are released together."""

from __future__ import annotations

import threading
import types

import pytest

from controller.request import aiplatform


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(aiplatform, "_module", None)
    calls: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def slow_import(name: str) -> types.ModuleType:
        calls.append(name)
        inside.set()
        release.wait(timeout=30)  # the import takes as long as the test says
        return types.SimpleNamespace(CustomJobSpec="spec")  # type: ignore[return-value]

    monkeypatch.setattr(aiplatform.importlib, "import_module", slow_import)
    return calls, inside, release


def test_threads_that_reach_for_the_package_together_import_it_once(fresh):
    calls, inside, release = fresh
    start, got = threading.Barrier(9), []  # eight threads and this one

    def first_use():
        start.wait()
        got.append(aiplatform.aiplatform_v1.CustomJobSpec)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    start.wait()  # all eight are reaching for the package now
    assert inside.wait(timeout=30)  # one of them is inside the import, the others arrive meanwhile
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert calls == ["google.cloud.aiplatform_v1"]
    assert got == ["spec"] * 8


def test_once_loaded_a_read_does_not_wait_for_the_lock(fresh):
    fresh[2].set()
    aiplatform.load()
    with aiplatform._lock:  # held by someone else: a loaded module is still read at once
        assert aiplatform.aiplatform_v1.CustomJobSpec == "spec"
