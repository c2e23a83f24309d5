"""Metrics as an observer of stored transitions (old, new), and the per-job gauges.

The reconcile calls `Gauges.transition(old, new, document)` after each state write; the counters
(preemptions, failures by ending) and the gauges (jobs by phase, a job's goodput) follow from the
two states alone, so no branch of the reconcile knows about metrics. Finished jobs are counted by
a sweep over the whole store that reads at most `metrics_sweep_per_pass` documents a periodic
pass, once every `metrics_sweep_seconds`; it also drops jobs that retention deleted.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from controller.core.model import JobState, Phase
from controller.jobrecord import JobSummary
from controller.readmodel import goodput
from controller.settings import Settings
from controller.store import StateStore
from controller.store.keys import JOBS_PREFIX

# Endings that are no failure: success, a reclaim, a cancel, a capacity refusal.
NOT_FAILURES = frozenset({"succeeded", "preempted", "cancelled", "capacity"})


def count_transition(metrics: Any, old: JobState, new: JobState) -> None:
    """The counters one stored transition moves."""
    for _ in range(max(0, new.preemptions - old.preemptions)):
        metrics.preempted()
    current = new.current
    if (
        current
        and current.ended
        and not (old.current and old.current.number == current.number and old.current.ended)
    ):
        if current.ending is not None and current.ending.value not in NOT_FAILURES:
            metrics.failed(current.ending.value)


class Gauges:
    def __init__(self, metrics: Any, store: StateStore, settings: Settings, clock: Callable[[], float]):
        self.metrics = metrics
        self.store = store
        self.settings = settings
        self.clock = clock
        # Stays: the phase counts are written by the transitions of every queue worker (one job
        # each) and swapped by the pass's sweep: an in-memory map shared across threads.
        self._lock = threading.Lock()
        self._phases: dict[str, str] = {}  # job id -> phase, kept as jobs change
        self._next_sweep = 0.0
        self._sweep: Iterator[Any] | None = None
        self._swept: dict[str, str] = {}
        self._changed_during_sweep: set[str] = set()

    def transition(self, old: JobState, new: JobState, document: dict[str, Any]) -> None:
        count_transition(self.metrics, old, new)
        with self._lock:
            self._phases[new.job_id] = new.phase.value
            if self._sweep is not None:
                self._changed_during_sweep.add(new.job_id)
        ratio = goodput.compute(document, self.clock()).ratio
        if ratio is not None:
            self.metrics.set_goodput(new.job_id, ratio)

    def export(self, live_records: list[Any], step: Callable[[list[Any]], Iterable[Any]] = iter) -> None:
        """Each periodic pass: the live jobs' goodput (it grows while they run), one step of the
        sweep, and the jobs-by-phase counts. `step`: how the records are walked (the pass stops
        now and then for an event's look)."""
        now = self.clock()
        for record in step(live_records):
            job = JobSummary.of(record.document)
            with self._lock:
                known = self._phases.setdefault(job.job_id, job.phase)
            if known != job.phase:
                continue  # changed meanwhile: `transition` saw the newer document
            ratio = goodput.compute(record.document, now).ratio
            if ratio is not None:
                self.metrics.set_goodput(job.job_id, ratio)
        self._advance_sweep(now)
        counts: dict[str, int] = {phase.value: 0 for phase in Phase}
        with self._lock:
            for phase in self._phases.values():
                counts[phase] = counts.get(phase, 0) + 1
        self.metrics.set_job_states(counts)

    def _advance_sweep(self, now: float) -> None:
        if self._sweep is None:
            if now < self._next_sweep:
                return
            self._sweep = iter(self.store.list(JOBS_PREFIX))
            with self._lock:
                self._swept, self._changed_during_sweep = {}, set()
        budget = self.settings.metrics_sweep_per_pass
        for record in itertools.islice(self._sweep, budget):
            budget -= 1
            job = JobSummary.of(record.document)
            with self._lock:
                self._swept[job.job_id] = job.phase
                self._phases.setdefault(job.job_id, job.phase)  # counts fill in as it goes
                changed = job.job_id in self._changed_during_sweep
            ratio = goodput.compute(record.document, now).ratio
            if ratio is not None and not changed:
                self.metrics.set_goodput(job.job_id, ratio)
        if budget > 0:  # the listing ran out: the sweep is complete
            with self._lock:
                for job_id in self._changed_during_sweep:
                    if job_id in self._phases:
                        self._swept[job_id] = self._phases[job_id]
                self._phases, self._sweep = self._swept, None
            self._next_sweep = now + self.settings.metrics_sweep_seconds
