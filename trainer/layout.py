"""Names and formats shared by the trainer and the controller (see docs/contracts.md).

Standard library only: the controller imports this module and must never pull in torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

CHECKPOINT_FORMAT = "relaunch-checkpoint/v1"
EXIT_FORMAT = "relaunch-exit/v1"
COMMIT_MARKER_NAME = "COMMITTED.json"
EXITS_DIR_NAME = "exits"

EXIT_OK = 0
EXIT_CONFIG = 64
EXIT_RENDEZVOUS_TIMEOUT = 69
EXIT_RUNTIME = 70
EXIT_PREEMPTED_SAVED = 75
EXIT_PREEMPTED_UNSAVED = 76

EXIT_REASONS = ("completed", "preempted", "config_error", "runtime_error", "rendezvous_timeout")

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


def exit_record_path(root: str, attempt: int) -> str:
    return join(root, EXITS_DIR_NAME, f"attempt-{attempt:04d}.json")


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


def _require(doc: dict, key: str, kind: type | tuple[type, ...]):
    if key not in doc:
        raise LayoutError(f"missing field {key!r}")
    value = doc[key]
    # bool is an int subclass: never accept it where a number is expected.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise LayoutError(f"field {key!r} has the wrong type")
    if not isinstance(value, kind):
        raise LayoutError(f"field {key!r} has the wrong type")
    return value


def _load(text: str | bytes) -> dict:
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

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": CHECKPOINT_FORMAT,
                "step": self.step,
                "worldSize": self.world_size,
                "engine": self.engine,
                "jobId": self.job_id,
                "attempt": self.attempt,
                "wallTime": self.wall_time,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            },
            indent=1,
        )

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
        )


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
    time: str = field(default_factory=utc_now)

    def __post_init__(self):
        if self.reason not in EXIT_REASONS:
            raise LayoutError(f"unknown exit reason {self.reason!r}")

    def to_json(self) -> str:
        return json.dumps(
            {
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
            },
            indent=1,
        )

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
        )


def _bad(key: str):
    raise LayoutError(f"field {key!r} has the wrong type")
