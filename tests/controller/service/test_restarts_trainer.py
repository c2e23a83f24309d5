"""Restarts in place end to end with the real trainer (DDP on gloo, a paced tiny GPT) and the real
controller on devstack: Vertex restarts the same CustomJob twice (as Google documents for a
reclaimed Spot job), once with a grace to save and once with none, then the job trains to the
end. Each restart is a preemption on the timeline, in `relaunch status` and in goodput, no
failure is spent, no second CustomJob is created, and each run resumes from the newest
checkpoint committed before it started."""

from __future__ import annotations

from datetime import datetime

import pytest

from controller.cli.commands.status import describe_job
from controller.readmodel.goodput import compute
from tests.support.engine import accept, drive, job_document, terminal, vertex_jobs_for
from tests.support.real_trainer import chief_records, trainer_request
from trainer import storage

STEPS = 40
JOB = "inplace-real"


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _committed(root: str) -> dict[int, float]:
    """Every committed step, with the time its commit marker says it was committed."""
    store = storage.open_storage(root)
    found = {}
    for step in storage.list_committed_steps(store):
        marker = storage.read_marker(store, step)
        if marker is not None:
            found[step] = _seconds(marker.wall_time)
    return found


@pytest.mark.slow
def test_two_restarts_in_place_of_the_real_trainer_are_preemptions_and_the_job_succeeds(
    devstack, bucket, make_engine
):
    engine = make_engine()
    root = f"gs://{bucket}/{JOB}"
    accept(engine, trainer_request(JOB, bucket, steps=STEPS, every=2, replicas=2))
    doc = drive(engine, JOB, lambda d: d["phase"] == "running", timeout=120)
    name = doc["attempts"][0]["vertexJob"]
    vertex_id = name.rsplit("/", 1)[-1]

    def runs() -> list:
        return storage.read_run_records(root, 1, vertex_id)

    # Restart 1 once training has committed a few steps, with a grace (the trainer saves at
    # SIGTERM); restart 2 once the second run has committed past its resume step, with none
    # (SIGKILL: no emergency save, no exit record).
    drive(engine, JOB, lambda d: max(_committed(root), default=0) >= 4, timeout=300)
    assert devstack.restart_in_place(name, grace_seconds=15.0)
    drive(engine, JOB, lambda d: len(runs()) == 2, timeout=120)
    resume_2 = runs()[1].resume_step or 0
    drive(engine, JOB, lambda d: max(_committed(root), default=0) > resume_2, timeout=300)
    assert devstack.restart_in_place(name, grace_seconds=0.0)

    doc = drive(engine, JOB, terminal, timeout=300)
    assert (doc["phase"], doc["preemptions"], doc["failures"]) == ("succeeded", 2, 0), doc["terminalReason"]
    assert doc["attempt"] == 1 and len(vertex_jobs_for(devstack, JOB)) == 1  # one CustomJob throughout
    assert doc["latestCheckpointStep"] == STEPS

    # Each run resumed from the newest step committed before it started, as the trainer logs it.
    records = runs()
    assert [r.run for r in records] == [1, 2, 3]
    committed = _committed(root)
    resumed = [r["from_step"] for r in chief_records(devstack, name) if r.get("message") == "resumed"]
    assert resumed == [records[1].resume_step, records[2].resume_step]
    for record in records[1:]:
        started = _seconds(record.time)
        assert record.resume_step in committed
        # Markers carry whole seconds: any newer step was committed after this run began.
        assert all(when >= int(started) for step, when in committed.items() if step > record.resume_step)
    assert records[1].previous_chief is not None and records[1].previous_chief.reason == "preempted"
    assert records[1].resume_step == records[1].previous_chief.last_committed_step  # the emergency save
    assert records[2].previous_chief is None  # SIGKILL: the second run found no record of the first

    (attempt,) = doc["attempts"]
    first, second = attempt["restarts"]
    assert (first["run"], second["run"]) == (2, 3)
    assert not first["previousFailed"] and not second["previousFailed"]
    timeline = [e["what"] for e in job_document(engine, JOB)["timeline"] if "restarted in place" in e["what"]]
    assert len(timeline) == 2 and all("counted as a preemption" in line for line in timeline), timeline
    page = describe_job(doc, now=doc["updatedAt"])
    assert "attempts:    1 (2 preemptions, 0 failures)" in page, page
    assert "restarted in place (run 2), counted as a preemption" in page
    assert "restarted in place (run 3), counted as a preemption" in page
    # The dead time of the first restart (the grace included) is restarting, not running.
    gap = first["startedAt"] - first["previousEndedAt"]
    assert gap > 0
    assert compute(doc, now=doc["updatedAt"]).restarting >= gap - 1e-6
