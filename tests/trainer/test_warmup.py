"""Stale extension-build locks are found and removed; a live build's lock is left alone."""

import os
import time

from trainer.warmup import remove_stale_locks, stale_locks


def _op_dir(root, name: str, age_seconds: float):
    folder = root / "py311_cpu" / name
    folder.mkdir(parents=True)
    (folder / "build.ninja").write_text("rule cxx")
    (folder / "lock").write_text("")
    then = time.time() - age_seconds
    for path in (folder / "build.ninja", folder / "lock", folder):
        os.utime(path, (then, then))
    return folder


def test_a_lock_whose_build_stopped_changing_is_stale_and_a_live_one_is_not(tmp_path):
    dead = _op_dir(tmp_path, "deepspeed_shm_comm", age_seconds=3600)
    live = _op_dir(tmp_path, "other_op", age_seconds=3600)
    (live / "comm.o").write_bytes(b"being written now")  # a running build keeps changing its dir
    assert stale_locks(str(tmp_path), 600, time.time()) == [str(dead / "lock")]

    assert remove_stale_locks(str(tmp_path), 600) == [str(dead / "lock")]
    assert not (dead / "lock").exists() and (live / "lock").exists()
    assert (dead / "build.ninja").exists()  # only the lock goes; a later build reuses the rest
