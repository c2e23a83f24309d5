"""Ops alerts: a JSON message on the alerts topic and a structured log line per alert.

Alert JSON (schema in docs/alerts.md): {"kind", "severity", "jobId", "attempt", "summary",
"details", "time", "state": "firing" | "resolved"}. Alerts are deduplicated per (job, kind)
within a cooldown so a flapping condition pages once.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from controller import logs

log = logs.get("relaunch.alerts")


class Publisher(Protocol):
    def publish(self, topic: str, data: bytes, **attributes: str): ...


class AlertSink:
    def __init__(self, publisher: Publisher | None, topic: str | None, *,
                 cooldown_seconds: float = 900.0, clock: Callable[[], float] = time.time,
                 on_alert: Callable[[dict], None] | None = None):
        self._publisher = publisher
        self._topic = topic
        self._cooldown = cooldown_seconds
        self._clock = clock
        self._last: dict[tuple[str | None, str], float] = {}
        self._lock = threading.Lock()
        self._on_alert = on_alert or (lambda alert: None)

    def raise_alert(self, kind: str, severity: str, summary: str, *, job_id: str | None = None,
                    attempt: int | None = None, details: dict[str, Any] | None = None,
                    state: str = "firing") -> dict | None:
        """Publish and log one alert; returns it, or None when suppressed by the cooldown."""
        now = self._clock()
        key = (job_id, kind)
        with self._lock:
            if state == "firing":
                last = self._last.get(key)
                if last is not None and now - last < self._cooldown:
                    return None
                self._last[key] = now
            else:
                self._last.pop(key, None)
        alert = {
            "kind": kind, "severity": severity, "jobId": job_id, "attempt": attempt,
            "summary": summary, "details": details or {}, "state": state,
            "time": datetime.fromtimestamp(now, timezone.utc).isoformat().replace("+00:00", "Z"),
        }
        logger = log.bind(job_id=job_id, attempt=attempt, alert_kind=kind, alert_state=state)
        (logger.error if severity == "ERROR" else logger.warning)(summary, alert=alert)
        if self._publisher is not None and self._topic:
            try:
                self._publisher.publish(self._topic, json.dumps(alert).encode(), kind=kind,
                                        severity=severity, jobId=job_id or "")
            except Exception as error:  # an alert path failure must never stop the controller
                log.error("alert publish failed", error=str(error), alert_kind=kind)
        self._on_alert(alert)
        return alert
