"""Where the time of one look went, logged once for the looks a recovery is made of.

A look that ends an attempt or calls CreateCustomJob logs one "look timings" line: how long its
key waited in the work queue, then the milliseconds from the look's start to each step it
reached (the facts read, the decision written, the create called, the create answered), and how
many keys that only the periodic pass asked for were waiting when it was taken (the pass's
backlog it overtook). With the "vertex event" line (when the event was published and delivered)
and Vertex's own end and create times, a slow recovery splits into its phases
(bench/recovery_latency.py prints that split). Wall-clock times, so they compare with Vertex's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controller import logs

log = logs.get("relaunch.reconcile")

# The steps, in the order a recovery reaches them.
STORED = "stored"  # the record and the cancel record
GOT = "got"  # the attempt's CustomJob (Get, or the listing's copy)
READ = "read"  # and, at an ending, its evidence: every fact the look decides over
DECIDED = "decided"  # the decision over those facts, written (when it changed anything)
CREATE_CALLED = "create_called"  # the CustomJob create handed to the Vertex adapter
CREATED = "created"  # the adapter answered


@dataclass
class LookTimings:
    job_id: str
    queued_seconds: float = 0.0  # in the work queue, from ready to taken
    sweep_waiting: int = 0  # keys only the pass asked for, waiting when this one was taken
    ended: bool = False  # an attempt ended in this look's write
    clock: Callable[[], float] = time.time
    started: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    def mark(self, step: str) -> None:
        """The look reached `step` now (the first time counts)."""
        self.marks.setdefault(step, self.clock())

    def report(self, attempt: int) -> None:
        """Log the line, for a look that ended an attempt or called a create; else nothing."""
        if not self.ended and CREATE_CALLED not in self.marks:
            return
        steps = {f"{step}_ms": round((at - self.started) * 1000, 2) for step, at in self.marks.items()}
        log.info(
            "look timings",
            job_id=self.job_id,
            attempt=attempt,
            started_at=round(self.started, 6),
            queued_ms=round(self.queued_seconds * 1000, 2),
            sweep_waiting=self.sweep_waiting,
            ended=self.ended,
            **steps,
        )
