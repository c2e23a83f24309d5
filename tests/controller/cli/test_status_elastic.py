"""`relaunch status JOB` and `relaunch report JOB` show an elastic job's size: the range, and the
replicas each attempt ran on, marked when shrunk."""

from __future__ import annotations

from dataclasses import replace

from controller.cli.main import main
from controller.core.classify import Ending
from controller.core.decide import new_job
from controller.core.elastic import ElasticPolicy
from controller.core.model import Attempt, Phase
from controller.core.policy import RestartPolicy
from controller.store.keys import job_key
from controller.store.sqlite import SqliteStateStore

T0 = 1_700_000_000.0


def test_status_and_report_show_each_attempts_replicas(tmp_path, monkeypatch, capsys):
    attempts = (
        Attempt(
            1,
            None,
            None,
            False,
            T0,
            submitted_at=T0,
            ended_at=T0 + 900,
            ending=Ending.CAPACITY,
            rule="replaced-by-smaller",
            replicas=(1, 3),
        ),
        Attempt(2, None, None, False, T0 + 900, started_at=T0 + 910, replicas=(1, 1)),
    )
    policy = ElasticPolicy((1, 3), (1, 1), 900.0, "after", 7200.0)
    state = replace(new_job("el-job", RestartPolicy(), T0, policy), phase=Phase.RUNNING, attempts=attempts)
    pools = [{"replicaCount": 1}, {"replicaCount": 3, "minReplicaCount": 1}]
    document = {
        "request": {
            "jobId": "el-job",
            "checkpoint": {"uri": "gs://acme-ckpt/el-job"},
            "jobSpec": {"workerPoolSpecs": pools},
        },
        "state": state.to_dict(),
        "timeline": [],
    }
    db = tmp_path / "state.db"
    SqliteStateStore(db).create(job_key("el-job"), document)
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{db}")

    assert main(["status", "el-job"]) == 0
    out = capsys.readouterr().out
    # The line folds to fit 100 columns; its words are what matter.
    assert (
        "size: 2 of 4 replicas requested, at least 2 (shrink after 900s waiting; grow back: after 7200s)"
        in " ".join(out.split())
    )
    assert "REPLICAS" in out and "4 (1+3)" in out and "2 (1+1) shrunk" in out

    assert main(["report", "el-job"]) == 0
    out = capsys.readouterr().out
    assert "4 replicas" in out and "2 replicas (shrunk)" in out
