"""The trainer's JSON log lines, as the bench scripts read them (from a run's stdout, or from
the log devstack keeps for each replica)."""

from __future__ import annotations

import json
from pathlib import Path


def json_records(text: str) -> list[dict]:
    """Every JSON object line of a trainer's output; other lines (and a line cut by SIGKILL) skipped."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    return records


def chief_log_path(devstack_dir: Path, vertex_job: str) -> Path:
    """Where devstack keeps the log of an attempt's chief replica (workerpool0, index 0): under
    vertex/, or vertex-REGION/ for a region other than a multi-region devstack's first."""
    job_id = vertex_job.rsplit("/", 1)[-1]
    parts = vertex_job.split("/")
    if len(parts) > 3 and (devstack_dir / f"vertex-{parts[3]}" / job_id).exists():
        return devstack_dir / f"vertex-{parts[3]}" / job_id / "workerpool0-0.log"
    return devstack_dir / "vertex" / job_id / "workerpool0-0.log"


def chief_records(devstack_dir: Path, vertex_job: str) -> list[dict]:
    """The JSON lines the chief of one attempt has written so far ([] before it starts)."""
    try:
        return json_records(chief_log_path(devstack_dir, vertex_job).read_text(errors="replace"))
    except FileNotFoundError:
        return []
