"""A new job's first look starts from the record the intake has just created: it does not read
that record back from the store, but it still reads the job's cancel record (a cancel may have
been recorded before the request, or while it was being recorded) before it decides. A new job
whose create-slot turn has not come decides nothing, so its first look reads nothing at all.
Counted at devstack's side with the real clients."""

from __future__ import annotations

import json

import pytest

from controller.store.keys import JOBS_PREFIX
from tests.controller.service.test_engine_live_work import gcs_store_engine, simulated_request
from tests.support.daemon import cancel_vertex_jobs
from tests.support.engine import accept, drive, terminal, vertex_jobs_for


@pytest.fixture(autouse=True)
def _stop_custom_jobs(devstack):
    """Their simulated replicas run until cancelled; left running on the session's devstack, every
    later test's pass would list them."""
    yield
    cancel_vertex_jobs(devstack, {"fresh", "early", "late", "first", "second", "ahead", "queued"})


def _until_first_write(devstack, bucket: str) -> list[str]:
    """The object paths the calls named, up to the first upload (the look's first write)."""
    named = []
    for kind, path in devstack.gcs.calls.recent():
        if f"/b/{bucket}/" not in path:
            continue
        if kind.startswith("POST upload"):
            return named
        named.append(path.split(f"/b/{bucket}/o/", 1)[-1])
    raise AssertionError(f"nothing was written: {named}")


def test_the_first_look_submits_without_reading_back_the_record_just_created(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    assert accept(engine, simulated_request("fresh", bucket)).status == "accepted"
    devstack.gcs.calls.reset()

    engine.serve()  # the job's first look

    stored = engine.store.get(f"{JOBS_PREFIX}fresh").document["state"]
    assert stored["attempts"] and stored["attempts"][0]["vertex_name"], stored  # attempt 1 created
    # Before its first write the look read the cancel record, and not the job's own record (the
    # writes after it, for the create's outcome, read it as any write after an action does).
    before_write = _until_first_write(devstack, bucket)
    assert "state/jobs/fresh.json" not in before_write, before_write
    assert "state/cancels/fresh.json" in before_write, before_write


def test_a_cancel_recorded_before_the_request_cancels_it_on_its_first_look(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    assert engine.cancel("early").status == "cancel"
    assert accept(engine, simulated_request("early", bucket)).status == "accepted"

    engine.serve()

    document = engine.store.get(f"{JOBS_PREFIX}early").document
    assert document["state"]["cancel_requested"] is True
    assert not document["state"]["attempts"]  # no Vertex job was ever made
    assert drive(engine, "early", terminal)["phase"] == "cancelled"


def test_a_cancel_recorded_after_the_request_is_seen_by_the_first_look(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    assert accept(engine, simulated_request("late", bucket)).status == "accepted"
    # Recorded after the job: its enqueue drops the record handed over, so the look reads the store.
    accept(engine, json.dumps({"jobId": "late", "action": "cancel"}).encode())

    engine.serve()

    document = engine.store.get(f"{JOBS_PREFIX}late").document
    assert document["state"]["cancel_requested"] is True
    assert drive(engine, "late", terminal)["phase"] == "cancelled"


def test_a_new_job_waiting_for_a_create_slot_records_nothing_until_its_turn(devstack, bucket, alerts_topic):
    engine = gcs_store_engine(devstack, bucket, alerts_topic, creates_per_minute=1)
    for job_id in ("first", "second"):
        assert accept(engine, simulated_request(job_id, bucket)).status == "accepted"

    engine.serve()  # both first looks: one create slot a minute, so "second" waits

    created, waiting = (engine.store.get(f"{JOBS_PREFIX}{j}") for j in ("first", "second"))
    assert created.document["state"]["attempts"][0]["vertex_name"]
    # Nothing to record while it waits: its record is still the one the intake wrote.
    assert waiting.version == 1 and waiting.document["state"]["phase"] == "accepted", waiting
    assert engine.reconciler.vertex.lane.position("second") == 1

    engine.reconciler.vertex.creates.give_back()  # the minute is over: a slot is free again
    state = drive(engine, "second", lambda d: bool(d["attempts"] and d["attempts"][0].get("vertexJob")))
    assert len(state["attempts"]) == 1, state
    assert engine.reconciler.vertex.get(state["attempts"][0]["vertexJob"]) is not None  # made, at Vertex


def test_a_waiting_new_jobs_first_look_reads_nothing_and_an_earlier_cancel_still_holds(
    devstack, bucket, alerts_topic
):
    engine = gcs_store_engine(devstack, bucket, alerts_topic, creates_per_minute=1)
    assert accept(engine, simulated_request("ahead", bucket)).status == "accepted"
    engine.serve()  # "ahead" takes the minute's only create slot
    assert engine.cancel("queued").status == "cancel"  # before its request
    assert accept(engine, simulated_request("queued", bucket)).status == "accepted"
    devstack.gcs.calls.reset()

    engine.serve()  # its first look: its turn is a minute away

    assert engine.reconciler.vertex.lane.position("queued") == 1
    named = [path for _, path in devstack.gcs.calls.recent() if "queued" in path]
    assert named == []  # neither its record nor its cancel was read, nothing written
    # The cancel is read when the look decides (its turn), or listed by a pass: no Vertex job.
    engine.reconciler.vertex.creates.give_back()
    state = drive(engine, "queued", terminal)
    assert state["phase"] == "cancelled" and not state["attempts"], state
    assert vertex_jobs_for(devstack, "queued") == []
