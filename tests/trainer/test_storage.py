import os

from trainer import layout, storage


def _commit(store, step, files=()):
    marker = layout.CommitMarker(
        step=step, world_size=1, engine="ddp", job_id="j", attempt=1, files=tuple(files)
    )
    return store.create_only(layout.commit_marker_path(layout.step_dir_name(step)), marker.to_json().encode())


def test_only_directories_with_a_valid_marker_count_as_committed(tmp_path):
    store = storage.open_storage(f"file://{tmp_path}")
    for step in (10, 20, 30, 40):
        store.write_bytes(f"{layout.step_dir_name(step)}/rank-00000.pt", b"x")
    _commit(store, 10)
    _commit(store, 30)
    # 20 has shards but no marker (crash mid-save); 40 has a torn marker.
    store.write_bytes(layout.commit_marker_path(layout.step_dir_name(40)), b'{"format": "relaunch-che')

    assert storage.list_committed_steps(str(tmp_path)) == [10, 30]
    assert storage.latest_committed(f"file://{tmp_path}").step == 30
    assert storage.latest_committed(str(tmp_path), at_or_below=29).step == 10
    assert storage.latest_committed(str(tmp_path), at_or_below=5) is None


def test_commit_marker_is_create_only(tmp_path):
    store = storage.open_storage(str(tmp_path))
    assert _commit(store, 5) is True
    first = store.read_bytes(layout.commit_marker_path(layout.step_dir_name(5)))
    assert _commit(store, 5) is False
    assert store.read_bytes(layout.commit_marker_path(layout.step_dir_name(5))) == first
    # No temporary files are left beside the marker.
    assert os.listdir(tmp_path / layout.step_dir_name(5)) == ["COMMITTED.json"]


def test_upload_download_and_listing_round_trip(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(4096))
    store = storage.open_storage(str(tmp_path / "root"))
    store.upload_file(str(src), "step-0000000001/deep/a.bin")
    store.write_bytes("step-0000000001/b.bin", b"hello")
    assert store.list_files("step-0000000001") == ["step-0000000001/b.bin", "step-0000000001/deep/a.bin"]
    assert store.list_dirs("") == ["step-0000000001"]
    store.download_file("step-0000000001/deep/a.bin", str(tmp_path / "back.bin"))
    assert storage.sha256_of_file(str(tmp_path / "back.bin")) == storage.sha256_of_file(str(src))
    store.delete_prefix("step-0000000001")
    assert store.list_dirs("") == []


def test_exit_records_are_written_where_the_contract_says(tmp_path):
    record = layout.ExitRecord(job_id="j", attempt=3, reason="completed", exit_code=0, step=9)
    storage.write_exit_record(f"file://{tmp_path}", record)
    assert (tmp_path / "exits" / "attempt-0003.json").exists()
    assert storage.read_exit_record(str(tmp_path), 3) == record
    assert storage.read_exit_record(str(tmp_path), 4) is None


def test_a_quarantined_step_is_never_latest_or_committed(tmp_path):
    store = storage.open_storage(str(tmp_path))
    for step in (10, 20):
        _commit(store, step)
    record = layout.QuarantineRecord(
        step=20, reason="sha256_mismatch", detail="rank 0", job_id="j", attempt=2
    )
    assert storage.quarantine(store, record) is True
    assert storage.quarantine(store, record) is False  # create-only

    assert storage.list_committed_steps(store) == [10]
    assert storage.latest_committed(store).step == 10
    assert storage.list_quarantined_steps(store) == [20]
    assert storage.read_quarantine(store, 20) == record
    assert storage.read_usable_marker(store, 20) is None and storage.read_marker(store, 20) is not None


def test_a_garbled_quarantine_marker_still_quarantines(tmp_path):
    store = storage.open_storage(str(tmp_path))
    _commit(store, 10)
    store.write_bytes(layout.quarantine_marker_path(layout.step_dir_name(10)), b"{")
    assert storage.latest_committed(store) is None


def test_temp_files_of_unfinished_writes_are_not_listed_and_moves_are_whole(tmp_path):
    store = storage.open_storage(str(tmp_path))
    store.write_bytes("step-0000000001/a.pt", b"a")
    (tmp_path / "step-0000000001" / "b.pt.tmp-0123").write_bytes(b"half")
    assert store.list_files("step-0000000001") == ["step-0000000001/a.pt"]
    assert store.list_temp_files("step-0000000001") == ["step-0000000001/b.pt.tmp-0123"]
    store.move_prefix("step-0000000001", "quarantine/step-0000000001-a0001-x")
    assert store.list_dirs("") == ["quarantine"]
    assert store.read_bytes("quarantine/step-0000000001-a0001-x/a.pt") == b"a"


def test_exit_records_keyed_by_vertex_job_and_per_replica_records(tmp_path):
    first = layout.ExitRecord(job_id="j", attempt=3, reason="preempted", exit_code=76, vertex_job_id="111")
    second = layout.ExitRecord(job_id="j", attempt=3, reason="completed", exit_code=0, vertex_job_id="222")
    storage.write_exit_record(str(tmp_path), first)
    storage.write_exit_record(str(tmp_path), second)
    assert storage.read_exit_record(str(tmp_path), 3, "111") == first  # not overwritten by job 222
    assert storage.read_exit_record(str(tmp_path), 3, "222") == second
    assert storage.read_exit_record(str(tmp_path), 3) == second  # legacy name: the last writer

    for name, reason in (("workerpool0-0", "stopped_by_peer"), ("workerpool1-0", "runtime_error")):
        storage.write_replica_exit(
            str(tmp_path),
            layout.ReplicaExit(
                job_id="j",
                attempt=3,
                vertex_job_id="222",
                replica=name,
                node_rank=0,
                reason=reason,
                exit_code=70,
            ),
        )
    found = storage.read_replica_exits(str(tmp_path), 3, "222")
    assert [(r.replica, r.reason) for r in found] == [
        ("workerpool0-0", "stopped_by_peer"),
        ("workerpool1-0", "runtime_error"),
    ]
    assert storage.read_replica_exits(str(tmp_path), 3, "111") == []
