import json

import pytest

from trainer import layout


def test_paths_follow_the_contract():
    assert layout.checkpoint_dir("gs://b/jobs/demo", 120) == "gs://b/jobs/demo/step-0000000120"
    assert (
        layout.commit_marker_path("gs://b/jobs/demo/", 120)
        == "gs://b/jobs/demo/step-0000000120/COMMITTED.json"
    )
    assert (
        layout.commit_marker_path("file:///x/step-0000000007") == "file:///x/step-0000000007/COMMITTED.json"
    )
    assert layout.exit_record_path("file:///ck", 2) == "file:///ck/exits/attempt-0002.json"


def test_step_dir_names_parse_back_and_reject_lookalikes():
    assert layout.parse_step_dir("step-0000000120") == 120
    assert layout.parse_step_dir("gs://b/p/step-0000000120/") == 120
    for bad in ("step-120", "step-0000000120.tmp", "exits", "xstep-0000000120"):
        assert layout.parse_step_dir(bad) is None
    assert layout.split_checkpoint_dir("gs://b/p/step-0000000040/") == ("gs://b/p", 40)
    with pytest.raises(layout.LayoutError):
        layout.split_checkpoint_dir("gs://b/p/latest")


def test_commit_marker_round_trips_with_contract_field_names():
    marker = layout.CommitMarker(
        step=120,
        world_size=4,
        engine="ddp",
        job_id="demo-gpt",
        attempt=2,
        files=(layout.FileEntry("rank-00000.pt", 12345, "ab" * 32),),
    )
    doc = json.loads(marker.to_json())
    assert doc["format"] == "relaunch-checkpoint/v1"
    assert {"step", "worldSize", "engine", "jobId", "attempt", "wallTime", "files"} <= set(doc)
    assert layout.CommitMarker.from_json(marker.to_json()) == marker


def test_exit_record_round_trips_and_uses_contract_field_names():
    record = layout.ExitRecord(
        job_id="demo-gpt",
        attempt=2,
        reason="preempted",
        signal="SIGTERM",
        step=130,
        last_committed_step=130,
        checkpoint_saved=True,
        exit_code=layout.EXIT_PREEMPTED_SAVED,
    )
    doc = json.loads(record.to_json())
    assert doc["format"] == "relaunch-exit/v1"
    assert doc["checkpointSaved"] is True and doc["lastCommittedStep"] == 130 and doc["exitCode"] == 75
    assert layout.ExitRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(format="relaunch-checkpoint/v2"),
        lambda d: d.pop("format"),
        lambda d: d.pop("step"),
        lambda d: d.update(step="12"),
        lambda d: d.update(files=[{"path": "a"}]),
    ],
)
def test_marker_with_wrong_format_or_fields_is_rejected(mutate):
    doc = json.loads(layout.CommitMarker(step=1, world_size=1, engine="ddp", job_id="j", attempt=1).to_json())
    mutate(doc)
    with pytest.raises(layout.LayoutError):
        layout.CommitMarker.from_json(json.dumps(doc))


def test_exit_record_rejects_unknown_reason_and_format():
    with pytest.raises(layout.LayoutError):
        layout.ExitRecord(job_id="j", attempt=1, reason="bored", exit_code=1)
    doc = json.loads(layout.ExitRecord(job_id="j", attempt=1, reason="completed", exit_code=0).to_json())
    doc["format"] = "something-else"
    with pytest.raises(layout.LayoutError):
        layout.ExitRecord.from_json(json.dumps(doc))
    with pytest.raises(layout.LayoutError):
        layout.ExitRecord.from_json("not json")


def test_exit_codes_match_the_contract():
    assert (
        layout.EXIT_OK,
        layout.EXIT_CONFIG,
        layout.EXIT_RENDEZVOUS_TIMEOUT,
        layout.EXIT_RUNTIME,
        layout.EXIT_PREEMPTED_SAVED,
        layout.EXIT_PREEMPTED_UNSAVED,
    ) == (0, 64, 69, 70, 75, 76)


def test_layout_and_storage_do_not_import_torch():
    import subprocess
    import sys

    code = "import sys, trainer, trainer.layout, trainer.storage; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
