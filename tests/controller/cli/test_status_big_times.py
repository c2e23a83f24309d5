"""`relaunch status` shows a job whose stored times no calendar can hold (a backoff of 1e308 s
accepted before requests were bounded) instead of crashing with OverflowError (issue 12, finding 5)."""

from __future__ import annotations

from dataclasses import replace

from controller.cli.main import main
from controller.core.decide import new_job
from controller.core.model import Phase
from controller.core.policy import Backoff, RestartPolicy
from controller.store.keys import job_key
from controller.store.sqlite import SqliteStateStore


def test_status_of_a_job_backing_off_until_1e308_prints_and_exits_0(tmp_path, monkeypatch, capsys):
    db = tmp_path / "state.db"
    policy = RestartPolicy(backoff=Backoff(initial_seconds=1e308, max_seconds=1e308))
    state = replace(
        new_job("far-future", policy, 1_700_000_000.0), phase=Phase.BACKING_OFF, next_attempt_at=1e308
    )
    document = {
        "request": {"jobId": "far-future", "checkpoint": {"uri": "gs://acme-ckpt/far-future"}},
        "fingerprint": "x",
        "state": state.to_dict(),
        "timeline": [{"time": 1e308, "attempt": 0, "what": "backing off"}],
    }
    SqliteStateStore(db).create(job_key("far-future"), document)
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{db}")

    assert main(["status", "far-future"]) == 0
    assert "beyond 9999-12-31" in capsys.readouterr().out
    assert main(["status"]) == 0
    assert main(["events", "far-future"]) == 0
