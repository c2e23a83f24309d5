import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from controller.store import AlreadyExists
from controller.store.sqlite import SqliteStateStore
from tests.support.store_contract import StateStoreContract


class TestSqliteStateStore(StateStoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        store = SqliteStateStore(tmp_path / "state.db")
        yield store
        store.close()


def test_every_acknowledged_write_survives_kill_9(tmp_path):
    """A writer killed with SIGKILL mid-stream loses nothing it had reported as written."""
    db = tmp_path / "state.db"
    writer = textwrap.dedent(f"""
        import sys
        from controller.store.sqlite import SqliteStateStore
        store = SqliteStateStore({str(db)!r})
        store.create("job", {{"n": 0}})
        version = 1
        for n in range(1, 100000):
            version = store.put("job", {{"n": n}}, expected_version=version)
            print(n, flush=True)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    acknowledged = 0
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 200:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    found = SqliteStateStore(db).get("job")
    # The write acknowledged last is durable; at most the one in flight may also have landed.
    assert found.document["n"] >= acknowledged
    assert found.version == found.document["n"] + 1


def test_a_file_from_before_the_live_index_is_upgraded_when_opened(tmp_path):
    import json
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE documents (key TEXT PRIMARY KEY, body TEXT NOT NULL, version INTEGER NOT NULL,"
        " fence INTEGER NOT NULL)"
    )
    for key, phase in (("jobs/a", "running"), ("jobs/b", "succeeded")):
        db.execute(
            "INSERT INTO documents VALUES (?, ?, 1, 0)", (key, json.dumps({"state": {"phase": phase}}))
        )
    db.commit()
    db.close()

    store = SqliteStateStore(path)

    assert [v.key for v in store.list_live("jobs/")] == ["jobs/a"]
    assert [v.key for v in store.list("jobs/")] == ["jobs/a", "jobs/b"]


def commits_of(store: SqliteStateStore) -> list[str]:
    """The COMMITs the store's writing connection makes from now on (each one fsync)."""
    seen: list[str] = []
    store._db.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
    return seen


def test_togethers_writes_land_in_one_commit_or_not_at_all(tmp_path):
    store = SqliteStateStore(tmp_path / "state.db")
    commits = commits_of(store)

    def both(view):
        view.create("claims/a", {"owner": "x"})
        return view.create("jobs/x", {"n": 1})

    assert store.together(both) == 1
    assert len(commits) == 1
    assert store.get("claims/a") is not None and store.get("jobs/x") is not None

    def half_then_fail(view):
        view.create("claims/b", {"owner": "y"})
        view.create("jobs/x", {"n": 2})  # refused: AlreadyExists, not caught

    with pytest.raises(AlreadyExists):
        store.together(half_then_fail)
    assert store.get("claims/b") is None  # undone with the work
    assert store.get("jobs/x").document == {"n": 1}
    store.close()


def test_a_failing_together_undoes_only_its_own_writes_in_a_shared_commit(tmp_path):
    """Writers that share the failing work's batch keep theirs."""
    store = SqliteStateStore(tmp_path / "state.db")
    barrier = threading.Barrier(9)
    errors: list[BaseException] = []

    def failing(view):
        view.create("claims/bad", {})
        raise RuntimeError("bug")

    def writer(i: int) -> None:
        barrier.wait()
        try:
            if i == 0:
                store.together(failing)
            else:
                store.together(lambda view: view.create(f"jobs/w{i}", {"n": i}))
        except RuntimeError as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [str(e) for e in errors] == ["bug"]
    assert store.get("claims/bad") is None
    assert [v.key for v in store.list("jobs/")] == [f"jobs/w{i}" for i in range(1, 9)]
    store.close()


def test_togethers_acknowledged_by_writers_side_by_side_survive_kill_9_whole(tmp_path):
    """Eight threads each record pairs of documents with `together` (as the intake records a
    claim and its job), sharing the group commit; killed with SIGKILL mid-stream: every pair a
    writer reported is there, and no pair is there in half (a pair lands whole or not at all)."""
    db = tmp_path / "state.db"
    writer = textwrap.dedent(f"""
        import threading
        from controller.store.sqlite import SqliteStateStore
        store = SqliteStateStore({str(db)!r})
        out = threading.Lock()

        def record(thread):
            for n in range(100000):
                def pair(ops, n=n):
                    ops.create(f"claims/t{{thread}}-{{n}}", {{"n": n}})
                    return ops.create(f"jobs/t{{thread}}-{{n}}", {{"n": n}})
                store.together(pair)
                with out:
                    print(thread, n, flush=True)

        for thread in range(8):
            threading.Thread(target=record, args=(thread,), daemon=True).start()
        threading.Event().wait()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    acknowledged: set[str] = set()
    for line in proc.stdout:
        thread, n = line.split()
        acknowledged.add(f"t{thread}-{n}")
        if len(acknowledged) >= 400:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    assert len(acknowledged) >= 400, "the writer stopped before it was killed"
    store = SqliteStateStore(db)
    claims = {v.key.removeprefix("claims/") for v in store.list("claims/")}
    jobs = {v.key.removeprefix("jobs/") for v in store.list("jobs/")}
    store.close()
    assert acknowledged <= jobs, sorted(acknowledged - jobs)[:5]
    assert claims == jobs, (sorted(claims - jobs)[:5], sorted(jobs - claims)[:5])
