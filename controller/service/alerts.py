"""Ops alerts: a JSON message on the alerts topic and a structured log line per alert.

Alert JSON (schema and one example per kind in docs/alerts.md): {"kind", "severity", "jobId",
"attempt", "summary", "details", "time", "state": "firing" | "resolved"}.

Firing alerts are deduplicated per (job, kind, cause) within a cooldown so a flapping condition
pages once; the cause (optional, e.g. a rejected request's status and reason) keeps one cause from
hiding another of the same kind for the same job. A resolved alert goes out only for a (job, kind) that this sink announced as firing and has
not resolved since, so consumers never see a "resolved" without its "firing".
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from controller import logs

log = logs.get("relaunch.alerts")

FIRING = "firing"
RESOLVED = "resolved"


class Publisher(Protocol):
    def publish(self, topic: str, data: bytes, **attributes: str): ...


@dataclass(frozen=True)
class _Firing:
    severity: str
    attempt: int | None


def rfc3339(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat().replace("+00:00", "Z")


class AlertSink:
    def __init__(
        self,
        publisher: Publisher | None,
        topic: str | None,
        *,
        cooldown_seconds: float = 900.0,
        clock: Callable[[], float] = time.time,
        on_alert: Callable[[dict], None] | None = None,
    ):
        self._publisher = publisher
        self._topic = topic
        self._cooldown = cooldown_seconds
        self._clock = clock
        self._last_fired: dict[tuple[str | None, str, str, str], float] = {}
        # What is firing now; the cooldown outlives a resolve on purpose (flapping pages once).
        # Keyed by (job, kind, condition): a job-less kind such as controller_degraded has several
        # independent conditions (reconcile passes, subscription streams) that resolve separately.
        self._firing: dict[tuple[str | None, str, str], _Firing] = {}
        self._lock = threading.Lock()
        self._pruned_size = 0
        self._on_alert = on_alert or (lambda alert: None)

    def raise_alert(
        self,
        kind: str,
        severity: str,
        summary: str,
        *,
        job_id: str | None = None,
        attempt: int | None = None,
        details: dict[str, Any] | None = None,
        cause: str = "",
        condition: str = "",
    ) -> dict | None:
        """Publish and log one firing alert; returns it, or None when the cooldown suppressed it.

        `cause` narrows the cooldown: alerts of one kind for one job with different causes never
        suppress each other (a rejected request must not hide a real conflict for the job)."""
        now = self._clock()
        with self._lock:
            self._drop_expired_cooldowns(now)
            last = self._last_fired.get((job_id, kind, condition, cause))
            if last is not None and now - last < self._cooldown:
                log.info(
                    "alert suppressed by cooldown",
                    job_id=job_id,
                    attempt=attempt,
                    alert_kind=kind,
                    cooldown_seconds=self._cooldown,
                )
                return None
            self._last_fired[(job_id, kind, condition, cause)] = now
            self._firing[(job_id, kind, condition)] = _Firing(severity, attempt)
        return self._emit(kind, severity, summary, job_id, attempt, details, FIRING, now)

    def resolve(
        self,
        kind: str,
        job_id: str | None,
        summary: str,
        *,
        attempt: int | None = None,
        details: dict[str, Any] | None = None,
        condition: str = "",
        fired_with: str | None = None,
    ) -> dict | None:
        """Announce that a condition has cleared; returns the alert, or None if it was not firing.

        `fired_with`: the caller knows it fired, with this severity (the job's stored state says
        so), even if this process never saw it fire (it was raised before a failover)."""
        now = self._clock()
        with self._lock:
            fired = self._firing.pop((job_id, kind, condition), None)
        if fired is None and fired_with is not None:
            fired = _Firing(fired_with, attempt)
        if fired is None:
            return None
        return self._emit(
            kind,
            fired.severity,
            summary,
            job_id,
            attempt if attempt is not None else fired.attempt,
            details,
            RESOLVED,
            now,
        )

    def is_firing(self, kind: str, job_id: str | None = None, condition: str | None = None) -> bool:
        """Whether `kind` fires for `job_id` (for one condition, or for any when None)."""
        with self._lock:
            return any(
                key[:2] == (job_id, kind) and (condition is None or key[2] == condition)
                for key in self._firing
            )

    def forget_job(self, job_id: str) -> None:
        """Drop what is remembered about a job that is gone from the store (retention), so these
        maps hold only jobs that still exist."""
        with self._lock:
            for key in [k for k in self._last_fired if k[0] == job_id]:
                del self._last_fired[key]
            for firing in [k for k in self._firing if k[0] == job_id]:
                del self._firing[firing]

    def tracked_keys(self) -> int:
        """How many cooldown and firing entries are held (for tests and metrics)."""
        with self._lock:
            return len(self._last_fired) + len(self._firing)

    def _drop_expired_cooldowns(self, now: float) -> None:
        # An expired cooldown suppresses nothing; dropping it keeps the map as small as the set
        # of alerts of the last cooldown period. Amortised: only when the map has grown.
        if len(self._last_fired) < 2 * self._pruned_size + 64:
            return
        for key in [k for k, fired_at in self._last_fired.items() if now - fired_at >= self._cooldown]:
            del self._last_fired[key]
        self._pruned_size = len(self._last_fired)

    def _emit(
        self,
        kind: str,
        severity: str,
        summary: str,
        job_id: str | None,
        attempt: int | None,
        details: dict[str, Any] | None,
        state: str,
        now: float,
    ) -> dict:
        alert = {
            "kind": kind,
            "severity": severity,
            "jobId": job_id,
            "attempt": attempt,
            "summary": summary,
            "details": details or {},
            "time": rfc3339(now),
            "state": state,
        }
        # One structured line; log-based alert policies match jsonPayload.alert_kind and
        # alert_state="firing" (resolved lines are INFO so they never page).
        logger = log.bind(
            job_id=job_id, attempt=attempt, alert_kind=kind, alert_state=state, alert_severity=severity
        )
        if state == RESOLVED:
            logger.info(summary, alert=alert)
        else:
            (logger.error if severity == "ERROR" else logger.warning)(summary, alert=alert)
        if self._publisher is not None and self._topic:
            try:
                self._publisher.publish(
                    self._topic,
                    json.dumps(alert).encode(),
                    kind=kind,
                    severity=severity,
                    jobId=job_id or "",
                    state=state,
                )
            except Exception as error:  # an alert path failure must never stop the controller
                log.error("alert publish failed", error=str(error), alert_kind=kind)
        try:
            self._on_alert(alert)
        except Exception as error:
            log.error("alert hook failed", error=str(error), alert_kind=kind)
        return alert


class ReconcileHealth:
    """Raises `controller_degraded` after N reconcile passes in a row hit Vertex or GCS errors,
    and resolves it with the next clean pass. One bad pass is noise (a retry outlasted); a streak
    means the controller cannot see or steer its jobs."""

    KIND = "controller_degraded"

    def __init__(self, sink: AlertSink, threshold: int):
        self._sink = sink
        self._threshold = max(1, threshold)
        self._streak = 0
        self._lock = threading.Lock()

    def pass_failed(self, errors: list[str]) -> None:
        with self._lock:
            self._streak += 1
            streak = self._streak
        if streak >= self._threshold:
            self._sink.raise_alert(
                self.KIND,
                "ERROR",
                f"{streak} reconcile passes in a row failed: {errors[0] if errors else 'unknown error'}",
                details={"failedPasses": streak, "errors": errors[:5]},
            )

    def pass_succeeded(self) -> None:
        with self._lock:
            streak, self._streak = self._streak, 0
        self._sink.resolve(
            self.KIND, None, "reconcile passes succeed again", details={"failedPassesBefore": streak}
        )


def unreadable_checkpoints_alert(job_id: str, error: Any) -> tuple[str, str, str, dict[str, Any]]:
    """(kind, severity, summary, details) of the alert for a checkpoint root the controller may
    not read (`error`: adapters.checkpoints.CheckpointsUnreadable): endings still apply, with
    progress unknown."""
    return (
        "checkpoints_unreadable",
        "ERROR",
        f"job {job_id}: cannot read gs://{error.bucket} ({error.permission} needed): {error.reason}; "
        "attempt endings are applied with progress unknown",
        {"bucket": error.bucket, "permission": error.permission, "reason": error.reason},
    )
