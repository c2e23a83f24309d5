"""The commit marker of the save a SIGTERM starts says it is an emergency save (the controller
leaves its tiny stall out of the checkpoint cost C); periodic saves' markers do not."""

import json

import pytest

from tests.support.gang import TINY
from trainer import layout, storage


def test_the_emergency_field_is_written_only_when_true_and_older_markers_read_as_periodic():
    periodic = layout.CommitMarker(step=6, world_size=2, engine="ddp", job_id="j", attempt=1)
    assert "emergency" not in json.loads(periodic.to_json())
    assert layout.CommitMarker.from_json(periodic.to_json()).emergency is False
    emergency = layout.CommitMarker(step=7, world_size=2, engine="ddp", job_id="j", attempt=1, emergency=True)
    assert json.loads(emergency.to_json())["emergency"] is True
    assert layout.CommitMarker.from_json(emergency.to_json()) == emergency
    garbled = {**json.loads(emergency.to_json()), "emergency": "yes"}
    with pytest.raises(layout.LayoutError):
        layout.CommitMarker.from_json(json.dumps(garbled))


@pytest.mark.slow
def test_the_emergency_save_marker_says_so_and_the_periodic_ones_do_not(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    args = ["--engine", "ddp", "--steps", "20", "--checkpoint-every-steps", "3", *TINY]
    # Held at step 7, between the periodic saves of steps 6 and 9: SIGTERM saves step 7.
    gang = start_gang(args, checkpoint_uri=root, env={"RELAUNCH_TEST_HOLD_AT_STEP": "7"}, nodes=1, nproc=2)
    gang.chief.wait_for("test hook: holding for SIGTERM", step=7)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_SAVED], gang.chief.output()

    store = storage.open_storage(root)
    markers = {step: storage.read_usable_marker(store, step) for step in storage.list_step_dirs(store)}
    assert {step: m.emergency for step, m in markers.items() if m is not None} == {
        3: False,
        6: False,
        7: True,
    }
    assert (
        '"emergency": true' in store.read_bytes(layout.commit_marker_path(layout.step_dir_name(7))).decode()
    )
    assert "emergency" not in store.read_bytes(layout.commit_marker_path(layout.step_dir_name(6))).decode()
