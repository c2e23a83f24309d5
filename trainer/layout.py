"""Names and formats shared by the trainer and the controller (see docs/contracts.md).

Standard library only: the controller imports this module and must never pull in torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

CHECKPOINT_FORMAT = "relaunch-checkpoint/v1"
EXIT_FORMAT = "relaunch-exit/v1"
QUARANTINE_FORMAT = "relaunch-quarantine/v1"
REPLICA_EXIT_FORMAT = "relaunch-replica-exit/v1"
RUN_FORMAT = "relaunch-run/v1"
RUNS_DIR_NAME = "runs"
COMMIT_MARKER_NAME = "COMMITTED.json"
# Create-only, beside COMMITTED.json: this checkpoint failed verification and must never be used.
QUARANTINE_MARKER_NAME = "QUARANTINED.json"
# Where a quarantined step directory is moved when training saves that step anew.
QUARANTINE_DIR_NAME = "quarantine"
EXITS_DIR_NAME = "exits"
# Vertex sets this in every replica (devstack too): the numeric id of the CustomJob.
VERTEX_JOB_ID_ENV = "CLOUD_ML_JOB_ID"
# The controller sets this per attempt; default of --checkpoint-every-seconds.
CHECKPOINT_INTERVAL_ENV = "RELAUNCH_CHECKPOINT_INTERVAL_SECONDS"
# The chief's launcher sets this for its workers once it has recorded the run (`RunRecord.run`),
# so the chief's exit record names the run that wrote it.
RUN_ENV = "RELAUNCH_RUN"

EXIT_OK = 0
EXIT_CONFIG = 64
# RELAUNCH_RESUME_FROM named a checkpoint (or the root held committed ones) and none could be
# loaded: restarting from step 0 would silently lose work, so the trainer stops and says so.
EXIT_NO_USABLE_CHECKPOINT = 65
EXIT_RENDEZVOUS_TIMEOUT = 69
EXIT_RUNTIME = 70
EXIT_PREEMPTED_SAVED = 75
EXIT_PREEMPTED_UNSAVED = 76

REASON_COMPLETED = "completed"
REASON_PREEMPTED = "preempted"
REASON_CONFIG_ERROR = "config_error"
REASON_RUNTIME_ERROR = "runtime_error"
REASON_RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
REASON_NO_USABLE_CHECKPOINT = "no_usable_checkpoint"
# Only in per-replica records: this replica stopped because of the rest of the gang (a peer was
# signalled, died or was torn down), not because of its own error or its own signal.
REASON_STOPPED_BY_PEER = "stopped_by_peer"

EXIT_REASONS = (
    REASON_COMPLETED,
    REASON_PREEMPTED,
    REASON_CONFIG_ERROR,
    REASON_RUNTIME_ERROR,
    REASON_RENDEZVOUS_TIMEOUT,
    REASON_NO_USABLE_CHECKPOINT,
)
REPLICA_EXIT_REASONS = (*EXIT_REASONS, REASON_STOPPED_BY_PEER)
# The signal a replica's record names when the kernel's OOM killer ended one of its workers (the
# launcher saw the cgroup's memory.events oom_kill counter grow), told apart from any other kill.
SIGNAL_OOM_KILL = "SIGKILL (out of memory)"

# The exit code each reason is reported with (preempted: 75 when saved, else 76).
REASON_OF_EXIT_CODE = {
    EXIT_OK: REASON_COMPLETED,
    EXIT_CONFIG: REASON_CONFIG_ERROR,
    EXIT_NO_USABLE_CHECKPOINT: REASON_NO_USABLE_CHECKPOINT,
    EXIT_RENDEZVOUS_TIMEOUT: REASON_RENDEZVOUS_TIMEOUT,
    EXIT_RUNTIME: REASON_RUNTIME_ERROR,
    EXIT_PREEMPTED_SAVED: REASON_PREEMPTED,
    EXIT_PREEMPTED_UNSAVED: REASON_PREEMPTED,
}

_STEP_DIR_RE = re.compile(r"^step-(\d{10})$")


class LayoutError(ValueError):
    """A document or a name does not follow the checkpoint contract."""


def join(root: str, *parts: str) -> str:
    """Join URI or path segments with single slashes (works for gs://, file:// and paths)."""
    out = root.rstrip("/")
    for part in parts:
        out = out + "/" + part.strip("/")
    return out


def step_dir_name(step: int) -> str:
    if step < 0:
        raise LayoutError(f"step must be >= 0, got {step}")
    return f"step-{step:010d}"


def checkpoint_dir(root: str, step: int) -> str:
    return join(root, step_dir_name(step))


def commit_marker_path(root_or_step_dir: str, step: int | None = None) -> str:
    """Marker of `checkpoint_dir(root, step)`; with no step, the argument is the step dir itself."""
    step_dir = root_or_step_dir if step is None else checkpoint_dir(root_or_step_dir, step)
    return join(step_dir, COMMIT_MARKER_NAME)


def exits_dir(root: str) -> str:
    return join(root, EXITS_DIR_NAME)


def quarantine_marker_path(root_or_step_dir: str, step: int | None = None) -> str:
    """QUARANTINED.json of `checkpoint_dir(root, step)`; with no step, the argument is the step dir."""
    step_dir = root_or_step_dir if step is None else checkpoint_dir(root_or_step_dir, step)
    return join(step_dir, QUARANTINE_MARKER_NAME)


def quarantine_archive_dir(root: str, step: int, attempt: int, token: str) -> str:
    """Where a quarantined step directory goes when its step is saved anew (kept as evidence)."""
    return join(root, QUARANTINE_DIR_NAME, f"{step_dir_name(step)}-a{attempt:04d}-{token}")


def is_temp_name(path: str) -> bool:
    """Names of unfinished writes (ours: `x.tmp-<hex>`; others': `x.tmp`): never part of a checkpoint."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return ".tmp-" in base or base.endswith(".tmp")


_ID_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_.-]")


def _safe_id(text: str) -> str:
    return _ID_UNSAFE_RE.sub("_", text)[:128]


def run_from_env(env: Mapping[str, str]) -> int | None:
    """The run number the chief's launcher recorded (RELAUNCH_RUN), None if unset or garbled."""
    value = (env.get(RUN_ENV) or "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


def vertex_job_id_from_env(env: Mapping[str, str]) -> str | None:
    """The CustomJob id Vertex gives the replica, or None outside Vertex."""
    value = (env.get(VERTEX_JOB_ID_ENV) or "").strip()
    return _safe_id(value) if value else None


def exit_record_key(attempt: int, vertex_job_id: str | None = None) -> str:
    """Key below the root of one attempt's exit record.

    With the CustomJob's id the name is unique to that job, so two CustomJobs that ran the same
    attempt (an ambiguous create that was adopted, a duplicate) never overwrite each other's.
    Without it (outside Vertex) it is the legacy `exits/attempt-NNNN.json`.
    """
    suffix = f"-{_safe_id(vertex_job_id)}" if vertex_job_id else ""
    return f"{EXITS_DIR_NAME}/attempt-{attempt:04d}{suffix}.json"


# The small records the controller reads at an ending (exit records, run records) also travel in
# the object's custom metadata under this key, so one listing of an attempt's exit folder returns
# them all without a read per object. GCS allows 8 KiB of custom metadata per object
# (https://cloud.google.com/storage/quotas#objects); a record larger than RECORD_METADATA_MAX
# bytes goes without it and is read whole. Older trainers wrote none: readers fall back the same.
RECORD_METADATA_KEY = "relaunch-record"
RECORD_METADATA_MAX = 4096


def record_metadata(data: bytes) -> dict[str, str]:
    """The custom metadata to write with a record's bytes: its JSON, compacted, when it fits."""
    try:
        compact = json.dumps(json.loads(data), separators=(",", ":"))
    except ValueError:
        return {}
    return {RECORD_METADATA_KEY: compact} if len(compact) <= RECORD_METADATA_MAX else {}


def exit_record_path(root: str, attempt: int, vertex_job_id: str | None = None) -> str:
    return join(root, exit_record_key(attempt, vertex_job_id))


_LOCAL_JOB = "local"


def replica_exits_key(attempt: int, vertex_job_id: str | None = None) -> str:
    """Folder (below the root) of the per-replica exit records of one attempt's CustomJob."""
    job = _safe_id(vertex_job_id) if vertex_job_id else _LOCAL_JOB
    return f"{EXITS_DIR_NAME}/attempt-{attempt:04d}/{job}"


def replica_exit_key(attempt: int, vertex_job_id: str | None, replica: str) -> str:
    return f"{replica_exits_key(attempt, vertex_job_id)}/{_safe_id(replica)}.json"


def replica_exit_path(root: str, attempt: int, vertex_job_id: str | None, replica: str) -> str:
    return join(root, replica_exit_key(attempt, vertex_job_id, replica))


def runs_key(attempt: int, vertex_job_id: str | None) -> str:
    """Folder (below the root) of the run records of one attempt's CustomJob: one per run of its
    chief, so a restart in place (the same CustomJob run again) leaves a second one."""
    return f"{replica_exits_key(attempt, vertex_job_id)}/{RUNS_DIR_NAME}"


def run_record_key(attempt: int, vertex_job_id: str | None, run: int) -> str:
    return f"{runs_key(attempt, vertex_job_id)}/run-{run:04d}.json"


_RUN_NAME_RE = re.compile(r"/run-(\d{4,})\.json$")


def parse_run_key(key: str) -> int | None:
    match = _RUN_NAME_RE.search(key)
    return int(match.group(1)) if match else None


def replica_name(task_type: str | None, task_index: int | None, node_rank: int) -> str:
    """`workerpool1-0` on Vertex (CLUSTER_SPEC's task), `node-3` elsewhere."""
    if task_type:
        return f"{task_type}-{task_index or 0}"
    return f"node-{node_rank}"


def list_replica_exit_paths(keys: Iterable[str], attempt: int, vertex_job_id: str | None = None) -> list[str]:
    """Of a listing of keys below the root, the per-replica exit records of one attempt's job."""
    folder = replica_exits_key(attempt, vertex_job_id) + "/"
    return sorted(
        k for k in keys if k.startswith(folder) and "/" not in k[len(folder) :] and k.endswith(".json")
    )


def parse_step_dir(name: str) -> int | None:
    """The step of a checkpoint directory name (`step-0000000120` or a path ending in it), else None."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    match = _STEP_DIR_RE.match(base)
    return int(match.group(1)) if match else None


def split_checkpoint_dir(uri: str) -> tuple[str, int]:
    """Split the URI of one checkpoint directory into (root, step); LayoutError if it is not one."""
    stripped = uri.rstrip("/")
    step = parse_step_dir(stripped)
    if step is None or "/" not in stripped:
        raise LayoutError(f"not a checkpoint directory URI: {uri!r}")
    return stripped.rsplit("/", 1)[0], step


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now_ms() -> str:
    """Millisecond resolution: replica records are ordered by it to find the first to fail."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _require(doc: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in doc:
        raise LayoutError(f"missing field {key!r}")
    value = doc[key]
    # bool is an int subclass: never accept it where a number is expected.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise LayoutError(f"field {key!r} has the wrong type")
    if not isinstance(value, kind):
        raise LayoutError(f"field {key!r} has the wrong type")
    return value


def _load(text: str | bytes) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LayoutError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise LayoutError("not a JSON object")
    return doc


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class CommitMarker:
    step: int
    world_size: int
    engine: str
    job_id: str
    attempt: int
    files: tuple[FileEntry, ...] = field(default_factory=tuple)
    wall_time: str = field(default_factory=utc_now)
    # Measured cost of this checkpoint (optional; older markers have neither): how long the
    # slowest rank's training loop stalled for it, and seconds from the save's start to its commit.
    blocking_seconds: float | None = None
    write_seconds: float | None = None
    # Optional (absent in older markers, and written only when true): the save a SIGTERM started
    # (the emergency checkpoint). Its stall is no measure of a periodic save's cost, which the
    # controller's adaptive interval reads from these markers.
    emergency: bool = False
    # Optional (absent in older markers): the precision it was trained at (bf16, fp16, fp32); a
    # resume at another precision is refused.
    precision: str | None = None

    def to_json(self) -> str:
        doc = {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "worldSize": self.world_size,
            "engine": self.engine,
            "jobId": self.job_id,
            "attempt": self.attempt,
            "wallTime": self.wall_time,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        if self.blocking_seconds is not None:
            doc["blockingSeconds"] = self.blocking_seconds
        if self.write_seconds is not None:
            doc["writeSeconds"] = self.write_seconds
        if self.emergency:
            doc["emergency"] = True
        if self.precision is not None:
            doc["precision"] = self.precision
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> CommitMarker:
        doc = _load(text)
        if doc.get("format") != CHECKPOINT_FORMAT:
            raise LayoutError(f"unknown checkpoint format {doc.get('format')!r}")
        files = []
        for entry in _require(doc, "files", list):
            if not isinstance(entry, dict):
                raise LayoutError("file entry is not an object")
            files.append(
                FileEntry(
                    path=_require(entry, "path", str),
                    size=_require(entry, "size", int),
                    sha256=_require(entry, "sha256", str),
                )
            )
        return cls(
            step=_require(doc, "step", int),
            world_size=_require(doc, "worldSize", int),
            engine=_require(doc, "engine", str),
            job_id=_require(doc, "jobId", str),
            attempt=_require(doc, "attempt", int),
            wall_time=_require(doc, "wallTime", str),
            files=tuple(files),
            blocking_seconds=_optional_seconds(doc, "blockingSeconds"),
            write_seconds=_optional_seconds(doc, "writeSeconds"),
            emergency=bool(_optional(doc, "emergency", bool)),
            precision=_optional(doc, "precision", str),
        )


def _optional_seconds(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise LayoutError(f"field {key!r} has the wrong type")
    return float(value)


def _optional(doc: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise LayoutError(f"field {key!r} has the wrong type")
    return value


@dataclass(frozen=True)
class ExitRecord:
    job_id: str
    attempt: int
    reason: str
    exit_code: int
    step: int | None = None
    last_committed_step: int | None = None
    checkpoint_saved: bool = False
    signal: str | None = None
    # Milliseconds since this release (whole seconds before): `written_since` compares it with
    # the start of a run that may have begun within the same second.
    time: str = field(default_factory=utc_now_ms)
    # Optional (absent in older records):
    vertex_job_id: str | None = None  # the CustomJob that wrote it (CLOUD_ML_JOB_ID)
    run: int | None = None  # the run of that CustomJob (RELAUNCH_RUN), when the launcher recorded one
    # With reason no_usable_checkpoint: the root searched, and the steps lost if training
    # restarts from scratch (the newest step a checkpoint existed for, or the resume floor).
    checkpoint_root: str | None = None
    steps_lost: int | None = None
    # The step training ends at (--steps): with it the controller knows a checkpoint committed
    # at that step is the last one, and starts no attempt that would train 0 steps.
    final_step: int | None = None

    def __post_init__(self) -> None:
        if self.reason not in EXIT_REASONS:
            raise LayoutError(f"unknown exit reason {self.reason!r}")

    def to_json(self) -> str:
        doc = {
            "format": EXIT_FORMAT,
            "jobId": self.job_id,
            "attempt": self.attempt,
            "reason": self.reason,
            "signal": self.signal,
            "step": self.step,
            "lastCommittedStep": self.last_committed_step,
            "checkpointSaved": self.checkpoint_saved,
            "exitCode": self.exit_code,
            "time": self.time,
        }
        for key, value in (
            ("vertexJobId", self.vertex_job_id),
            ("checkpointRoot", self.checkpoint_root),
            ("stepsLost", self.steps_lost),
            ("finalStep", self.final_step),
            ("run", self.run),
        ):
            if value is not None:
                doc[key] = value
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> ExitRecord:
        doc = _load(text)
        if doc.get("format") != EXIT_FORMAT:
            raise LayoutError(f"unknown exit record format {doc.get('format')!r}")
        optional_int = (int, type(None))
        return cls(
            job_id=_require(doc, "jobId", str),
            attempt=_require(doc, "attempt", int),
            reason=_require(doc, "reason", str),
            exit_code=_require(doc, "exitCode", int),
            step=doc.get("step") if isinstance(doc.get("step"), optional_int) else _bad("step"),
            last_committed_step=(
                doc.get("lastCommittedStep")
                if isinstance(doc.get("lastCommittedStep"), optional_int)
                else _bad("lastCommittedStep")
            ),
            checkpoint_saved=_require(doc, "checkpointSaved", bool),
            signal=doc.get("signal") if isinstance(doc.get("signal"), (str, type(None))) else _bad("signal"),
            time=_require(doc, "time", str),
            vertex_job_id=_optional(doc, "vertexJobId", str),
            checkpoint_root=_optional(doc, "checkpointRoot", str),
            steps_lost=_optional(doc, "stepsLost", int),
            final_step=_optional(doc, "finalStep", int),
            run=_optional(doc, "run", int),
        )


@dataclass(frozen=True)
class QuarantineRecord:
    """Content of QUARANTINED.json: why a committed checkpoint must never be used again."""

    step: int
    reason: str  # "sha256_mismatch", "size_mismatch", "missing_file", ...
    detail: str
    job_id: str
    attempt: int
    time: str = field(default_factory=utc_now)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": QUARANTINE_FORMAT,
                "step": self.step,
                "reason": self.reason,
                "detail": self.detail,
                "jobId": self.job_id,
                "attempt": self.attempt,
                "time": self.time,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> QuarantineRecord:
        doc = _load(text)
        if doc.get("format") != QUARANTINE_FORMAT:
            raise LayoutError(f"unknown quarantine format {doc.get('format')!r}")
        return cls(
            step=_require(doc, "step", int),
            reason=_require(doc, "reason", str),
            detail=_require(doc, "detail", str),
            job_id=_require(doc, "jobId", str),
            attempt=_require(doc, "attempt", int),
            time=_require(doc, "time", str),
        )


@dataclass(frozen=True)
class ReplicaExit:
    """Why one replica (one node: workerpoolN-I) of one CustomJob stopped; written by its launcher.

    `signal` is set only when this replica itself received it. `time` has milliseconds so the
    controller can order the replicas of a gang and find the first one that failed.
    """

    job_id: str
    attempt: int
    replica: str
    node_rank: int
    reason: str
    exit_code: int
    vertex_job_id: str | None = None
    signal: str | None = None
    step: int | None = None
    detail: str | None = None
    final: bool = True  # False: written when the stop began; the replica may have died since
    time: str = field(default_factory=utc_now_ms)
    # Optional (absent in older records, and when no worker failed on its own): `exit_code` is the
    # launcher's contract code (70 for any worker error); these are the failed worker's own exit
    # status (-N: killed by signal N, as the elastic agent reports it) and that signal's name.
    worker_exit_code: int | None = None
    worker_signal: str | None = None

    def __post_init__(self) -> None:
        if self.reason not in REPLICA_EXIT_REASONS:
            raise LayoutError(f"unknown replica exit reason {self.reason!r}")

    def to_json(self) -> str:
        doc = {
            "format": REPLICA_EXIT_FORMAT,
            "jobId": self.job_id,
            "attempt": self.attempt,
            "vertexJobId": self.vertex_job_id,
            "replica": self.replica,
            "nodeRank": self.node_rank,
            "reason": self.reason,
            "exitCode": self.exit_code,
            "signal": self.signal,
            "step": self.step,
            "detail": self.detail,
            "final": self.final,
            "time": self.time,
        }
        for key, value in (("workerExitCode", self.worker_exit_code), ("workerSignal", self.worker_signal)):
            if value is not None:
                doc[key] = value
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReplicaExit:
        doc = _load(text)
        if doc.get("format") != REPLICA_EXIT_FORMAT:
            raise LayoutError(f"unknown replica exit format {doc.get('format')!r}")
        return cls(
            job_id=_require(doc, "jobId", str),
            attempt=_require(doc, "attempt", int),
            replica=_require(doc, "replica", str),
            node_rank=_require(doc, "nodeRank", int),
            reason=_require(doc, "reason", str),
            exit_code=_require(doc, "exitCode", int),
            vertex_job_id=_optional(doc, "vertexJobId", str),
            signal=_optional(doc, "signal", str),
            step=_optional(doc, "step", int),
            detail=_optional(doc, "detail", str),
            final=_require(doc, "final", bool),
            time=_require(doc, "time", str),
            worker_exit_code=_optional(doc, "workerExitCode", int),
            worker_signal=_optional(doc, "workerSignal", str),
        )


@dataclass(frozen=True)
class RunRecord:
    """One run of an attempt's CustomJob, written by its chief's launcher as the run begins.

    Run 1 is the CustomJob's first; a higher number means Vertex restarted the job in place. A
    restarted run keeps what the previous run's exit records said (they are overwritten when
    this run ends): the chief's, and every replica's written since the previous run began.
    """

    job_id: str
    attempt: int
    vertex_job_id: str | None
    run: int
    resume_step: int | None = None  # the newest committed step this run resumes from
    time: str = field(default_factory=utc_now_ms)
    previous_started: str | None = None  # the previous run record's time
    previous_chief: ExitRecord | None = None
    previous_replicas: tuple[ReplicaExit, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": RUN_FORMAT,
                "jobId": self.job_id,
                "attempt": self.attempt,
                "vertexJobId": self.vertex_job_id,
                "run": self.run,
                "resumeStep": self.resume_step,
                "time": self.time,
                "previousStarted": self.previous_started,
                "previousChief": json.loads(self.previous_chief.to_json()) if self.previous_chief else None,
                "previousReplicas": [json.loads(r.to_json()) for r in self.previous_replicas],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> RunRecord:
        doc = _load(text)
        if doc.get("format") != RUN_FORMAT:
            raise LayoutError(f"unknown run record format {doc.get('format')!r}")
        chief = doc.get("previousChief")
        replicas = doc.get("previousReplicas") or []
        if not isinstance(chief, (dict, type(None))) or not isinstance(replicas, list):
            raise LayoutError("field 'previousChief' or 'previousReplicas' has the wrong type")
        return cls(
            job_id=_require(doc, "jobId", str),
            attempt=_require(doc, "attempt", int),
            vertex_job_id=_optional(doc, "vertexJobId", str),
            run=_require(doc, "run", int),
            resume_step=_optional(doc, "resumeStep", int),
            time=_require(doc, "time", str),
            previous_started=_optional(doc, "previousStarted", str),
            previous_chief=ExitRecord.from_json(json.dumps(chief)) if chief is not None else None,
            previous_replicas=tuple(ReplicaExit.from_json(json.dumps(r)) for r in replicas),
        )


def written_since(stamp: str, run_started: str) -> bool:
    """Whether a record stamped `stamp` was written at or after `run_started` (a run record's
    time). A stamp in whole seconds (a trainer older than this release) gets the benefit of its
    second; a stamp that cannot be read is kept, as the string comparison before kept it."""
    try:
        written = datetime.fromisoformat(stamp)
        started = datetime.fromisoformat(run_started)
    except (TypeError, ValueError):
        return True
    if written.microsecond == 0 and "." not in stamp:
        started = started.replace(microsecond=0)
    return written >= started


def records_of_run(
    run: RunRecord, chief: ExitRecord | None, replicas: Iterable[ReplicaExit]
) -> tuple[ExitRecord | None, tuple[ReplicaExit, ...]]:
    """The exit records that speak of `run`: each run overwrites the ones before it only when
    it ends, so a run killed without a word (SIGKILL) leaves an earlier run's records in place.
    The chief's record names its run when the launcher recorded one; otherwise, and for every
    replica's, the record must be written after the run began."""
    if chief is not None and not (
        chief.run == run.run if chief.run is not None else written_since(chief.time, run.time)
    ):
        chief = None
    return chief, tuple(r for r in replicas if written_since(r.time, run.time))


def first_failed_replica(records: list[ReplicaExit]) -> ReplicaExit | None:
    """The replica whose own ending came first: not `completed`, not a victim (`stopped_by_peer`)."""
    own = [r for r in records if r.reason not in (REASON_COMPLETED, REASON_STOPPED_BY_PEER)]
    return min(own, key=lambda r: r.time, default=None)


def _bad(key: str) -> NoReturn:
    raise LayoutError(f"field {key!r} has the wrong type")
