"""The intake claims a job's checkpoint root before it records the job (and reads no job record
on the way for a new job): what every order of events and every crash between the two writes
leaves behind. Real intake on a real SQLite store; nothing here talks to Google."""

from __future__ import annotations

import json
import threading

import pytest

from controller.service.alerts import AlertSink
from controller.service.intake import Intake
from controller.service.ownership import claim_checkpoint_root, root_segments
from controller.settings import Settings
from controller.store.keys import CHECKPOINT_ROOTS_PREFIX, checkpoint_root_key, job_key
from controller.store.sqlite import SqliteStateStore


def request(job_id: str, uri: str, image: str = "trainer:1") -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {"imageUri": f"us-docker.pkg.dev/demo/{image}", "command": ["train"]},
    }
    document = {"jobId": job_id, "jobSpec": {"workerPoolSpecs": [pool]}, "checkpoint": {"uri": uri}}
    return json.dumps(document).encode()


def settings(**overrides) -> Settings:
    return Settings(project="relaunch-dev", region="us-central1", vertex_endpoint="127.0.0.1:9", **overrides)


@pytest.fixture
def store(tmp_path):
    store = SqliteStateStore(tmp_path / "state.db")
    yield store
    store.close()


@pytest.fixture
def intake(store):
    return Intake(store, settings(), AlertSink(None, None, cooldown_seconds=0))


def claim_owner(store, uri: str) -> str | None:
    claim = store.get(checkpoint_root_key(root_segments(uri)))
    return None if claim is None else claim.document["jobId"]


def test_a_conflicting_request_leaves_no_claim_on_the_root_it_named(intake, store):
    assert intake.accept(request("x", "gs://ckpt-bucket/one")).status == "accepted"

    conflict = intake.accept(request("x", "gs://ckpt-bucket/two"))

    assert conflict.status == "conflict" and "already exists with a different request body" in conflict.reason
    assert claim_owner(store, "gs://ckpt-bucket/one") == "x"
    assert claim_owner(store, "gs://ckpt-bucket/two") is None
    assert intake.accept(request("w", "gs://ckpt-bucket/two")).status == "accepted"


def test_a_conflicting_try_that_crashed_after_its_claim_is_cleaned_up_by_its_redelivery(intake, store):
    assert intake.accept(request("x", "gs://ckpt-bucket/one")).status == "accepted"
    # A conflicting request for x claimed gs://ckpt-bucket/two, then its controller died before it could
    # find the conflict: the claim names x, whose own root is gs://ckpt-bucket/one.
    assert claim_checkpoint_root(store, "x", "gs://ckpt-bucket/two", settings()) is None
    assert intake.accept(request("w", "gs://ckpt-bucket/two")).status == "conflict"

    assert intake.accept(request("x", "gs://ckpt-bucket/two")).status == "conflict"  # the redelivery

    assert claim_owner(store, "gs://ckpt-bucket/two") is None
    assert claim_owner(store, "gs://ckpt-bucket/one") == "x"
    assert intake.accept(request("w", "gs://ckpt-bucket/two")).status == "accepted"


def test_a_crash_between_the_claim_and_the_job_is_completed_by_the_redelivery(intake, store):
    assert claim_checkpoint_root(store, "x", "gs://ckpt-bucket/one", settings()) is None  # then the crash
    assert store.get(job_key("x")) is None

    result = intake.accept(request("x", "gs://ckpt-bucket/one"))

    assert result.status == "accepted"
    assert store.get(job_key("x")).document["request"]["checkpoint"]["uri"] == "gs://ckpt-bucket/one"
    assert [c.document["jobId"] for c in store.list(CHECKPOINT_ROOTS_PREFIX)] == ["x"]


def test_a_redelivered_request_is_a_duplicate_even_when_its_root_would_be_refused_now(store):
    assert Intake(store, settings(), AlertSink(None, None)).accept(
        request("x", "gs://ckpt-bucket/a")
    ).status == ("accepted")
    # A root inside x's, claimed by a try that crashed before it could see x's claim and withdraw.
    assert claim_checkpoint_root(store, "z", "gs://ckpt-bucket/a/c", settings()) is not None
    store.create(
        checkpoint_root_key(root_segments("gs://ckpt-bucket/a/c")),
        {"root": "gs://ckpt-bucket/a/c", "jobId": "z"},
    )
    # And the bucket allow-list changed since x was accepted.
    narrowed = Intake(store, settings(checkpoint_buckets="other-bucket"), AlertSink(None, None))

    again = narrowed.accept(request("x", "gs://ckpt-bucket/a"))

    assert again.status == "duplicate"
    assert claim_owner(store, "gs://ckpt-bucket/a") == "x"  # x's own claim stays


def test_a_conflict_on_the_same_root_keeps_the_jobs_claim(intake, store):
    assert intake.accept(request("x", "gs://ckpt-bucket/one")).status == "accepted"

    conflict = intake.accept(request("x", "gs://ckpt-bucket/one", image="trainer:2"))

    assert conflict.status == "conflict"
    assert claim_owner(store, "gs://ckpt-bucket/one") == "x"
    assert intake.accept(request("w", "gs://ckpt-bucket/one")).status == "conflict"


@pytest.mark.parametrize(
    "roots",
    [
        ["gs://ckpt-bucket/same"] * 6,
        [
            "gs://ckpt-bucket/a",
            "gs://ckpt-bucket/a/b",
            "gs://ckpt-bucket/a/b/c",
            "gs://ckpt-bucket/a/b/c/d",
            "gs://ckpt-bucket/a/x",
            "gs://ckpt-bucket/a/b/y",
        ],
    ],
    ids=["one-root", "nested-roots"],
)
def test_jobs_racing_for_one_root_or_overlapping_roots_never_share_one(intake, store, roots):
    """Intakes claim side by side (no lock): of the jobs that race, no two accepted ones overlap,
    and none of the refused ones leaves a claim or a record behind."""
    barrier = threading.Barrier(len(roots))
    results: dict[str, str] = {}

    def deliver(n: int, root: str) -> None:
        barrier.wait()
        results[f"job-{n}"] = intake.accept(request(f"job-{n}", root)).status

    threads = [threading.Thread(target=deliver, args=(n, root)) for n, root in enumerate(roots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    accepted = {job for job, status in results.items() if status == "accepted"}
    assert len(results) == len(roots) and set(results.values()) <= {"accepted", "conflict"}
    if len(set(roots)) == 1:
        assert len(accepted) == 1
    owned = {int(job.split("-")[1]): roots[int(job.split("-")[1])] for job in accepted}
    for a, root_a in owned.items():
        for b, root_b in owned.items():
            if a != b:
                assert not (root_a + "/").startswith(root_b + "/"), (root_a, root_b)
    assert {c.document["jobId"] for c in store.list(CHECKPOINT_ROOTS_PREFIX)} == accepted
    assert {r.key for r in store.list("jobs/")} == {job_key(job) for job in accepted}


def test_a_new_job_is_claimed_and_recorded_in_one_commit_on_sqlite(intake, store):
    """One fsync per accepted request: the claim, its neighbour check and the job's record are
    one write of the store's group commit."""
    commits: list[str] = []
    store._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)

    assert intake.accept(request("x", "gs://ckpt-bucket/a/b")).status == "accepted"

    assert len(commits) == 1
    assert claim_owner(store, "gs://ckpt-bucket/a/b") == "x" and store.get(job_key("x")) is not None
    assert intake.accept(request("x", "gs://ckpt-bucket/a/b")).status == "duplicate"
    assert intake.accept(request("y", "gs://ckpt-bucket/a")).status == "conflict"  # contains x's
    assert claim_owner(store, "gs://ckpt-bucket/a") is None and store.get(job_key("y")) is None
