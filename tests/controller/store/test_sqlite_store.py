import os
import signal
import subprocess
import sys
import textwrap

import pytest

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
