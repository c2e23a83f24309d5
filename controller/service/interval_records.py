"""Reading what earlier decisions and the trainer recorded, for the checkpoint interval keeper."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controller.core.adaptive_interval import CheckpointCost


def measured_before(decisions: dict[str, Any] | None) -> CheckpointCost | None:
    """The C the job's newest earlier decision measured from commit markers, if any did."""
    for attempt, chosen in sorted((decisions or {}).items(), key=lambda item: -int(item[0])):
        source = str(chosen.get("costSource") or "")
        if source.startswith("commit markers") and chosen.get("stallSeconds") is not None:
            return CheckpointCost(
                float(chosen["stallSeconds"]),
                float(chosen.get("writeSeconds") or 0.0),
                source if " of attempt " in source else f"commit markers of attempt {attempt}",
            )
    return None


def epoch(stamp: str) -> float | None:
    """Seconds since the epoch of a trainer timestamp (`layout.utc_now`), None if unreadable."""
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None
