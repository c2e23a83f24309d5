"""`relaunch controller` as a real process under load: recovery beside a slow reconcile pass,
creates queued for quota in order and visible in status, and an intake killed mid-batch."""

from __future__ import annotations

import sqlite3
import threading

from devstack.stack import EVENTS_TOPIC
from tests.support.daemon import cancel_vertex_jobs, vertex_jobs_for, wait_for
from tests.support.daemon import publish as support_publish
from tests.support.engine import PROJECT, request


def publish(body: bytes, topic: str) -> None:
    support_publish(PROJECT, topic, body)


def _is_reconcile_listing(list_request) -> bool:
    """The pass lists by the managed-by label; a submission's look-up also names its job."""
    return "relaunch-job" not in list_request.filter


def test_a_preemption_is_recovered_while_a_reconcile_pass_is_held_in_its_listing(
    devstack, bucket, tmp_path, settings, controllers
):
    job_id = "scale-held-pass"
    # Devstack's job events reach this controller (a subscription of its own): the preemption is
    # heard at once, not found by a pass.
    settings = {**settings, "RELAUNCH_EVENTS_TOPIC": EVENTS_TOPIC}
    controller = controllers(devstack.env(), tmp_path / "ctl.log", **settings)
    controller.wait_ready("leader")
    publish(
        request(job_id, bucket, args=["--steps", "100000", "--every", "50"]),
        settings["RELAUNCH_REQUESTS_TOPIC"],
    )
    doc = wait_for(
        lambda: (d := controller.job(job_id)) and d["phase"] == "running" and d, what="job running"
    )
    first = doc["attempts"][-1]["vertexJob"]

    gate = threading.Event()
    devstack.vertex.set_api_delay("ListCustomJobs", until=gate, only_if=_is_reconcile_listing)
    try:
        # A pass is now stuck in its ListCustomJobs (1 s period: the next pass starts at once).
        wait_for(
            lambda: devstack.vertex.delays.held("ListCustomJobs") >= 1, what="a pass held in its listing"
        )
        devstack.preempt(first, grace_seconds=5, end_job=True)
        wait_for(
            lambda: vertex_jobs_for(devstack, job_id, attempt=2),
            timeout=120,
            what="the replacement created while the pass is held",
        )
        # The pass has not moved: the recovery did not wait for it.
        assert devstack.vertex.delays.held("ListCustomJobs") >= 1
        assert not gate.is_set()
    finally:
        gate.set()
        devstack.vertex.set_api_delay("ListCustomJobs", 0)
    wait_for(lambda: (d := controller.job(job_id)) and d["attempt"] == 2 and d["attempts"][-1]["vertexJob"])
    controller.stop()
    cancel_vertex_jobs(devstack, {job_id})


def test_creates_beyond_the_quota_wait_in_order_and_status_shows_each_jobs_place(
    devstack, bucket, tmp_path, settings, controllers
):
    controller = controllers(
        devstack.env(), tmp_path / "ctl.log", **settings, RELAUNCH_CREATES_PER_MINUTE="1"
    )
    controller.wait_ready("leader")
    job_ids = [f"scale-quota-{i}" for i in range(3)]
    for job_id in job_ids:  # published one by one: each is accepted (ready) after the one before
        publish(request(job_id, bucket, args=["--steps", "3"]), settings["RELAUNCH_REQUESTS_TOPIC"])
        wait_for(lambda job_id=job_id: controller.job(job_id), what=f"{job_id} accepted")

    def places() -> dict[str, int] | None:
        documents = {job_id: controller.job(job_id) for job_id in job_ids}
        queued = {j: d["submissionQueue"]["position"] for j, d in documents.items() if "submissionQueue" in d}
        return queued if len(queued) == 2 else None

    # One create a minute: one job got the slot, the other two wait, oldest request first.
    queued = wait_for(places, what="two jobs queued for a create slot")
    created = [j for j in job_ids if vertex_jobs_for(devstack, j)]
    assert created == [j for j in job_ids if j not in queued] and len(created) == 1
    waiting = sorted(queued, key=queued.get)
    assert [queued[j] for j in waiting] == [1, 2]
    assert waiting == [j for j in job_ids if j in queued]  # in the order they became ready
    document = controller.job(waiting[0])
    # Not submitted yet: its first attempt's intent is recorded when its turn comes.
    assert document["phase"] == "accepted" and not document["attempts"]
    assert "queued for submission, position 1" in document["submissionQueue"]["summary"]


def test_an_intake_killed_mid_batch_loses_no_request_it_acked(
    devstack, bucket, tmp_path, settings, controllers
):
    count = 300
    job_ids = [f"scale-intake-{i:03d}" for i in range(count)]
    topic = settings["RELAUNCH_REQUESTS_TOPIC"]
    first = controllers(devstack.env(), tmp_path / "first.log", **settings, RELAUNCH_CREATES_PER_MINUTE="1")
    first.wait_ready("leader")
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    futures = [publisher.publish(f"projects/{PROJECT}/topics/{topic}", request(j, bucket)) for j in job_ids]
    for future in futures:
        future.result(timeout=60)
    db_path = settings["RELAUNCH_STATE_STORE"][len("sqlite:///") :]

    def stored() -> set[str]:
        db = sqlite3.connect(db_path)
        try:
            rows = db.execute(
                "SELECT key FROM documents WHERE key >= 'jobs/' AND key < 'jobs/\x7f'"
            ).fetchall()
        finally:
            db.close()
        return {key[len("jobs/") :] for (key,) in rows}

    # Kill -9 while the intake is in the middle of the backlog (batches in flight).
    wait_for(lambda: len(stored()) >= 20, what="the intake under way")
    first.kill()
    assert len(stored()) < count, "the backlog was drained before the kill; nothing was tested"

    # Whatever the first controller acked is in the store; whatever it did not is redelivered.
    second = controllers(devstack.env(), tmp_path / "second.log", **settings, RELAUNCH_CREATES_PER_MINUTE="1")
    second.wait_ready("leader")
    wait_for(lambda: len(stored()) >= count, timeout=180, what="every request recorded")
    assert stored() == set(job_ids)
    lines = second.log_lines()
    # Every delivery is accepted or a duplicate, nothing else: an accepted one's line is the
    # intake's "job accepted" (naming its message), any other's the callback's "request handled".
    handled = [line for line in lines if line.get("message") == "request handled"]
    assert {line["status"] for line in handled} <= {"duplicate"}
    accepted = [line for line in lines if line.get("message") == "job accepted"]
    assert accepted and all(line.get("message_id") for line in accepted)
