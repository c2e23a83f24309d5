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
