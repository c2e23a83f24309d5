"""The trainer's run records of one attempt's CustomJob, as the core's restarts in place.

A run record is written by the chief's launcher as each run of the CustomJob begins
(`trainer.storage.record_run_start`); run 2 and later are Vertex restarting the job in place,
each keeping what the previous run's exit records said. Which restart counts as what is the
core's rule (`controller.core.restarts.from_evidence`); this module only turns records into facts.
"""

from __future__ import annotations

from datetime import datetime

from controller.adapters.vertex import bounded_text, replica_fact
from controller.core.restarts import InPlaceRestart, from_evidence
from trainer import layout


def _epoch(stamp: str | None) -> float | None:
    """Seconds since the epoch of a trainer timestamp, None if absent or unreadable."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def restarts_of(records: list[layout.RunRecord]) -> tuple[InPlaceRestart, ...]:
    """Every restart the records tell (runs 2 and later), in run order."""
    out = []
    for record in sorted(records, key=lambda r: r.run):
        started = _epoch(record.time)
        if record.run < 2 or started is None:
            continue
        chief = record.previous_chief
        replicas = record.previous_replicas
        restart = from_evidence(
            record.run,
            started,
            tuple(replica_fact(r) for r in replicas),
            chief.reason if chief is not None else None,
            _epoch(chief.time) if chief is not None else None,
            max((t for r in replicas if (t := _epoch(r.time)) is not None), default=None),
            chief.step if chief is not None else None,
            record.resume_step,
        )
        out.append(restart)
    return tuple(InPlaceRestart(**{**r.__dict__, "evidence": bounded_text(r.evidence) or ""}) for r in out)
