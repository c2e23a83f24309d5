"""Restarts in place on devstack with the real controller: Vertex restarts the same CustomJob (as
Google documents for a reclaimed Spot job), the trainer's chief records each run, and the
controller counts each restart as a preemption, on the timeline and in goodput, without a new
attempt. The stand-in trainer writes its run record through the real trainer's
`trainer.storage.record_run_start`."""

from controller.readmodel.goodput import compute
from tests.controller.service.test_engine_devstack import _wait_for_progress
from tests.support.engine import accept, drive, job_document, request, terminal

ENDLESS = ["--steps", "100000", "--every", "2", "--step-seconds", "0.02"]


def test_two_restarts_in_place_are_counted_on_the_timeline_and_in_goodput(devstack, bucket, make_engine):
    engine = make_engine()
    accept(engine, request("inplace-2", bucket, args=ENDLESS, replicas=2, policy={"maxFailures": 0}), {})
    doc = _wait_for_progress(engine, "inplace-2", 1, 0)
    name = doc["attempts"][0]["vertexJob"]
    # With a warning (the chief records `preempted`), then without one (SIGKILL: no record at all).
    for count, grace in ((1, 1.0), (2, 0.0)):
        step = doc["latestCheckpointStep"] or 0
        assert devstack.restart_in_place(name, grace_seconds=grace)
        doc = drive(
            engine,
            "inplace-2",
            lambda d, n=count, s=step: d["preemptions"] == n and (d["latestCheckpointStep"] or 0) > s,
        )
    assert doc["phase"] == "running" and doc["attempt"] == 1 and doc["failures"] == 0
    (attempt,) = doc["attempts"]
    assert attempt["vertexJob"] == name  # the same CustomJob throughout
    first, second = attempt["restarts"]
    assert (first["run"], second["run"]) == (2, 3)
    assert not first["previousFailed"] and not second["previousFailed"]
    assert first["previousEndedAt"] is not None and first["previousReason"] == "preempted"
    assert second["previousEndedAt"] is None and "no exit record" in second["evidence"]
    timeline = job_document(engine, "inplace-2")["timeline"]
    lines = [e["what"] for e in timeline if "restarted in place" in e["what"]]
    assert len(lines) == 2 and all("counted as a preemption" in line for line in lines)
    # The first restart's dead time is restarting, not running.
    gap = first["startedAt"] - first["previousEndedAt"]
    assert gap > 0
    result = compute(doc, now=doc["updatedAt"])
    assert result.restarting >= gap - 1e-6
    engine.cancel("inplace-2")
    assert drive(engine, "inplace-2", terminal)["phase"] == "cancelled"
