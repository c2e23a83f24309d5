"""What the engine says about one job request it was handed (by push or pull).

Kept apart from the HTTP server so the engine can return it without importing the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IntakeStatus = Literal["accepted", "duplicate", "conflict", "invalid", "cancel"]
INTAKE_STATUSES: frozenset[str] = frozenset({"accepted", "duplicate", "conflict", "invalid", "cancel"})


@dataclass(frozen=True)
class IntakeResult:
    # accepted: new job recorded; duplicate: same request seen before (no-op);
    # conflict: same jobId, different spec (recorded, dead-lettered); invalid: unparseable or
    # failed validation (recorded, dead-lettered); cancel: a cancel request was recorded.
    status: IntakeStatus
    job_id: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.status not in INTAKE_STATUSES:
            raise ValueError(f"unknown intake status {self.status!r}")
