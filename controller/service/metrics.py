"""Prometheus metrics of the controller, in a registry of their own.

Each `Metrics` owns a fresh `CollectorRegistry` instead of the process-global one, so a test (or a
second controller in one process) gets clean counters and no "duplicated timeseries" errors.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# What /metrics answers with (text exposition format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# From "resubmitted at once" to "waited an hour for a quota window or capacity".
RECOVERY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.jobs = Gauge("relaunch_jobs", "Jobs the controller tracks, by state.", ["state"], registry=r)
        self.attempts = Counter("relaunch_attempts", "Attempts submitted as CustomJobs.", registry=r)
        self.preemptions = Counter("relaunch_preemptions", "Attempts ended by a Spot preemption.", registry=r)
        self.failures = Counter(
            "relaunch_failures",
            "Attempts that ended in failure, by ending (user_error, infrastructure, timeout, ...).",
            ["ending"],
            registry=r,
        )
        self.recovery_seconds = Histogram(
            "relaunch_recovery_seconds",
            "Time from observing an attempt's end to the replacement's CreateCustomJob.",
            buckets=RECOVERY_BUCKETS,
            registry=r,
        )
        self.api_errors = Counter(
            "relaunch_api_errors", "Failed Google API calls, by api and code.", ["api", "code"], registry=r
        )
        self.rejected_requests = Counter(
            "relaunch_rejected_requests",
            "Job requests rejected and dead-lettered, by reason.",
            ["reason"],
            registry=r,
        )
        self.alerts = Counter("relaunch_alerts", "Alerts raised, by kind.", ["kind"], registry=r)
        self.unreadable_hints = Counter(
            "relaunch_unreadable_hints",
            "Messages on the events subscription that were not readable log entries (acked, ignored).",
            registry=r,
        )
        self.pruned_records = Counter(
            "relaunch_pruned_records",
            "Records deleted from the state store by retention, by kind (rejected, job).",
            ["kind"],
            registry=r,
        )
        self.http_refused = Counter(
            "relaunch_http_refused",
            "HTTP connections answered 503 because every worker was busy.",
            registry=r,
        )
        self.is_leader = Gauge(
            "relaunch_is_leader", "1 while this instance holds the leader lease.", registry=r
        )
        self.goodput_ratio = Gauge(
            "relaunch_goodput_ratio",
            "Share of a job's GPU time that produced kept training progress.",
            ["job_id"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "relaunch_workqueue_depth",
            "Job ids in the work queue, by kind (ready, delayed, serving).",
            ["kind"],
            registry=r,
        )
        self.queue_oldest = Gauge(
            "relaunch_workqueue_oldest_seconds",
            "How long the oldest ready job id has waited for a worker.",
            registry=r,
        )
        self.queue_wait = Histogram(
            "relaunch_workqueue_wait_seconds",
            "Time a job id waited in the work queue, from ready to served.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120),
            registry=r,
        )
        self.queue_refused = Gauge(
            "relaunch_workqueue_refused", "Job ids the full work queue refused since the start.", registry=r
        )
        self._known_states: set[str] = set()
        # A queue worker sets counts while an HTTP thread may be refreshing them for a scrape.
        self._states_lock = threading.Lock()

    # --- jobs by state -------------------------------------------------------------------------
    def set_job_states(self, counts: Mapping[str, int]) -> None:
        """Replace the per-state job counts; states absent from `counts` drop to 0 (not vanish),
        so a dashboard sees "no more RUNNING jobs" rather than a stale last value."""
        with self._states_lock:
            for state in self._known_states - set(counts):
                self.jobs.labels(state=state).set(0)
            for state, count in counts.items():
                self.jobs.labels(state=state).set(count)
            self._known_states |= set(counts)

    # --- convenience recorders (one place for label names) -------------------------------------
    def attempt_submitted(self) -> None:
        self.attempts.inc()

    def preempted(self) -> None:
        self.preemptions.inc()

    def failed(self, ending: str) -> None:
        self.failures.labels(ending=ending).inc()

    def recovered(self, seconds: float) -> None:
        self.recovery_seconds.observe(max(0.0, seconds))

    def api_error(self, api: str, code: str | int) -> None:
        self.api_errors.labels(api=api, code=str(code)).inc()

    def rejected(self, reason: str) -> None:
        self.rejected_requests.labels(reason=reason).inc()

    def alert(self, kind: str) -> None:
        self.alerts.labels(kind=kind).inc()

    def unreadable_hint(self) -> None:
        self.unreadable_hints.inc()

    def pruned(self, kind: str, count: int = 1) -> None:
        self.pruned_records.labels(kind=kind).inc(count)

    def forget_job(self, job_id: str) -> None:
        """Drop a deleted job's per-job series, so label sets stay bounded by the stored jobs."""
        try:
            self.goodput_ratio.remove(job_id)
        except KeyError:
            pass

    def set_leader(self, leading: bool) -> None:
        self.is_leader.set(1 if leading else 0)

    def set_goodput(self, job_id: str, ratio: float) -> None:
        self.goodput_ratio.labels(job_id=job_id).set(ratio)

    def queue_waited(self, seconds: float) -> None:
        self.queue_wait.observe(max(0.0, seconds))

    def queue_state(self, stats: Any) -> None:
        """A `workqueue.QueueStats`."""
        self.queue_depth.labels(kind="ready").set(stats.ready)
        self.queue_depth.labels(kind="delayed").set(stats.delayed)
        self.queue_depth.labels(kind="serving").set(stats.serving)
        self.queue_oldest.set(stats.oldest_ready_seconds)
        self.queue_refused.set(stats.refused)

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
