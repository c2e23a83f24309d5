"""Resume floor, quarantine of corrupt checkpoints, the no-usable-checkpoint exit, and what a
SIGTERM leaves behind when the grace budget runs out or a SIGKILL follows."""

import hashlib
import json

import pytest

from tests.support.gang import TINY
from trainer import layout, storage

pytestmark = pytest.mark.slow


def resume_env(root: str, step: int) -> dict:
    return {"RELAUNCH_RESUME_FROM": layout.checkpoint_dir(root, step)}


def test_in_place_restart_resumes_from_the_newest_checkpoint_at_or_above_the_floor(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    args = ["--steps", "8", "--checkpoint-every-steps", "2", *TINY]
    gang = start_gang(args, checkpoint_uri=root, env={"RELAUNCH_TEST_HOLD_AT_STEP": "5"})
    gang.chief.wait_for("test hook: holding for SIGTERM", step=5)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_SAVED], gang.chief.output()
    assert storage.list_committed_steps(root) == [2, 4, 5]

    # Vertex restarts the same attempt in place with the same environment: RESUME_FROM still
    # names step 2, but the attempt itself had got to step 5 since.
    gang = start_gang(args, checkpoint_uri=root, env=resume_env(root, 2))
    assert gang.wait() == [0], gang.chief.output()
    assert gang.chief.wait_for("resumed")["from_step"] == 5


def corrupt_one_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the sha256 can tell
    path.write_bytes(bytes(data))


def test_corrupt_checkpoint_is_quarantined_never_latest_and_saved_anew(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    gang = start_gang(
        ["--steps", "8", "--checkpoint-every-steps", "2", *TINY],
        checkpoint_uri=root,
        env={"RELAUNCH_TEST_HOLD_AT_STEP": "6"},
    )
    gang.chief.wait_for("test hook: holding for SIGTERM", step=6)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_SAVED], gang.chief.output()
    assert storage.list_committed_steps(root) == [2, 4, 6]
    corrupt_one_byte(tmp_path / "ckpt" / layout.step_dir_name(6) / "rank-00001.pt")

    # keep-last 1 and a checkpoint every step: the commit of step 5 must not be pruned in favour
    # of the quarantined step 6, and step 6 must be saved again when training gets there.
    args = ["--steps", "8", "--checkpoint-every-steps", "1", "--keep-last", "1", *TINY]
    gang = start_gang(args, attempt=2, checkpoint_uri=root, env=resume_env(root, 6))
    assert gang.wait() == [0], gang.chief.output()
    assert gang.chief.wait_for("resumed")["from_step"] == 4

    lines = [
        r for r in gang.chief.records() if r.get("message") in ("checkpoint committed", "checkpoint deleted")
    ]
    events = [(r["message"], r["step"]) for r in lines]
    assert ("checkpoint committed", 6) in events  # saved anew, not taken as "already committed"
    assert events.index(("checkpoint deleted", 5)) > events.index(("checkpoint committed", 6))

    archived = list((tmp_path / "ckpt" / layout.QUARANTINE_DIR_NAME).iterdir())
    assert len(archived) == 1 and archived[0].name.startswith(layout.step_dir_name(6) + "-a0002-")
    evidence = layout.QuarantineRecord.from_json((archived[0] / layout.QUARANTINE_MARKER_NAME).read_text())
    assert (evidence.step, evidence.reason, evidence.attempt) == (6, "sha256_mismatch", 2)
    assert "rank-00001.pt" in evidence.detail

    store = storage.open_storage(root)
    assert storage.list_committed_steps(root) == [8]
    assert storage.read_marker(store, 8).attempt == 2
    done = storage.read_exit_record(root, 2)
    assert (done.reason, done.last_committed_step) == ("completed", 8)

    # Falling back past the quarantined step still ends bitwise equal to an uninterrupted run.
    resumed = gang.chief.wait_for("training completed")
    baseline = start_gang(["--steps", "8", *TINY], checkpoint_uri=f"file://{tmp_path}/baseline")
    assert baseline.wait() == [0], baseline.chief.output()
    expected = baseline.chief.wait_for("training completed")
    assert (resumed["final_loss"], resumed["params_sha256"]) == (
        expected["final_loss"],
        expected["params_sha256"],
    )


def fake_corrupt_checkpoint(root: str, step: int) -> None:
    """A committed checkpoint whose files do not match their manifest (as after bit rot)."""
    store = storage.open_storage(root)
    entries = []
    for name in ("model.pt", "rank-00000.pt", "rank-00001.pt"):
        data = f"not the real {name}".encode()
        store.write_bytes(f"{layout.step_dir_name(step)}/{name}", data)
        entries.append(layout.FileEntry(name, len(data), hashlib.sha256(b"other bytes").hexdigest()))
    marker = layout.CommitMarker(
        step=step, world_size=2, engine="ddp", job_id="test-job", attempt=1, files=tuple(entries)
    )
    assert store.create_only(layout.commit_marker_path(layout.step_dir_name(step)), marker.to_json().encode())


def test_no_usable_checkpoint_is_its_own_exit_and_a_fresh_start_saves_the_step_anew(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    fake_corrupt_checkpoint(root, 4)
    args = ["--steps", "6", "--checkpoint-every-steps", "2", *TINY]
    gang = start_gang(args, checkpoint_uri=root, env=resume_env(root, 4))
    assert gang.wait() == [layout.EXIT_NO_USABLE_CHECKPOINT], gang.chief.output()
    assert not gang.chief.find("starting fresh")

    store = storage.open_storage(root)
    record = storage.read_exit_record(root, 1)
    assert (record.reason, record.exit_code) == (layout.REASON_NO_USABLE_CHECKPOINT, 65)
    assert (record.checkpoint_root, record.steps_lost) == (store.uri, 4)
    assert storage.read_quarantine(store, 4).reason == "sha256_mismatch"
    assert storage.latest_committed(root) is None and storage.list_committed_steps(root) == []

    # What the controller does to restart from scratch: the next attempt without RESUME_FROM.
    gang = start_gang(args, attempt=2, checkpoint_uri=root)
    assert gang.wait() == [0], gang.chief.output()
    assert gang.chief.find("starting fresh")
    assert storage.list_committed_steps(root) == [2, 4, 6]
    assert storage.read_marker(store, 4).attempt == 2 and not storage.read_quarantine(store, 4)


def hold_and_pause_env(step: int) -> dict:
    # Rank 0 waits at `step` for SIGTERM; its emergency save then stops just before the commit.
    return {"RELAUNCH_TEST_HOLD_AT_STEP": str(step), "RELAUNCH_TEST_PAUSE_BEFORE_COMMIT": str(step)}


def test_sigkill_during_the_emergency_save_still_leaves_a_preempted_record(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    gang = start_gang(["--steps", "6", *TINY], checkpoint_uri=root, env=hold_and_pause_env(3))
    gang.chief.wait_for("test hook: holding for SIGTERM", step=3)
    gang.terminate()
    gang.chief.wait_for("test hook: paused before commit marker", step=3)
    gang.kill()

    record = storage.read_exit_record(root, 1)
    assert (record.reason, record.step, record.checkpoint_saved, record.signal) == (
        "preempted",
        3,
        False,
        "SIGTERM",
    )
    assert record.exit_code == layout.EXIT_PREEMPTED_UNSAVED
    (replica,) = storage.read_replica_exits(root, 1)
    assert (replica.replica, replica.reason, replica.final, replica.step) == ("node-0", "preempted", False, 3)
    assert storage.latest_committed(root) is None


@pytest.mark.parametrize("grace", [5, 15])
def test_the_wait_for_an_unfinished_save_is_bounded_by_the_grace_budget(start_gang, tmp_path, grace):
    root = f"file://{tmp_path}/ckpt"
    args = ["--steps", "6", *TINY, "--grace-seconds", str(grace)]
    gang = start_gang(args, checkpoint_uri=root, env=hold_and_pause_env(3))
    gang.chief.wait_for("test hook: holding for SIGTERM", step=3)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_UNSAVED], gang.chief.output()

    # The worker gave up by itself (before the launcher's hard kill), once the budget was spent.
    abandoned = gang.chief.wait_for("emergency checkpoint abandoned: grace budget spent")
    assert abandoned["grace_seconds"] == grace and abandoned["seconds_since_first_signal"] >= grace
    assert gang.chief.wait_for("preempted")["exit_code"] == layout.EXIT_PREEMPTED_UNSAVED
    record = storage.read_exit_record(root, 1)
    assert (record.reason, record.step, record.checkpoint_saved) == ("preempted", 3, False)
    (replica,) = storage.read_replica_exits(root, 1)
    assert (replica.reason, replica.exit_code, replica.final) == ("preempted", 76, True)
    assert storage.latest_committed(root) is None


def test_grace_clock_starts_at_the_first_signal_of_any_rank(start_gang, tmp_path):
    """Only node 1 is signalled, and its step runs 3 s longer: by the time the gang stops, a
    1 s budget counted from node 1's signal is spent, so nobody starts an emergency save."""
    root = f"file://{tmp_path}/ckpt"
    env = {
        "RELAUNCH_TEST_HOLD_AT_STEP": "3",
        "RELAUNCH_TEST_HOLD_RANK": "1",
        "RELAUNCH_TEST_SLOW_STEP_AFTER_SIGNAL": "3",
    }
    args = ["--steps", "6", *TINY, "--grace-seconds", "1"]
    gang = start_gang(args, nodes=2, nproc=1, checkpoint_uri=root, env=env)
    gang.nodes[1].wait_for("test hook: holding for SIGTERM", step=3)
    gang.nodes[1].terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_UNSAVED] * 2, gang.chief.output()
    skipped = gang.chief.wait_for("emergency checkpoint skipped: does not fit the grace budget")
    assert skipped["seconds_left"] <= -2
    assert storage.latest_committed(root) is None

    by_replica = {r.replica: r for r in storage.read_replica_exits(root, 1)}
    assert (
        by_replica["node-0"].reason == layout.REASON_STOPPED_BY_PEER and by_replica["node-0"].signal is None
    )
    assert by_replica["node-1"].reason == layout.REASON_PREEMPTED and by_replica["node-1"].signal == "SIGTERM"
    assert layout.first_failed_replica(list(by_replica.values())).replica == "node-1"


def test_time_based_interval_comes_from_the_environment_and_markers_record_the_cost(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    env = {layout.CHECKPOINT_INTERVAL_ENV: "0.001"}  # due after every step
    gang = start_gang(["--steps", "4", *TINY], checkpoint_uri=root, env=env)
    assert gang.wait() == [0], gang.chief.output()
    store = storage.open_storage(root)
    assert storage.list_committed_steps(root) == [2, 3, 4]  # 1 was pruned (keep-last 3)
    for step in (2, 3, 4):
        doc = json.loads(store.read_bytes(layout.commit_marker_path(layout.step_dir_name(step))))
        assert doc["blockingSeconds"] >= 0 and doc["writeSeconds"] > 0
