"""`controller_degraded` for this instance, fed by several sources (the leader lease, the
periodic pass, the request intake)."""

from __future__ import annotations

import threading

from controller.service.alerts import AlertSink


class Degradation:
    """`controller_degraded` for this instance, fed by several sources (the leader lease, the
    reconcile pass): raised once when any source has failed `threshold` times in a row, resolved
    once every source succeeds again. Sources never resolve one another's trouble."""

    KIND = "controller_degraded"

    def __init__(self, alerts: AlertSink, threshold: int):
        self._alerts = alerts
        self._threshold = max(1, threshold)
        self._streaks: dict[str, int] = {}
        self._raised = False
        # Stays: streaks come from the pass worker, the daemon loop and the intake callbacks, and
        # the HTTP readiness check reads them: an in-memory map shared across threads.
        self._lock = threading.Lock()

    def failed(self, source: str, errors: list[str]) -> None:
        with self._lock:
            self._streaks[source] = self._streaks.get(source, 0) + 1
            streak = self._streaks[source]
            fire = streak >= self._threshold and not self._raised
            self._raised = self._raised or fire
        if fire:
            self._alerts.raise_alert(
                self.KIND,
                "ERROR",
                f"{source}: {streak} tries in a row failed: {errors[0] if errors else 'unknown error'}",
                details={"source": source, "failedTries": streak, "errors": errors[:5]},
            )

    def succeeded(self, source: str) -> None:
        with self._lock:
            before = self._streaks.pop(source, 0)
            resolve = self._raised and not any(n >= self._threshold for n in self._streaks.values())
            self._raised = self._raised and not resolve
        if resolve:
            self._alerts.resolve(
                self.KIND, None, f"{source} works again", details={"failedTriesBefore": before}
            )

    def is_degraded(self) -> tuple[bool, str]:
        with self._lock:
            failing = sorted(source for source, n in self._streaks.items() if n >= self._threshold)
        return bool(failing), ", ".join(failing)

    def source(self, name: str) -> _PassHealth:
        return _PassHealth(self, name)


class _PassHealth:
    """What the periodic pass reports to (the `ReconcileHealth` interface)."""

    def __init__(self, degradation: Degradation, name: str):
        self._degradation, self._name = degradation, name

    def pass_failed(self, errors: list[str]) -> None:
        self._degradation.failed(self._name, errors)

    def pass_succeeded(self) -> None:
        self._degradation.succeeded(self._name)
