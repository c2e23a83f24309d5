"""CheckpointProbe against the GCS stand-in, with checkpoints written the way the trainer does."""

from __future__ import annotations

import itertools
import os

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs

from controller.adapters.checkpoints import CheckpointProbe, CheckpointsUnavailable
from devstack.gcs import start_gcs
from tests.support.gcs import FlakyProxy, gcs_client_with_bucket
from trainer import layout
from trainer.storage import GcsStorage, write_exit_record

BUCKET = "relaunch-checkpoints"
_roots = itertools.count()


@pytest.fixture(scope="module")
def gcs_client():
    with gcs_client_with_bucket(BUCKET) as client:
        yield client


@pytest.fixture
def root(gcs_client):
    return f"gs://{BUCKET}/jobs/job-{next(_roots)}/ckpt"


@pytest.fixture
def probe(gcs_client):
    return CheckpointProbe(client=gcs_client, timeout=10)


def _marker(step: int) -> layout.CommitMarker:
    return layout.CommitMarker(
        step=step,
        world_size=2,
        engine="ddp",
        job_id="demo-gpt",
        attempt=1,
        files=(layout.FileEntry("rank-00000.pt", 5, "0" * 64),),
    )


def write_checkpoint(root: str, step: int, *, commit: bool = True) -> None:
    trainer_side = GcsStorage(root)
    step_dir = layout.step_dir_name(step)
    for rank in range(2):
        trainer_side.write_bytes(f"{step_dir}/rank-{rank:05d}.pt", b"shard")
    if commit:
        assert trainer_side.create_only(layout.commit_marker_path(step_dir), _marker(step).to_json().encode())


def test_latest_is_the_newest_committed_step(probe, root):
    for step in (20, 40, 60):
        write_checkpoint(root, step)
    found = probe.latest(root)
    assert found.step == 60
    assert found.uri == f"{root}/step-0000000060"
    assert layout.split_checkpoint_dir(found.uri) == (root, 60)
    assert found.marker.world_size == 2


def test_a_newer_directory_without_a_commit_marker_is_ignored(probe, root):
    write_checkpoint(root, 20)
    write_checkpoint(root, 40, commit=False)  # shards uploaded, then the job was preempted
    assert probe.latest(root).step == 20


def test_a_garbled_marker_falls_back_to_the_previous_committed_checkpoint(probe, root):
    write_checkpoint(root, 20)
    GcsStorage(root).write_bytes("step-0000000040/COMMITTED.json", b'{"format": "relaunch-chec')
    assert probe.latest(root).step == 20


def test_a_marker_for_another_step_does_not_commit_this_directory(probe, root):
    write_checkpoint(root, 20)
    GcsStorage(root).write_bytes("step-0000000040/COMMITTED.json", _marker(39).to_json().encode())
    assert probe.latest(root).step == 20


def test_no_checkpoints_yet_is_none(probe, root):
    assert probe.latest(root) is None


def test_missing_bucket_is_none_not_an_error(probe):
    assert probe.latest("gs://no-such-bucket/jobs/x") is None
    assert probe.exit_record("gs://no-such-bucket/jobs/x", 1) is None


def test_exit_record_round_trips(probe, root):
    record = layout.ExitRecord(
        job_id="demo-gpt",
        attempt=2,
        reason="preempted",
        exit_code=75,
        step=130,
        last_committed_step=130,
        checkpoint_saved=True,
        signal="SIGTERM",
    )
    write_exit_record(GcsStorage(root), record)
    assert probe.exit_record(root, 2) == record
    assert probe.exit_record(root, 1) is None


def test_garbled_exit_record_is_none(probe, root):
    GcsStorage(root).write_bytes("exits/attempt-0003.json", b"\x00not json")
    assert probe.exit_record(root, 3) is None


def test_transient_server_errors_are_retried(gcs_client, root, monkeypatch):
    write_checkpoint(root, 20)
    write_exit_record(
        GcsStorage(root), layout.ExitRecord(job_id="demo-gpt", attempt=1, reason="completed", exit_code=0)
    )
    proxy = FlakyProxy(os.environ["STORAGE_EMULATOR_HOST"])
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        probe = CheckpointProbe(
            client=gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()), timeout=10
        )
        proxy.fail_next(2)
        assert probe.latest(root).step == 20
        proxy.fail_next(2)
        assert probe.exit_record(root, 1).reason == "completed"
        assert sum(status == 503 for _, status in proxy.requests) == 4
    finally:
        proxy.stop()


def test_unreachable_storage_is_unknown_not_empty(monkeypatch):
    """'No checkpoint' would restart the job from step 0, so a dead endpoint must not say that."""
    with start_gcs() as doomed:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", doomed.url)
        client = gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials())
    # The stand-in is stopped now: every connection is refused.
    probe = CheckpointProbe(client=client, timeout=2)
    monkeypatch.setattr("controller.adapters.gcs.RETRY_ATTEMPTS", 2)
    with pytest.raises(CheckpointsUnavailable):
        probe.latest(f"gs://{BUCKET}/jobs/x")


def test_local_roots_work_too(probe, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    step_dir = tmp_path / "ckpt" / "step-0000000020"
    step_dir.mkdir(parents=True)
    (step_dir / "COMMITTED.json").write_text(_marker(20).to_json())
    assert probe.latest(root).uri == f"{root}/step-0000000020"


def _preempted(attempt: int, vertex_job_id: str | None, step: int) -> layout.ExitRecord:
    return layout.ExitRecord(
        job_id="demo-gpt",
        attempt=attempt,
        reason="preempted",
        exit_code=75,
        step=step,
        last_committed_step=step,
        checkpoint_saved=True,
        signal="SIGTERM",
        vertex_job_id=vertex_job_id,
    )


def test_each_custom_job_reads_its_own_exit_record_and_never_a_duplicates(probe, root):
    # Two CustomJobs ran attempt 4 (an adopted ambiguous create); the duplicate wrote last, so the
    # legacy per-attempt name holds its record. The recorded job still reads its own.
    recorded, duplicate = _preempted(4, "111", 130), _preempted(4, "222", 7)
    write_exit_record(GcsStorage(root), recorded)
    write_exit_record(GcsStorage(root), duplicate)
    assert probe.exit_record(root, 4, vertex_job_id="111") == recorded
    assert probe.exit_record(root, 4, vertex_job_id="222") == duplicate
    # A third job that left no record of its own is not spoken for by another's.
    assert probe.exit_record(root, 4, vertex_job_id="333") is None


def test_a_record_that_names_no_custom_job_is_read_for_any(probe, root):
    # A trainer of an older release, or a run outside Vertex: only the legacy name exists.
    record = _preempted(5, None, 40)
    write_exit_record(GcsStorage(root), record)
    assert probe.exit_record(root, 5, vertex_job_id="111") == record
