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


def test_no_usable_checkpoint_has_its_own_exit_code_and_reason():
    assert layout.EXIT_NO_USABLE_CHECKPOINT == 65
    assert layout.REASON_OF_EXIT_CODE[65] == "no_usable_checkpoint" == layout.REASON_NO_USABLE_CHECKPOINT
    codes = [v for k, v in vars(layout).items() if k.startswith("EXIT_") and isinstance(v, int)]
    assert len(codes) == len(set(codes))  # no two outcomes share a code
    record = layout.ExitRecord(
        job_id="j",
        attempt=3,
        reason="no_usable_checkpoint",
        exit_code=65,
        checkpoint_root="gs://b/jobs/j",
        steps_lost=120,
        vertex_job_id="987",
    )
    doc = json.loads(record.to_json())
    assert (doc["checkpointRoot"], doc["stepsLost"], doc["vertexJobId"]) == ("gs://b/jobs/j", 120, "987")
    assert layout.ExitRecord.from_json(record.to_json()) == record


def test_optional_fields_may_be_absent_from_older_documents():
    old_record = layout.ExitRecord(job_id="j", attempt=1, reason="completed", exit_code=0)
    assert "stepsLost" not in json.loads(old_record.to_json())
    assert layout.ExitRecord.from_json(old_record.to_json()).steps_lost is None
    old_marker = layout.CommitMarker(step=1, world_size=1, engine="ddp", job_id="j", attempt=1)
    assert not {"blockingSeconds", "writeSeconds"} & set(json.loads(old_marker.to_json()))
    assert layout.CommitMarker.from_json(old_marker.to_json()).write_seconds is None
    costly = layout.CommitMarker(
        step=1, world_size=1, engine="ddp", job_id="j", attempt=1, blocking_seconds=0.25, write_seconds=3.5
    )
    assert layout.CommitMarker.from_json(costly.to_json()) == costly
    doc = json.loads(costly.to_json())
    doc["writeSeconds"] = "3.5"
    with pytest.raises(layout.LayoutError):
        layout.CommitMarker.from_json(json.dumps(doc))


def test_exit_records_are_keyed_by_the_vertex_job_so_jobs_never_overwrite_each_other():
    assert layout.exit_record_path("gs://b/r", 3) == "gs://b/r/exits/attempt-0003.json"
    assert layout.exit_record_path("gs://b/r", 3, "4455") == "gs://b/r/exits/attempt-0003-4455.json"
    assert layout.vertex_job_id_from_env({"CLOUD_ML_JOB_ID": "4455"}) == "4455"
    assert layout.vertex_job_id_from_env({"CLOUD_ML_JOB_ID": "a/../b"}) == "a_.._b"  # stays one name
    assert layout.vertex_job_id_from_env({}) is None
    assert layout.replica_exit_path("gs://b/r", 3, "4455", "workerpool1-0") == (
        "gs://b/r/exits/attempt-0003/4455/workerpool1-0.json"
    )
    assert layout.replica_exit_key(3, None, "node-1") == "exits/attempt-0003/local/node-1.json"
    keys = [
        "exits/attempt-0003-4455.json",
        "exits/attempt-0003/4455/workerpool0-0.json",
        "exits/attempt-0003/4455/workerpool1-0.json",
        "exits/attempt-0003/9999/workerpool0-0.json",
        "exits/attempt-0003/4455/deeper/x.json",
    ]
    assert layout.list_replica_exit_paths(keys, 3, "4455") == [
        "exits/attempt-0003/4455/workerpool0-0.json",
        "exits/attempt-0003/4455/workerpool1-0.json",
    ]


def test_replica_records_round_trip_and_name_the_first_replica_that_failed_on_its_own():
    def replica(name, reason, time, code=70):
        return layout.ReplicaExit(
            job_id="j", attempt=2, replica=name, node_rank=0, reason=reason, exit_code=code, time=time
        )

    records = [
        replica("workerpool0-0", "stopped_by_peer", "2026-11-21T19:00:00.100Z"),
        replica("workerpool1-1", "runtime_error", "2026-11-21T19:00:00.300Z"),
        replica("workerpool1-0", "preempted", "2026-11-21T19:00:00.200Z", code=76),
    ]
    for record in records:
        assert layout.ReplicaExit.from_json(record.to_json()) == record
    assert layout.first_failed_replica(records).replica == "workerpool1-0"
    assert layout.first_failed_replica(records[:1]) is None
    with pytest.raises(layout.LayoutError):
        replica("x", "bored", "t")
    assert layout.replica_name("workerpool1", 2, node_rank=5) == "workerpool1-2"
    assert layout.replica_name(None, None, node_rank=5) == "node-5"


def test_a_replica_record_keeps_the_failed_worker_s_own_status_and_older_records_still_read():
    record = layout.ReplicaExit(
        job_id="j",
        attempt=1,
        replica="workerpool1-0",
        node_rank=1,
        reason="runtime_error",
        exit_code=70,
        worker_exit_code=-9,
        worker_signal="SIGKILL",
        time="2026-11-21T19:00:00.100Z",
    )
    doc = json.loads(record.to_json())
    assert (doc["exitCode"], doc["workerExitCode"], doc["workerSignal"]) == (70, -9, "SIGKILL")
    assert layout.ReplicaExit.from_json(record.to_json()) == record
    # Written only when known, so a record without them reads as before, and one with them is
    # still a valid v1 record to a reader that does not know them.
    older = {k: v for k, v in doc.items() if not k.startswith("worker")}
    assert "workerExitCode" not in json.loads(layout.ReplicaExit.from_json(json.dumps(older)).to_json())
    assert layout.ReplicaExit.from_json(json.dumps(older)).worker_exit_code is None
    assert doc["format"] == layout.REPLICA_EXIT_FORMAT


def test_quarantine_names_and_temp_names():
    assert layout.quarantine_marker_path("gs://b/r", 40) == "gs://b/r/step-0000000040/QUARANTINED.json"
    assert layout.quarantine_archive_dir("gs://b/r", 40, 3, "ab12") == (
        "gs://b/r/quarantine/step-0000000040-a0003-ab12"
    )
    assert layout.parse_step_dir("step-0000000040-a0003-ab12") is None  # never mistaken for a checkpoint
    for temp in ("rank-00000.pt.tmp-0a1b", "x/COMMITTED.json.tmp-ff", "model.tmp"):
        assert layout.is_temp_name(temp)
    for real in ("rank-00000.pt", "deepspeed/tmp/zero.pt", "tmpfile"):
        assert not layout.is_temp_name(real)
    record = layout.QuarantineRecord(
        step=40, reason="sha256_mismatch", detail="rank 1", job_id="j", attempt=3
    )
    assert layout.QuarantineRecord.from_json(record.to_json()) == record
