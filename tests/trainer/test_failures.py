"""How the trainer fails: crash mid-upload, missing node, bad config, exception in the loop."""

import time

import pytest

from tests.support.gang import TINY
from trainer import layout, storage

pytestmark = pytest.mark.slow


def test_kill_during_upload_leaves_previous_checkpoint_as_the_one_resumed(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    args = ["--steps", "10", "--checkpoint-every-steps", "4", *TINY]
    gang = start_gang(args, checkpoint_uri=root, env={"RELAUNCH_TEST_PAUSE_BEFORE_COMMIT": "8"})
    gang.chief.wait_for("test hook: paused before commit marker", step=8)
    gang.kill()  # kill -9 of the launcher and its workers while step 8's shards sit uncommitted

    step8 = tmp_path / "ckpt" / layout.step_dir_name(8)
    assert (step8 / "rank-00000.pt").exists() and not (step8 / layout.COMMIT_MARKER_NAME).exists()
    assert storage.list_committed_steps(root) == [4]
    # What a local write killed mid-way leaves, and a file no rank of the next attempt writes.
    (step8 / "rank-00001.pt.tmp-0123456789abcdef").write_bytes(b"half a shard")
    (step8 / "stray.bin").write_bytes(b"from an older attempt")

    gang = start_gang(args, attempt=2, checkpoint_uri=root)
    assert gang.wait() == [0], gang.chief.output()
    assert gang.chief.wait_for("resumed")["from_step"] == 4
    assert gang.chief.wait_for("training completed")["step"] == 10
    # The leftover was rebuilt and committed by attempt 2, holding exactly its manifest.
    marker = storage.read_marker(storage.open_storage(root), 8)
    assert marker.attempt == 2
    assert not any(layout.is_temp_name(f.path) for f in marker.files)
    on_disk = sorted(str(p.relative_to(step8)) for p in step8.rglob("*") if p.is_file())
    assert on_disk == sorted([f.path for f in marker.files] + [layout.COMMIT_MARKER_NAME])


@pytest.mark.parametrize("present_node", [0, 1])
def test_missing_node_fails_with_rendezvous_timeout(start_gang, tmp_path, present_node):
    root = f"file://{tmp_path}/ckpt"
    timeout = 4
    started = time.monotonic()
    gang = start_gang(
        ["--steps", "3", "--rendezvous-timeout", str(timeout), *TINY],
        nodes=2,
        only_nodes=[present_node],
        checkpoint_uri=root,
    )
    assert gang.wait(timeout=120) == [layout.EXIT_RENDEZVOUS_TIMEOUT], gang.chief.output()
    # Python + torch start-up dominates the margin; the point is: it does not hang.
    assert time.monotonic() - started < timeout + 45
    assert "rendezvous failed" in gang.chief.output()
    if present_node == 0:  # only the chief node writes the attempt's exit record
        record = storage.read_exit_record(root, 1)
        assert (record.reason, record.exit_code) == ("rendezvous_timeout", 69)


def test_bad_factory_is_a_config_error_before_any_worker_starts(start_gang, tmp_path):
    gang = start_gang(
        ["--steps", "3", "--model", "no_such_module:build"], checkpoint_uri=f"file://{tmp_path}/c"
    )
    assert gang.wait(timeout=60) == [layout.EXIT_CONFIG]
    errors = [line for line in gang.chief.lines if line.startswith("relaunch-train: configuration error")]
    assert len(errors) == 1 and "no_such_module" in errors[0]
    assert not gang.chief.find("launching workers")


def test_exception_in_training_loop_exits_70_with_runtime_error_record(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    gang = start_gang(
        ["--steps", "5", "--model", "tests.trainer.faulty:build_failing_model", *TINY],
        nproc=1,
        checkpoint_uri=root,
    )
    assert gang.wait() == [layout.EXIT_RUNTIME], gang.chief.output()
    record = storage.read_exit_record(root, 1)
    assert (record.reason, record.exit_code) == ("runtime_error", 70)
    assert "synthetic failure in the model" in gang.chief.output()


def test_a_replica_whose_peer_died_says_so_in_its_own_exit_record(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    env = {"RELAUNCH_TEST_HOLD_AT_STEP": "3", "RELAUNCH_TEST_HOLD_RANK": "1"}
    gang = start_gang(["--steps", "6", *TINY], nodes=2, nproc=1, checkpoint_uri=root, env=env)
    gang.nodes[1].wait_for("test hook: holding for SIGTERM", step=3)
    gang.nodes[1].kill_tree()  # node 1 vanishes (kill -9): it leaves no record of its own
    assert gang.chief.wait() == layout.EXIT_RUNTIME, gang.chief.output()

    (survivor,) = storage.read_replica_exits(root, 1)
    assert (survivor.replica, survivor.reason, survivor.exit_code) == ("node-0", "stopped_by_peer", 70)
    assert survivor.signal is None and survivor.final
    assert layout.first_failed_replica([survivor]) is None  # node 0 did not fail on its own
    assert storage.read_exit_record(root, 1).reason == "runtime_error"


def test_a_worker_that_ends_its_own_process_is_recorded_with_its_own_exit_status(start_gang, tmp_path):
    """The launcher exits 70 (the contract's runtime error) for any worker error; the replica's
    record also carries the worker's own status, here 1 from a native-style `os._exit(1)` that
    leaves the worker no chance to report."""
    root = f"file://{tmp_path}/ckpt"
    env = {"RELAUNCH_TEST_MODEL_EXITS_AT_CALL": "2"}
    gang = start_gang(
        ["--steps", "5", "--model", "tests.support.paced_model:build_model", *TINY],
        nproc=1,
        checkpoint_uri=root,
        env=env,
    )
    assert gang.wait() == [layout.EXIT_RUNTIME], gang.chief.output()
    (replica,) = storage.read_replica_exits(root, 1)
    assert (replica.reason, replica.exit_code) == ("runtime_error", 70)
    assert (replica.worker_exit_code, replica.worker_signal) == (1, None)
    assert replica.detail is not None and "worker exit codes [1]" in replica.detail
