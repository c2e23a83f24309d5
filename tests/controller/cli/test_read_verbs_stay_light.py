"""Read-only verbs load no Vertex AI or Pub/Sub client: `relaunch status` should cost a file read,
not a client library's start-up (the Vertex library alone takes seconds to import)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("google.cloud.aiplatform_v1", "google.cloud.pubsub_v1", "matplotlib", "torch")

PROBE = f"""
import json, sys
from controller.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


@pytest.mark.parametrize("verb", [["status"], ["status", "no-such-job"], ["events", "no-such-job"]])
def test_read_verbs_import_no_cloud_client(verb, tmp_path):
    from controller.store.sqlite import SqliteStateStore

    SqliteStateStore(tmp_path / "state.db")  # an empty store, as a controller leaves it
    env = {"RELAUNCH_STATE_STORE": f"sqlite:///{tmp_path}/state.db", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *verb], capture_output=True, text=True, env=env, timeout=60
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], f"`relaunch {' '.join(verb)}` imported {result['loaded']}"
    assert result["code"] in (0, 1, 2)  # it ran to an answer (an empty table, or "no such job")
