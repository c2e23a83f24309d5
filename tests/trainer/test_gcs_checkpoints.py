"""Checkpoints through the GCS JSON API (devstack's emulator, via STORAGE_EMULATOR_HOST)."""

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs

from devstack.gcs import start_gcs
from tests.support.gang import TINY
from trainer import layout, storage


@pytest.fixture
def bucket_uri(monkeypatch):
    with start_gcs(port=0) as emulator:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()).create_bucket("ckpt")
        yield "gs://ckpt/jobs/demo"


def test_gcs_storage_marker_is_create_only_and_uncommitted_dirs_are_ignored(bucket_uri, tmp_path):
    store = storage.open_storage(bucket_uri)
    big = tmp_path / "shard.bin"
    big.write_bytes(b"\x01" * (storage.RESUMABLE_CHUNK_BYTES + 1000))  # goes through a resumable upload
    store.upload_file(str(big), "step-0000000002/shard.bin")
    store.write_bytes("step-0000000004/shard.bin", b"partial")
    marker = layout.CommitMarker(step=2, world_size=1, engine="ddp", job_id="j", attempt=1).to_json().encode()
    assert store.create_only("step-0000000002/COMMITTED.json", marker) is True
    assert store.create_only("step-0000000002/COMMITTED.json", b"{}") is False

    assert store.list_dirs("") == ["step-0000000002", "step-0000000004"]
    assert storage.list_committed_steps(bucket_uri) == [2]
    assert storage.latest_committed(bucket_uri).step == 2
    store.download_file("step-0000000002/shard.bin", str(tmp_path / "back.bin"))
    assert storage.sha256_of_file(str(tmp_path / "back.bin")) == storage.sha256_of_file(str(big))


@pytest.mark.slow
def test_training_checkpoints_to_gcs_and_resumes_from_there(bucket_uri, start_gang, monkeypatch):
    import os

    env = {"STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"]}
    args = ["--steps", "8", "--checkpoint-every-steps", "2", "--keep-last", "2", *TINY]
    gang = start_gang(args, checkpoint_uri=bucket_uri, env={**env, "RELAUNCH_TEST_HOLD_AT_STEP": "5"})
    gang.chief.wait_for("test hook: holding for SIGTERM", step=5)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_SAVED], gang.chief.output()
    assert storage.list_committed_steps(bucket_uri) == [4, 5]  # keep-last 2 pruned step 2
    assert storage.read_exit_record(bucket_uri, 1).checkpoint_saved is True

    gang = start_gang(args, attempt=2, checkpoint_uri=bucket_uri, env=env)
    assert gang.wait() == [0], gang.chief.output()
    assert gang.chief.wait_for("resumed")["from_step"] == 5
    assert storage.latest_committed(bucket_uri).step == 8
    assert storage.read_exit_record(bucket_uri, 2).reason == "completed"


def test_gcs_quarantine_hides_a_step_and_moving_it_aside_keeps_the_evidence(bucket_uri, tmp_path):
    store = storage.open_storage(bucket_uri)
    for step in (2, 4):
        store.write_bytes(f"{layout.step_dir_name(step)}/rank-00000.pt", b"shard")
        marker = layout.CommitMarker(step=step, world_size=1, engine="ddp", job_id="j", attempt=1)
        assert store.create_only(
            layout.commit_marker_path(layout.step_dir_name(step)), marker.to_json().encode()
        )
    record = layout.QuarantineRecord(step=4, reason="missing_file", detail="rank 0", job_id="j", attempt=2)
    assert storage.quarantine(store, record)
    assert storage.latest_committed(bucket_uri).step == 2 and storage.list_quarantined_steps(store) == [4]
    # A missing shard reads as missing (a reason to quarantine), not as an unreachable store.
    with pytest.raises(FileNotFoundError):
        store.download_file("step-0000000004/absent.pt", str(tmp_path / "absent.pt"))

    store.move_prefix(layout.step_dir_name(4), "quarantine/step-0000000004-a0002-ab")
    assert store.list_dirs("") == ["quarantine", layout.step_dir_name(2)]
    moved = storage.open_storage(bucket_uri + "/quarantine/step-0000000004-a0002-ab")
    assert layout.QuarantineRecord.from_json(moved.read_bytes(layout.QUARANTINE_MARKER_NAME)) == record
    assert moved.read_bytes("rank-00000.pt") == b"shard"
