"""Checkpoints: one directory per step; every rank's shards first, the commit marker last.

Save protocol (identical on every rank, so the collectives line up):
  1. wait for the previous save (at most one in flight);
  2. snapshot: copy the state to CPU memory / local disk - the only part that stalls training;
  3. in a background thread: serialise, upload, hash; gather every rank's file list on a
     dedicated gloo group (the training group stays free for the loop);
  4. rank 0 removes from the step directory every file the manifest does not list (temp
     files of a killed write, shards of an older attempt), writes COMMITTED.json (create-only,
     with the measured cost of the save) only if every rank uploaded everything, then prunes old
     checkpoints; the outcome is broadcast so all ranks agree on it.
A crash anywhere before step 4 leaves a directory without a marker, which nobody trusts.

A committed checkpoint that fails verification on restore (sha256 or size mismatch, missing
file) gets a create-only QUARANTINED.json beside its marker: nobody uses it again. When training
reaches that step again, rank 0 first moves the quarantined directory to {root}/quarantine/...
(kept as evidence) so the new save commits into a clean directory.
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
from trainer.numerics import check_resume_precision
from trainer.storage import (
    Storage,
    list_committed_steps,
    list_quarantined_steps,
    list_step_dirs,
    open_storage,
    quarantine,
    read_marker,
    read_usable_marker,
    sha256_of_file,
)

# Outcomes of one rank's verified download.
VERIFIED = "ok"
UNREACHABLE = "unreachable"  # the read failed (network, permissions): says nothing about the data


class NoUsableCheckpoint(Exception):
    """Checkpoints were asked for (or exist) and none can be loaded: exit 65, never a silent restart."""

    def __init__(self, root: str, steps_lost: int | None, detail: str):
        super().__init__(detail)
        self.root = root
        self.steps_lost = steps_lost


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
    saved_world_size: int | None = None  # the world size that wrote the checkpoint


class Checkpointer:
    def __init__(
        self,
        uri: str | None,
        identity: JobIdentity,
        engine_name: str,
        keep_last: int,
        log,
        precision: str | None = None,
    ):
        self.store: Storage | None = open_storage(uri) if uri else None
        self.precision = precision
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
        self._quarantined_ahead: set[int] = set()  # saved anew (after a move aside) when reached
        self._thread: threading.Thread | None = None
        self._result: SaveResult | None = None
        self._error: BaseException | None = None

    # ----- saving -------------------------------------------------------------------------

    def save(
        self, step: int, engine, trainer_state: dict, blocking: bool, emergency: bool = False
    ) -> SaveResult | None:
        """Start a save of this step; with blocking=True, finish it and return the outcome.

        `emergency`: the save a SIGTERM started; its commit marker says so."""
        if self.store is None:
            return None
        started = time.monotonic()  # the loop's stall counts the wait for the previous save too
        self.wait()
        if step in self._already_committed or step == self.last_committed_step:
            # This step is already committed (we resumed from it, or an earlier run got further);
            # overwriting its shards would break its checksums, and it holds the same state.
            self.last_committed_step = step
            return SaveResult(step, True, 0, 0.0, 0.0, 0.0)
        if step in self._quarantined_ahead and not self._move_quarantined_aside(step):
            return SaveResult(step, False, 0, 0.0, 0.0, 0.0)
        staging = os.path.join(self.staging_root, layout.step_dir_name(step))
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        objects = engine.snapshot(staging, step)
        objects[rank_state_name(self.rank)] = trainer_state
        blocking_seconds = time.monotonic() - started
        if blocking:
            return self._complete(step, staging, objects, started, None, emergency)
        self._thread = threading.Thread(
            target=self._run_in_background,
            args=(step, staging, objects, started, blocking_seconds, emergency),
            name="checkpoint-upload",
            daemon=True,
        )
        self._thread.start()
        return None

    def _move_quarantined_aside(self, step: int) -> bool:
        """Every rank: rank 0 moves the quarantined directory of `step` away; all learn the outcome."""
        ok = True
        if self.rank == 0:
            target = layout.quarantine_archive_dir("", step, self.identity.attempt, os.urandom(4).hex())
            try:
                self.store.move_prefix(layout.step_dir_name(step), target.lstrip("/"))
                self.log.warning(
                    "quarantined checkpoint moved aside to save its step anew", step=step, to=target
                )
            except Exception as exc:
                ok = False
                self.log.error(
                    "cannot move the quarantined checkpoint aside; not saving this step",
                    step=step,
                    error=f"{type(exc).__name__}: {exc}",
                )
        # Also a barrier: no rank uploads into the old directory before it is gone.
        ok = self._agree(ok, src_only=True)
        self._quarantined_ahead.discard(step)
        return ok

    @property
    def busy(self) -> bool:
        """A save is still running in the background."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> SaveResult | None:
        """Wait for the save in flight, if any; re-raise what killed it.

        With a timeout the wait may end first: `busy` then stays True and the save carries on.
        """
        if self._thread is None:
            return None
        self._thread.join(timeout=None if timeout is None else max(0.0, timeout))
        if self._thread.is_alive():
            return None
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
        self,
        step,
        staging,
        objects: dict[str, Any],
        started,
        blocking_seconds: float | None,
        emergency: bool = False,
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
        dist.all_gather_object(everyone, (ok, files, blocking_seconds), group=self.group)
        committed = False
        all_files = sorted((f for _, rank_files, _ in everyone for f in rank_files), key=lambda f: f.path)
        if self.rank == 0 and all(rank_ok for rank_ok, _, _ in everyone):
            write_seconds = time.monotonic() - started
            stalls = [s for _, _, s in everyone if s is not None]
            # A synchronous save stalls the loop for all of it.
            stall = max(stalls) if len(stalls) == len(everyone) else write_seconds
            committed = self._commit(step, all_files, stall, write_seconds, emergency)
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
                if layout.is_temp_name(name):
                    continue  # an engine's own unfinished write is never part of a checkpoint
                local = os.path.join(dirpath, name)
                rel = os.path.relpath(local, staging).replace(os.sep, "/")
                entries.append(layout.FileEntry(rel, os.path.getsize(local), sha256_of_file(local)))
                self.store.upload_file(local, f"{step_dir}/{rel}")
        return entries

    def _remove_unlisted_files(self, step: int, files: list[layout.FileEntry]) -> None:
        """Leftovers in the step directory (a killed write's temp files, an older attempt's shards)
        must not sit in a committed checkpoint: the directory holds exactly its manifest."""
        step_dir = layout.step_dir_name(step)
        listed = {f"{step_dir}/{f.path}" for f in files}
        markers = {layout.commit_marker_path(step_dir), layout.quarantine_marker_path(step_dir)}
        for key in self.store.list_files(step_dir) + self.store.list_temp_files(step_dir):
            if key not in listed and key not in markers:
                self.store.delete(key)
                self.log.info("removed a file no rank wrote for this checkpoint", step=step, key=key)

    def _commit(
        self,
        step: int,
        files: list[layout.FileEntry],
        blocking_seconds: float,
        write_seconds: float,
        emergency: bool = False,
    ) -> bool:
        paths = [f.path for f in files]
        if len(paths) != len(set(paths)):
            # Two ranks wrote the same name: one overwrote the other, so the manifest cannot hold.
            self.log.error(
                "two ranks uploaded the same checkpoint file; not committing",
                step=step,
                duplicates=sorted({p for p in paths if paths.count(p) > 1}),
            )
            return False
        if any(layout.is_temp_name(p) for p in paths):
            self.log.error("a temp file reached the manifest; not committing", step=step)
            return False
        self._remove_unlisted_files(step, files)
        fault_hooks.pause_before_commit(step, self.log)
        marker = layout.CommitMarker(
            step=step,
            world_size=self.world_size,
            engine=self.engine_name,
            job_id=self.identity.job_id,
            attempt=self.identity.attempt,
            files=tuple(files),
            blocking_seconds=round(blocking_seconds, 4),
            write_seconds=round(write_seconds, 4),
            emergency=emergency,
            precision=self.precision,
        )
        key = layout.commit_marker_path(layout.step_dir_name(step))
        if self.store.create_only(key, marker.to_json().encode()):
            return True
        self.log.warning("commit marker already exists; keeping the existing one", step=step)
        return read_marker(self.store, step) is not None

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep_last` usable checkpoints; drop older ones and older leftovers.

        Only usable checkpoints (committed, not quarantined) count towards keep-last, so a
        quarantined step above the newest commit can never push a good checkpoint out.
        """
        steps = list_step_dirs(self.store)
        usable = [s for s in steps if read_usable_marker(self.store, s) is not None]
        if newest not in usable:
            self.log.error(
                "the checkpoint just committed does not read back as usable; not pruning", step=newest
            )
            return
        keep = set(usable[-self.keep_last :])
        for step in steps:
            if step in keep or step > newest:
                continue  # a newer directory may belong to someone still writing, or be quarantined
            self.store.delete_prefix(layout.step_dir_name(step))
            self.log.info("checkpoint deleted", step=step, usable=step in usable)

    # ----- restoring ----------------------------------------------------------------------

    def restore(self, engine, resume_from: str | None) -> Restored | None:
        """Load the newest valid checkpoint at or above the step of `resume_from` (a floor: Vertex
        restarts an attempt in place with the same environment, and the attempt may have committed
        newer checkpoints since), falling back to older ones; with no `resume_from`, the newest
        under the root. Raises NoUsableCheckpoint rather than start from scratch when checkpoints
        were asked for, or exist, and none can be loaded."""
        restored = self._restore(engine, resume_from)
        self._remember_existing_after(restored.step if restored is not None else 0)
        return restored

    def _restore(self, engine, resume_from: str | None) -> Restored | None:
        source, floor = self.store, None
        if resume_from:
            try:
                root, floor = layout.split_checkpoint_dir(resume_from)
            except layout.LayoutError as exc:
                raise ConfigError(f"--resume-from: {exc}") from None
            source = open_storage(root)
        if source is None:
            return None
        plan = None
        if self.rank == 0:
            steps = list_step_dirs(source)
            committed = [s for s in steps if read_marker(source, s) is not None]
            usable = list_committed_steps(source)
            newest_known = max([*committed, *([floor] if floor is not None else [])], default=None)
            at_or_above = [s for s in reversed(usable) if floor is None or s >= floor]
            below = [s for s in reversed(usable) if floor is not None and s < floor]
            # Steps quarantined earlier were reported then: only usable ones make a fresh start silent.
            plan = (at_or_above + below, newest_known, bool(usable))
        candidates, newest_known, any_usable = self._broadcast(plan)
        unreachable = False
        for step in candidates:
            marker = self._broadcast(read_usable_marker(source, step) if self.rank == 0 else None)
            if marker is None:
                continue
            if self.precision is not None:
                check_resume_precision(marker.precision, self.precision, step)
            local = os.path.join(self.staging_root, "restore", layout.step_dir_name(step))
            outcome = self._download_verified(source, marker, engine, local)
            outcomes: list = [None] * self.world_size
            dist.all_gather_object(outcomes, outcome, group=self.group)
            if all(status == VERIFIED for status, _ in outcomes):
                if floor is not None and step < floor:
                    self.log.warning(
                        "nothing usable at or above the resume floor; resuming from an older checkpoint",
                        step=step,
                        floor=floor,
                    )
                # At another world size the engine reshards what it needs (DeepSpeed converts
                # to a universal checkpoint in a node-local scratch dir; DDP needs nothing).
                load_started = time.monotonic()
                engine.restore(local, step, marker.world_size)
                if marker.world_size != self.world_size:
                    self.log.info(
                        "checkpoint resharded to a new world size",
                        step=step,
                        saved_world_size=marker.world_size,
                        world_size=self.world_size,
                        load_seconds=round(time.monotonic() - load_started, 3),
                    )
                restored = self._load_rank_state(local, marker)
                shutil.rmtree(local, ignore_errors=True)
                self.last_committed_step = step
                return restored
            shutil.rmtree(local, ignore_errors=True)
            corrupt = [
                (status, detail) for status, detail in outcomes if status not in (VERIFIED, UNREACHABLE)
            ]
            if corrupt:
                self._quarantine(source, step, *corrupt[0])
            else:
                unreachable = True
                self.log.warning("checkpoint could not be read; trying an older one", step=step)
        if unreachable:
            # The data may be fine: a retry (a later attempt) can still load it. Not "no checkpoint".
            raise RuntimeError(f"checkpoints under {source.uri} could not be read")
        if floor is not None or any_usable:
            raise NoUsableCheckpoint(
                source.uri,
                newest_known,
                f"no usable checkpoint under {source.uri}"
                + (f" (resume floor: step {floor})" if floor is not None else ""),
            )
        return None

    def _quarantine(self, source: Storage, step: int, reason: str, detail: str) -> None:
        if self.rank == 0:
            record = layout.QuarantineRecord(
                step=step,
                reason=reason,
                detail=detail,
                job_id=self.identity.job_id,
                attempt=self.identity.attempt,
            )
            try:
                quarantine(source, record)
            except Exception as exc:  # it is still skipped now; a later attempt will check it again
                self.log.error("could not quarantine a corrupt checkpoint", step=step, error=str(exc))
        self.log.warning(
            "checkpoint failed verification; quarantined, trying an older one",
            step=step,
            reason=reason,
            detail=detail,
        )

    def _rank_state_path(self, marker: layout.CommitMarker) -> str:
        paths = {f.path for f in marker.files}
        own = rank_state_name(self.rank)
        return own if own in paths else rank_state_name(0)

    def _download_verified(
        self, source: Storage, marker: layout.CommitMarker, engine, local: str
    ) -> tuple[str, str]:
        """(VERIFIED, ""), (UNREACHABLE, why), or (a quarantine reason, which file) for this rank."""
        by_path = {f.path: f for f in marker.files}
        wanted = engine.files_to_restore(sorted(by_path), self.rank) + [self._rank_state_path(marker)]
        step_dir = layout.step_dir_name(marker.step)
        shutil.rmtree(local, ignore_errors=True)
        if not wanted or any(path not in by_path for path in wanted):
            return "missing_file", f"rank {self.rank}: the manifest lacks files this engine needs"
        for path in wanted:
            entry = by_path[path]
            target = os.path.join(local, *path.split("/"))
            try:
                source.download_file(f"{step_dir}/{path}", target)
            except FileNotFoundError:
                return "missing_file", f"rank {self.rank}: {path} is listed but absent"
            except Exception as exc:
                self.log.warning(
                    "checkpoint download failed", step=marker.step, error=f"{type(exc).__name__}: {exc}"
                )
                return UNREACHABLE, f"rank {self.rank}: {type(exc).__name__}"
            if os.path.getsize(target) != entry.size:
                return (
                    "size_mismatch",
                    f"rank {self.rank}: {path} has {os.path.getsize(target)} bytes, not {entry.size}",
                )
            if sha256_of_file(target) != entry.sha256:
                return "sha256_mismatch", f"rank {self.rank}: {path} does not match its sha256"
        return VERIFIED, ""

    def _load_rank_state(self, local: str, marker: layout.CommitMarker) -> Restored:
        path = self._rank_state_path(marker)
        # Our own file (RNG states are numpy/python objects, so not weights_only).
        state = torch.load(os.path.join(local, path), map_location="cpu", weights_only=False)
        exact = path == rank_state_name(self.rank) and marker.world_size == self.world_size
        if not exact:
            self.log.warning(
                "world size changed: each rank's RNG streams are reseeded from (seed, rank, step)",
                step=marker.step,
                saved_world_size=marker.world_size,
                world_size=self.world_size,
            )
        return Restored(
            step=int(state["step"]), trainer_state=state, exact=exact, saved_world_size=marker.world_size
        )

    def _remember_existing_after(self, restored_step: int) -> None:
        """Which later steps are already committed (left alone) or quarantined (moved aside first)."""
        plan = None
        if self.rank == 0 and self.store is not None:
            later = [s for s in list_committed_steps(self.store) if s > restored_step]
            bad = [s for s in list_quarantined_steps(self.store) if s > restored_step]
            plan = (later, bad)
        later, bad = self._broadcast(plan) or ([], [])
        self._already_committed, self._quarantined_ahead = set(later), set(bad)

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
        if not self.busy:  # a save still running (grace budget spent) keeps its staging files
            shutil.rmtree(self.staging_root, ignore_errors=True)
