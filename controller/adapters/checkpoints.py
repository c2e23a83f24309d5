"""What the controller can learn about a job's checkpoints: the newest committed one and the
trainer's exit record of an attempt.

The rules of what counts (a step directory exists only once its commit marker does; markers and
exit records are parsed by `trainer.layout`) live in `trainer.storage`; this module feeds those
functions a read-only view of the bucket whose every call has a deadline and the controller's
retry policy.

A missing or garbled object is an ordinary answer (None, with a warning). Failing to reach the
bucket at all is not: that raises `CheckpointsUnavailable`, because "no checkpoint" would make
the controller restart a job from step 0. A refusal that waiting cannot cure (403, 401, 400, ...)
raises `CheckpointsUnreadable`, naming the bucket and the permission, so the caller can apply the
attempt's ending with progress unknown instead of retrying for ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters import evidence
from controller.adapters import gcs as gcs_client
from trainer import layout, storage

_log = logs.get("relaunch.checkpoints")


class CheckpointsUnavailable(RuntimeError):
    """The checkpoint location could not be read (after retries): the answer is unknown."""


class CheckpointsUnreadable(RuntimeError):
    """The checkpoint bucket refused us for a reason that retrying cannot cure (403 and the like)."""

    def __init__(self, bucket: str, permission: str, reason: str):
        super().__init__(f"gs://{bucket}: {reason} (needs {permission})")
        self.bucket = bucket
        self.permission = permission
        self.reason = reason


def _bucket_of(uri: str) -> str:
    return uri[len("gs://") :].partition("/")[0] if uri.startswith("gs://") else uri


def _refusal(exc: BaseException, uri: str, permission: str) -> CheckpointsUnreadable | None:
    """A non-transient API error as CheckpointsUnreadable; None for anything that may pass."""
    if isinstance(exc, gexc.GoogleAPICallError) and not gcs_client.is_transient(exc):
        code = getattr(exc, "code", None)
        return CheckpointsUnreadable(_bucket_of(uri), permission, f"HTTP {code}: {exc.message or exc}")
    return None


_LIST_AND_GET = "storage.objects.list and storage.objects.get"


def _read_failure(exc: BaseException, uri: str, permission: str, what: str) -> Exception:
    """What a failed read raises: the refusal waiting cannot mend, else CheckpointsUnavailable."""
    refusal = _refusal(exc, uri, permission)
    return refusal or CheckpointsUnavailable(f"cannot read {what} under {uri}: {exc!r}")


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    uri: str  # the step directory: what RELAUNCH_RESUME_FROM is set to
    marker: layout.CommitMarker


class _GcsReader:
    """The read side of `trainer.storage.Storage` for one gs:// root, with deadlines and retries.

    Remembers what it read, so the probe can tell a garbled marker (read, then rejected by the
    parser) from an absent one.
    """

    def __init__(self, client: Any, uri: str, timeout: float):
        bucket, _, prefix = uri[len("gs://") :].partition("/")
        if not bucket:
            raise storage.StorageError(f"no bucket in {uri!r}")
        self.uri = uri.rstrip("/")
        self._client = client
        self._bucket = client.bucket(bucket)
        self._prefix = prefix.strip("/")
        self._timeout = timeout
        self.keys_read: set[str] = set()

    def _name(self, key: str) -> str:
        key = key.strip("/")
        return f"{self._prefix}/{key}".strip("/") if self._prefix else key

    def read_bytes(self, key: str) -> bytes:
        name = self._name(key)
        blob = self._bucket.blob(name)
        try:
            data = gcs_client.call(
                lambda: blob.download_as_bytes(timeout=self._timeout, retry=None), what=f"read {name}"
            )
        except gexc.NotFound as exc:  # no object, or no bucket
            raise FileNotFoundError(f"gs://{self._bucket.name}/{name}") from exc
        self.keys_read.add(key)
        return data

    def list_dirs(self, prefix: str = "") -> list[str]:
        name = self._name(prefix)
        list_prefix = f"{name}/" if name else ""

        def list_once() -> list[str]:
            listing = self._client.list_blobs(
                self._bucket, prefix=list_prefix, delimiter="/", timeout=self._timeout, retry=None
            )
            for _page in listing.pages:  # `prefixes` fills in as the pages are read
                pass
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing.prefixes)

        try:
            return gcs_client.call(list_once, what=f"list {list_prefix}")
        except gexc.NotFound:
            _log.warning("checkpoint bucket does not exist", bucket=self._bucket.name)
            return []

    def list_files(self, prefix: str = "") -> list[str]:
        """Keys (below the root) of every object under `prefix` (one folder of exit records)."""
        name = self._name(prefix)
        start = len(self._prefix) + 1 if self._prefix else 0

        def list_once() -> list[str]:
            listing = self._client.list_blobs(
                self._bucket, prefix=f"{name}/" if name else "", timeout=self._timeout, retry=None
            )
            return sorted(blob.name[start:] for blob in listing)

        try:
            return gcs_client.call(list_once, what=f"list {name}")
        except gexc.NotFound:
            return []

    def list_records(self, prefix: str) -> dict[str, dict[str, str]]:
        """Every object whose key starts with `prefix` (no folder boundary implied), with its
        custom metadata: one listing call per thousand objects."""
        name = self._name(prefix)
        start = len(self._prefix) + 1 if self._prefix else 0

        def list_once() -> dict[str, dict[str, str]]:
            listing = self._client.list_blobs(self._bucket, prefix=name, timeout=self._timeout, retry=None)
            return {blob.name[start:]: dict(blob.metadata or {}) for blob in listing}

        try:
            return gcs_client.call(list_once, what=f"list {name}")
        except gexc.NotFound:
            return {}


@dataclass(frozen=True)
class Ending:
    """What the trainer left of one attempt's CustomJob, read at its ending."""

    latest: CheckpointInfo | None
    exit_record: layout.ExitRecord | None
    replicas: list[layout.ReplicaExit]
    runs: list[layout.RunRecord]
    markers: list[layout.CommitMarker] | None  # newest first; None: unreadable (figures only)


class CheckpointProbe:
    def __init__(self, client: Any = None, *, timeout: float = gcs_client.CALL_TIMEOUT_SECONDS):
        self._client = client
        self._timeout = timeout

    def _open(self, checkpoint_uri: str) -> Any:
        if checkpoint_uri.startswith("gs://"):
            if self._client is None:
                self._client = gcs_client.make_client()
            return _GcsReader(self._client, checkpoint_uri, self._timeout)
        return storage.open_storage(checkpoint_uri)  # file:// or a path: local, no retries needed

    def latest(self, checkpoint_uri: str) -> CheckpointInfo | None:
        """The newest committed checkpoint under the root, or None if there is none (yet)."""
        log = _log.bind(checkpoint_uri=checkpoint_uri)
        try:
            reader = self._open(checkpoint_uri)
            marker = storage.latest_committed(reader)
        except (storage.StorageError, FileNotFoundError, NotADirectoryError) as exc:
            log.warning("checkpoint location unusable", error=str(exc))
            return None
        except Exception as exc:  # anything else means we do not know
            raise _read_failure(exc, checkpoint_uri, _LIST_AND_GET, "checkpoints") from exc
        self._warn_about_rejected_markers(reader, marker, log)
        if marker is None:
            log.info("no committed checkpoint")
            return None
        return CheckpointInfo(marker.step, layout.checkpoint_dir(reader.uri, marker.step), marker)

    def recent_markers(self, checkpoint_uri: str, count: int = 5) -> list[layout.CommitMarker]:
        """Up to `count` usable commit markers under the root, newest first (their measured
        checkpoint cost sets the adaptive interval). Unreadable or absent: an empty list, since
        the caller has a documented default; an unreachable bucket raises like `latest`."""
        log = _log.bind(checkpoint_uri=checkpoint_uri)
        try:
            reader = self._open(checkpoint_uri)
            markers: list[layout.CommitMarker] = []
            for step in reversed(storage.list_step_dirs(reader)):
                marker = storage.read_usable_marker(reader, step)
                if marker is not None:
                    markers.append(marker)
                if len(markers) >= count:
                    break
        except (storage.StorageError, FileNotFoundError, NotADirectoryError) as exc:
            log.warning("checkpoint location unusable", error=str(exc))
            return []
        except Exception as exc:
            raise _read_failure(exc, checkpoint_uri, _LIST_AND_GET, "checkpoints") from exc
        return markers

    def ending(self, checkpoint_uri: str, attempt: int, *, vertex_job_id: str, markers: int = 5) -> Ending:
        """Everything the trainer left of `attempt`'s CustomJob (`vertex_job_id`) and the root's
        checkpoints, read in series in as few calls as the bucket allows (see `evidence`).
        Raises like `latest` and `exit_record`; markers past the latest that cannot be read are
        given up (None), since only the figures and the interval keeper want them."""
        log = _log.bind(checkpoint_uri=checkpoint_uri, attempt=attempt, vertex_job=vertex_job_id)
        try:
            reader = self._open(checkpoint_uri)
            chief, foreign, replicas, runs = evidence.attempt_records(reader, attempt, vertex_job_id)
            steps = storage.list_step_dirs(reader)
        except (storage.StorageError, NotADirectoryError) as exc:
            log.warning("checkpoint location unusable", error=str(exc))
            return Ending(None, None, [], [], [])
        except Exception as exc:
            raise _read_failure(exc, checkpoint_uri, _LIST_AND_GET, "the ending") from exc
        found: list[layout.CommitMarker] = []
        given_up = False
        for step in reversed(steps):
            try:
                marker = storage.read_usable_marker(reader, step)
            except Exception as exc:
                if found:  # the latest is known; the rest are figures
                    log.warning("older commit markers unreadable", error=repr(exc))
                    given_up = True
                    break
                raise _read_failure(exc, checkpoint_uri, "storage.objects.get", "checkpoints") from exc
            if marker is not None:
                found.append(marker)
            if len(found) >= markers:
                break
        newest = found[0] if found else None
        self._warn_about_rejected_markers(reader, newest, log)
        if foreign is not None:
            log.info("exit record belongs to another CustomJob; ignoring it", writer=foreign)
        elif chief is None:
            self._say_no_record(reader, attempt, vertex_job_id, log)
        latest = (
            None
            if newest is None
            else CheckpointInfo(newest.step, layout.checkpoint_dir(reader.uri, newest.step), newest)
        )
        return Ending(latest, chief, replicas, runs, None if given_up else found)

    @staticmethod
    def _say_no_record(reader: Any, attempt: int, vertex_job_id: str | None, log: Any) -> None:
        keys = {layout.exit_record_key(attempt, vertex_job_id), layout.exit_record_key(attempt)}
        key = next((k for k in sorted(keys) if k in getattr(reader, "keys_read", ())), None)
        if key is not None:
            log.warning("exit record is garbled, ignoring it", key=key)
        else:
            log.info("no exit record")

    def exit_record(
        self, checkpoint_uri: str, attempt: int, *, vertex_job_id: str | None = None
    ) -> layout.ExitRecord | None:
        """The trainer's own account of how `attempt` ended, or None if it left none.

        `vertex_job_id` (the numeric id that ends the CustomJob's resource name, what replicas see
        as CLOUD_ML_JOB_ID) names the CustomJob the store recorded for the attempt. The trainer
        writes its record under a name keyed by that id (`trainer.layout.exit_record_key`), which is
        read first, so a cancelled duplicate's record can never speak for the recorded job. The
        legacy per-attempt name is read only when no keyed record exists, and trusted only if it
        names no CustomJob or this one (a trainer of an older release, or a run outside Vertex).
        """
        log = _log.bind(checkpoint_uri=checkpoint_uri, attempt=attempt, vertex_job=vertex_job_id)
        try:
            reader = self._open(checkpoint_uri)
            record = storage.read_exit_record(reader, attempt, vertex_job_id) if vertex_job_id else None
            if record is None:
                legacy = storage.read_exit_record(reader, attempt)
                if legacy is not None and legacy.vertex_job_id in (None, vertex_job_id):
                    record = legacy
                elif legacy is not None:
                    log.info(
                        "exit record belongs to another CustomJob; ignoring it", writer=legacy.vertex_job_id
                    )
                    return None
        except (storage.StorageError, NotADirectoryError) as exc:
            log.warning("checkpoint location unusable", error=str(exc))
            return None
        except Exception as exc:
            raise _read_failure(
                exc, checkpoint_uri, "storage.objects.get", f"the exit record of attempt {attempt}"
            ) from exc
        if record is None:
            self._say_no_record(reader, attempt, vertex_job_id, log)
        return record

    def replica_exits(
        self, checkpoint_uri: str, attempt: int, *, vertex_job_id: str | None = None
    ) -> list[layout.ReplicaExit]:
        """Every replica's own exit record of `attempt`'s CustomJob (`vertex_job_id`); [] when
        none was left or the folder cannot be read (the chief's record and Vertex still speak)."""
        try:
            return storage.read_replica_exits(self._open(checkpoint_uri), attempt, vertex_job_id)
        except Exception as exc:
            refusal = _refusal(exc, checkpoint_uri, "storage.objects.list")
            if refusal is not None:
                raise refusal from exc
            _log.warning("replica exit records unreadable", checkpoint_uri=checkpoint_uri, error=repr(exc))
            return []

    def runs(self, checkpoint_uri: str, attempt: int, *, vertex_job_id: str) -> list[layout.RunRecord]:
        """The run records of `attempt`'s CustomJob (one per run; a second is a restart in
        place); [] when none was left or the folder cannot be read for a passing reason."""
        try:
            return storage.read_run_records(self._open(checkpoint_uri), attempt, vertex_job_id)
        except Exception as exc:
            refusal = _refusal(exc, checkpoint_uri, "storage.objects.list")
            if refusal is not None:
                raise refusal from exc
            _log.warning("run records unreadable", checkpoint_uri=checkpoint_uri, error=repr(exc))
            return []

    @staticmethod
    def _warn_about_rejected_markers(reader: Any, chosen: layout.CommitMarker | None, log: Any) -> None:
        for key in sorted(getattr(reader, "keys_read", ())):
            if not key.endswith(layout.COMMIT_MARKER_NAME):
                continue  # a quarantine marker, read to skip its step, is no garbled commit marker
            step = layout.parse_step_dir(key.rsplit("/", 1)[0])
            if step is not None and (chosen is None or step > chosen.step):
                log.warning("commit marker is garbled, ignoring that checkpoint", step=step)


def committed_step(
    checkpoint_uri: str, *, client: Any = None, timeout: float = gcs_client.CALL_TIMEOUT_SECONDS
) -> int | None:
    """The newest committed step under a checkpoint root, for a reader outside the controller
    (`relaunch wait --for checkpoint`): the same markers `CheckpointProbe.latest` reads, without
    its log lines. None while there is none, or while the root cannot be listed yet."""
    if checkpoint_uri.startswith("gs://"):
        reader: Any = _GcsReader(client or gcs_client.make_client(), checkpoint_uri, timeout)
    else:
        reader = storage.open_storage(checkpoint_uri)
    try:
        marker = storage.latest_committed(reader)
    except (storage.StorageError, FileNotFoundError, NotADirectoryError):
        return None
    return marker.step if marker is not None else None
