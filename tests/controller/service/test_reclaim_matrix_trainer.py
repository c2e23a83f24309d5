"""Every reclaim in the matrix of what Google leaves undocumented (the grace, the code, the text)
on 1 and 2 nodes, end to end: devstack, the real controller, the real trainer (DDP on gloo, a
paced tiny GPT). Every row a preemption, confirmed by Vertex's late error, no failure spent, and
the next attempt's trainer resumed from the newest checkpoint any attempt had committed.

The 32 rows share one devstack and one controller: one job per (nodes, grace) walks its 8 rows in
turn (one reclaim per attempt) while the four jobs run at the same time: 54 trainer replica
starts in all, about 7 CPU-minutes (each replica imports torch twice, launcher and worker), so
about 10 minutes on two shared cores; hence its own timeout."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import pytest

from tests.support.engine import accept, job_document, terminal
from tests.support.real_trainer import checkpoint_root, committed_by_attempt, resumed_from, trainer_request

NODES = (1, 2)
GRACES = (15.0, 0.0)
CODES = (8, 10, 13, 14)
TEXTS = ("The Spot VM was preempted.", "Job was terminated by the system.")
DEADLINE_SECONDS = 1400.0


@dataclass(frozen=True)
class Row:
    nodes: int
    grace: float
    code: int
    text: str


ROWS = [Row(*values) for values in itertools.product(NODES, GRACES, CODES, TEXTS)]


@dataclass
class Walk:
    """One job reclaimed once per attempt, row after row; then its next attempt must train."""

    job: str
    rows: list[Row]
    done: int = 0  # rows whose ending is recorded
    reclaimed: bool = False  # the current row's reclaim is under way
    finished: bool = False  # the attempt after the last row trained: cancelled
    log: list[str] = field(default_factory=list)

    def advance(self, engine, devstack) -> None:
        doc = job_document(engine, self.job)
        if doc is None or self.finished:
            return
        number = self.done + 1  # the attempt to reclaim, or (after the last row) to see training
        if self.reclaimed:
            if doc["attempts"][number - 1]["ending"] is not None:
                self.done, self.reclaimed = number, False
            return
        if doc["attempt"] != number or doc["phase"] != "running":
            return
        current = doc["attempts"][number - 1]
        if (doc["latestCheckpointStep"] or 0) <= (current["resumeFromStep"] or 0):
            return  # this attempt has not committed a checkpoint of its own yet
        if self.done == len(self.rows):
            engine.cancel(self.job)
            self.finished = True
            return
        row = self.rows[self.done]
        assert devstack.vertex.preempt(
            current["vertexJob"],
            grace_seconds=row.grace,
            end_job=True,
            error_code=row.code,
            error_text=row.text,
        )
        self.reclaimed = True


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_reclaim_in_the_matrix_is_a_preemption_and_the_trainer_resumes_from_the_newest_checkpoint(
    devstack, bucket, make_engine
):
    # Vertex's error comes a second after each end here; the bound on waiting for it is the
    # production order of magnitude (a minute), so a loaded machine cannot close it first.
    engine = make_engine(error_settle_seconds=60.0)
    walks = []
    for nodes, grace in itertools.product(NODES, GRACES):
        job = f"matrix-{nodes}n-grace{int(grace)}"
        rows = [r for r in ROWS if (r.nodes, r.grace) == (nodes, grace)]
        walks.append(Walk(job, rows))
        accept(engine, trainer_request(job, bucket, steps=100000, replicas=nodes))

    deadline = time.monotonic() + DEADLINE_SECONDS
    while not all(w.finished for w in walks):
        assert time.monotonic() < deadline, [(w.job, w.done) for w in walks]
        engine.serve()
        engine.run_pass()
        for walk in walks:
            walk.advance(engine, devstack)
        engine.queue.wait_for_work(0.2)

    # Vertex's late errors all in, and every job cancelled.
    def settled(doc) -> bool:
        return terminal(doc) and all(a["errorCode"] != 0 for a in doc["attempts"][:-1])

    while not all(settled(job_document(engine, w.job)) for w in walks):
        assert time.monotonic() < deadline, [job_document(engine, w.job)["phase"] for w in walks]
        engine.serve()
        engine.run_pass()
        engine.queue.wait_for_work(0.2)

    for walk in walks:
        doc = job_document(engine, walk.job)
        root = checkpoint_root(bucket, walk.job)
        assert doc["phase"] == "cancelled" and doc["failures"] == 0, doc["terminalReason"]
        assert doc["preemptions"] == len(walk.rows)
        committed = committed_by_attempt(root)
        for number, row in enumerate(walk.rows, start=1):
            ended, after = doc["attempts"][number - 1], doc["attempts"][number]
            # Decided a preemption, and Vertex's error (this row's code) confirmed it.
            assert (ended["ending"], ended["errorCode"]) == ("preempted", row.code), (row, ended)
            newest = max((step for step, by in committed.items() if by <= number), default=None)
            assert after["resumeFromStep"] == newest, (row, ended, after)
            assert resumed_from(devstack, after["vertexJob"]) == newest, row
