"""`relaunch status JOB` and `relaunch report JOB` show each attempt's checkpoint interval and,
for `auto`, the estimate behind it; a fixed interval reads from the request."""

from __future__ import annotations

from dataclasses import replace

from controller.cli.main import main
from controller.core.classify import Ending
from controller.core.decide import new_job
from controller.core.model import Attempt, Phase
from controller.core.policy import RestartPolicy
from controller.store.keys import job_key
from controller.store.sqlite import SqliteStateStore

T0 = 1_700_000_000.0


def stored(job_id: str, interval, chosen: dict | None) -> dict:
    attempts = (
        Attempt(
            1, None, None, False, T0, started_at=T0, ended_at=T0 + 100, ending=Ending.PREEMPTED, rule="r"
        ),
        Attempt(2, None, None, False, T0 + 101, started_at=T0 + 102),
    )
    state = replace(new_job(job_id, RestartPolicy(), T0), phase=Phase.RUNNING, attempts=attempts)
    checkpoint = {"uri": f"gs://acme-ckpt/{job_id}"}
    if interval is not None:
        checkpoint["interval"] = interval
    document = {
        "request": {"jobId": job_id, "checkpoint": checkpoint},
        "state": state.to_dict(),
        "timeline": [],
    }
    if chosen is not None:
        document["checkpointIntervals"] = chosen
        document["trainerFigures"] = {"1": {"stepAtEnd": 90, "lastCommittedStep": 60, "stallSeconds": 1.5}}
    return document


def test_status_and_report_show_the_interval_and_the_estimate_per_attempt(tmp_path, monkeypatch, capsys):
    db = tmp_path / "state.db"
    store = SqliteStateStore(db)
    chosen = {
        "1": {"seconds": 1800.0, "mode": "auto", "explanation": "prior only, nothing observed yet"},
        "2": {
            "seconds": 420.5,
            "mode": "auto",
            "explanation": "work-losing endings 2/h; 1 work-losing ending(s)",
        },
    }
    store.create(job_key("auto-job"), stored("auto-job", "auto", chosen))
    store.create(job_key("fixed-job"), stored("fixed-job", 600.0, None))
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{db}")

    assert main(["status", "auto-job"]) == 0
    out = capsys.readouterr().out
    assert "CKPT EVERY" in out and "1800.0s auto" in out and "420.5s auto" in out
    assert "attempt 2 interval: work-losing endings 2/h; 1 work-losing ending(s)" in out

    assert main(["report", "auto-job"]) == 0
    out = capsys.readouterr().out
    assert "attempt 1:" in out and "(trainer)" in out and "checkpoint every 1800.0 s (auto)" in out
    assert "attempt 2:" in out and "checkpoint every 420.5 s (auto)" in out

    assert main(["status", "fixed-job"]) == 0
    out = capsys.readouterr().out
    assert "600.0s fixed" in out and "interval:" not in out
