"""Checkpoints: one directory per step; every rank's shards first, the commit marker last.

Save protocol (identical on every rank, so the collectives line up):
  1. wait for the previous save (at most one in flight);
  2. snapshot: copy the state to CPU memory / local disk - the only part that stalls training;
  3. in a background thread: serialise, upload, hash; gather every rank's file list on a
     dedicated gloo group (the training group stays free for the loop);
  4. rank 0 writes COMMITTED.json (create-only) only if every rank uploaded everything, then
     prunes old checkpoints; the outcome is broadcast so all ranks agree on it.
A crash anywhere before step 4 leaves a directory without a marker, which nobody trusts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer import fault_hooks, layout
from trainer.config import ConfigError, JobIdentity
from trainer.storage import (
    Storage,
    list_committed_steps,
    list_step_dirs,
    open_storage,
    read_marker,
    sha256_of_file,
)


def rank_state_name(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


@dataclass(frozen=True)
class SaveResult:
    step: int
    committed: bool
    bytes: int
    blocking_seconds: float
    upload_seconds: float
    total_seconds: float


@dataclass(frozen=True)
class Restored:
    step: int
    trainer_state: dict
    exact: bool  # False when the world size changed and RNG streams could not be carried over


class Checkpointer:
    def __init__(self, uri: str | None, identity: JobIdentity, engine_name: str, keep_last: int, log):
        self.store: Storage | None = open_storage(uri) if uri else None
        self.identity = identity
        self.engine_name = engine_name
        self.keep_last = keep_last
        self.log = log
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        # Checkpoint coordination runs in a background thread; a separate CPU group keeps its
        # collectives from interleaving with the training loop's.
        self.group = dist.new_group(backend="gloo", timeout=timedelta(minutes=10))
        self.staging_root = tempfile.mkdtemp(prefix=f"relaunch-ckpt-rank{self.rank}-")
        self.last_committed_step: int | None = None
        self.last_save_seconds: float | None = None
        self._already_committed: set[int] = set()
        self._thread: threading.Thread | None = None
        self._result: SaveResult | None = None
        self._error: BaseException | None = None

    # ----- saving -------------------------------------------------------------------------

    def save(self, step: int, engine, trainer_state: dict, blocking: bool) -> SaveResult | None:
        """Start a save of this step; with blocking=True, finish it and return the outcome."""
        if self.store is None:
            return None
        started = time.monotonic()  # the loop's stall counts the wait for the previous save too
        self.wait()
        if step in self._already_committed or step == self.last_committed_step:
            # This step is already committed (we resumed from it, or an earlier run got further);
            # overwriting its shards would break its checksums, and it holds the same state.
            self.last_committed_step = step
            return SaveResult(step, True, 0, 0.0, 0.0, 0.0)
        staging = os.path.join(self.staging_root, layout.step_dir_name(step))
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        objects = engine.snapshot(staging, step)
        objects[rank_state_name(self.rank)] = trainer_state
        blocking_seconds = time.monotonic() - started
        if blocking:
            return self._complete(step, staging, objects, started, None)
        self._thread = threading.Thread(
            target=self._run_in_background,
            args=(step, staging, objects, started, blocking_seconds),
            name="checkpoint-upload",
            daemon=True,
        )
        self._thread.start()
        return None

    def wait(self) -> SaveResult | None:
        """Wait for the save in flight, if any; re-raise what killed it."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("checkpoint save failed") from error
        result, self._result = self._result, None
        return result

    def _run_in_background(self, *args) -> None:
        try:
            self._result = self._complete(*args)
        except BaseException as exc:  # handed to the main thread by wait()
            self._error = exc

    def _complete(
        self, step, staging, objects: dict[str, Any], started, blocking_seconds: float | None
    ) -> SaveResult:
        upload_started = time.monotonic()
        files: list[layout.FileEntry] = []
        ok = True
        try:
            for name, obj in objects.items():
                torch.save(obj, os.path.join(staging, name))
            files = self._upload_directory(staging, step)
        except Exception as exc:  # an upload failure only costs this checkpoint
            ok = False
            self.log.warning("checkpoint upload failed", step=step, error=f"{type(exc).__name__}: {exc}")
        everyone: list = [None] * self.world_size
        dist.all_gather_object(everyone, (ok, files), group=self.group)
        committed = False
        all_files = sorted((f for _, rank_files in everyone for f in rank_files), key=lambda f: f.path)
        if self.rank == 0 and all(rank_ok for rank_ok, _ in everyone):
            committed = self._commit(step, all_files)
        committed = self._agree(committed, src_only=True)
        upload_seconds = time.monotonic() - upload_started
        total_seconds = time.monotonic() - started
        if blocking_seconds is None:  # a synchronous save stalls the loop for all of it
            blocking_seconds = total_seconds
        shutil.rmtree(staging, ignore_errors=True)
        size = sum(f.size for f in all_files)
        if committed:
            self.last_committed_step = step
            self.last_save_seconds = total_seconds
        if self.rank == 0:
            event = "checkpoint committed" if committed else "checkpoint not committed"
            (self.log.info if committed else self.log.warning)(
                event,
                step=step,
                bytes=size,
                files=len(all_files),
                blocking_seconds=round(blocking_seconds, 4),
                upload_seconds=round(upload_seconds, 4),
            )
            if committed:
                self._prune(newest=step)
        return SaveResult(step, committed, size, blocking_seconds, upload_seconds, total_seconds)

    def _upload_directory(self, staging: str, step: int) -> list[layout.FileEntry]:
        entries = []
        step_dir = layout.step_dir_name(step)
        for dirpath, _dirs, names in os.walk(staging):
            for name in sorted(names):
                local = os.path.join(dirpath, name)
                rel = os.path.relpath(local, staging).replace(os.sep, "/")
                entries.append(layout.FileEntry(rel, os.path.getsize(local), sha256_of_file(local)))
                self.store.upload_file(local, f"{step_dir}/{rel}")
        return entries

    def _commit(self, step: int, files: list[layout.FileEntry]) -> bool:
        paths = [f.path for f in files]
        if len(paths) != len(set(paths)):
            # Two ranks wrote the same name: one overwrote the other, so the manifest cannot hold.
            self.log.error(
                "two ranks uploaded the same checkpoint file; not committing",
                step=step,
                duplicates=sorted({p for p in paths if paths.count(p) > 1}),
            )
            return False
        fault_hooks.pause_before_commit(step, self.log)
        marker = layout.CommitMarker(
            step=step,
            world_size=self.world_size,
            engine=self.engine_name,
            job_id=self.identity.job_id,
            attempt=self.identity.attempt,
            files=tuple(files),
        )
        key = layout.commit_marker_path(layout.step_dir_name(step))
        if self.store.create_only(key, marker.to_json().encode()):
            return True
        self.log.warning("commit marker already exists; keeping the existing one", step=step)
        return read_marker(self.store, step) is not None

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep_last` committed checkpoints; drop older ones and older leftovers."""
        steps = list_step_dirs(self.store)
        committed = [s for s in steps if read_marker(self.store, s) is not None]
        keep = set(committed[-self.keep_last :])
        for step in steps:
            if step in keep or step > newest:
                continue  # a newer uncommitted directory may belong to someone still writing
            self.store.delete_prefix(layout.step_dir_name(step))
            self.log.info("checkpoint deleted", step=step, committed=step in committed)

    # ----- restoring ----------------------------------------------------------------------

    def restore(self, engine, resume_from: str | None) -> Restored | None:
        """Load the newest valid committed checkpoint at or below `resume_from` (or under the root)."""
        source, at_or_below = self.store, None
        if resume_from:
            try:
                root, at_or_below = layout.split_checkpoint_dir(resume_from)
            except layout.LayoutError as exc:
                raise ConfigError(f"--resume-from: {exc}") from None
            source = open_storage(root)
        if source is None:
            return None
        candidates = None
        if self.rank == 0:
            committed = list_committed_steps(source)
            candidates = [s for s in reversed(committed) if at_or_below is None or s <= at_or_below]
        candidates = self._broadcast(candidates)
        for step in candidates:
            marker = self._broadcast(read_marker(source, step) if self.rank == 0 else None)
            if marker is None:
                continue
            if marker.world_size != self.world_size and self.engine_name == "deepspeed":
                raise ConfigError(
                    f"checkpoint step {step} was written by {marker.world_size} ranks, this run has "
                    f"{self.world_size}; DeepSpeed needs a universal-checkpoint conversion for that"
                )
            local = os.path.join(self.staging_root, "restore", layout.step_dir_name(step))
            ok = self._download_verified(source, marker, engine, local)
            if not self._agree(ok):
                self.log.warning("checkpoint failed verification; trying an older one", step=step)
                continue
            engine.restore(local, step)
            restored = self._load_rank_state(local, marker)
            shutil.rmtree(local, ignore_errors=True)
            self.last_committed_step = step
            self._remember_later_commits(step)
            return restored
        if resume_from:
            raise ConfigError(f"no valid committed checkpoint at or below {resume_from}")
        return None

    def _rank_state_path(self, marker: layout.CommitMarker) -> str:
        paths = {f.path for f in marker.files}
        own = rank_state_name(self.rank)
        return own if own in paths else rank_state_name(0)

    def _download_verified(self, source: Storage, marker: layout.CommitMarker, engine, local: str) -> bool:
        by_path = {f.path: f for f in marker.files}
        wanted = engine.files_to_restore(sorted(by_path), self.rank) + [self._rank_state_path(marker)]
        step_dir = layout.step_dir_name(marker.step)
        shutil.rmtree(local, ignore_errors=True)
        try:
            for path in wanted:
                entry = by_path[path]
                target = os.path.join(local, *path.split("/"))
                source.download_file(f"{step_dir}/{path}", target)
                if os.path.getsize(target) != entry.size or sha256_of_file(target) != entry.sha256:
                    self.log.warning(
                        "checkpoint file does not match its manifest", step=marker.step, path=path
                    )
                    return False
        except Exception as exc:  # any failure: try an older one
            self.log.warning(
                "checkpoint download failed", step=marker.step, error=f"{type(exc).__name__}: {exc}"
            )
            return False
        return True

    def _load_rank_state(self, local: str, marker: layout.CommitMarker) -> Restored:
        path = self._rank_state_path(marker)
        # Our own file (RNG states are numpy/python objects, so not weights_only).
        state = torch.load(os.path.join(local, path), map_location="cpu", weights_only=False)
        exact = path == rank_state_name(self.rank) and marker.world_size == self.world_size
        if not exact:
            self.log.warning("world size changed: resuming without this rank's RNG state", step=marker.step)
        return Restored(step=int(state["step"]), trainer_state=state, exact=exact)

    def _remember_later_commits(self, restored_step: int) -> None:
        later = None
        if self.rank == 0 and self.store is not None:
            later = [s for s in list_committed_steps(self.store) if s > restored_step]
        self._already_committed = set(self._broadcast(later) or [])

    # ----- collectives on the checkpoint group ----------------------------------------------

    def _broadcast(self, obj):
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def _agree(self, ok: bool, src_only: bool = False) -> bool:
        """All ranks' AND of `ok` (or rank 0's value, with src_only)."""
        flag = torch.tensor([int(ok)], dtype=torch.int32)
        if src_only:
            dist.broadcast(flag, src=0, group=self.group)
        else:
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    def close(self) -> None:
        shutil.rmtree(self.staging_root, ignore_errors=True)
