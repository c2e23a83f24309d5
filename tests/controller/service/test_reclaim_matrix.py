"""Reclaims under every plausible answer to what Google leaves undocumented (the grace, the code,
the text), on devstack with the real controller: each one a preemption, none a failure, and each
next attempt resumes from the newest committed checkpoint. One job per gang size goes through
every combination in turn (16 successive reclaims), which keeps the matrix affordable."""

import itertools

import pytest

from tests.controller.service.test_engine_devstack import _wait_for_progress
from tests.support.engine import accept, drive, request, terminal

GRACES = (15.0, 0.0)
CODES = (8, 10, 13, 14)
TEXTS = ("The Spot VM was preempted.", "Job was terminated by the system.")
COMBOS = list(itertools.product(GRACES, CODES, TEXTS))


@pytest.mark.parametrize("nodes", [1, 2])
def test_every_reclaim_in_the_matrix_is_a_preemption_resumed_from_the_newest_checkpoint(
    devstack, bucket, make_engine, nodes
):
    # Vertex's error comes a second after each end here; the bound on waiting for it is the
    # production order of magnitude (a minute), so a loaded machine cannot close it first.
    engine = make_engine(error_settle_seconds=60.0)
    job = f"matrix-{nodes}"
    accept(
        engine,
        request(
            job,
            bucket,
            args=["--steps", "100000", "--every", "2", "--step-seconds", "0.02"],
            replicas=nodes,
            policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.3}},
        ),
        {},
    )
    step = 0
    for attempt, (grace, code, text) in enumerate(COMBOS, start=1):
        doc = _wait_for_progress(engine, job, attempt, step)
        step = doc["latestCheckpointStep"]
        name = doc["attempts"][-1]["vertexJob"]
        assert devstack.vertex.preempt(
            name, grace_seconds=grace, end_job=True, error_code=code, error_text=text
        )
        doc = drive(engine, job, lambda d, n=attempt: d["attempts"][n - 1]["ending"] is not None)
        ended = doc["attempts"][attempt - 1]
        assert ended["ending"] == "preempted", (grace, code, text, ended)
        assert doc["failures"] == 0
    # Vertex's late errors have all come in (devstack sets each a moment after the end): every
    # ending confirmed, none corrected into a failure.
    doc = drive(engine, job, lambda d: d["attempts"][len(COMBOS) - 1]["errorCode"] != 0)
    endings = doc["attempts"][: len(COMBOS)]
    assert [a["ending"] for a in endings] == ["preempted"] * len(COMBOS)
    assert {a["errorCode"] for a in endings} == set(CODES)
    assert doc["failures"] == 0 and doc["preemptions"] == len(COMBOS)
    # Each attempt resumed from the newest checkpoint committed when the one before it ended.
    for before, after in zip(doc["attempts"], doc["attempts"][1:]):
        assert after["resumeFromStep"] == before["checkpointStepAtEnd"]
    engine.cancel(job)
    assert drive(engine, job, terminal)["phase"] == "cancelled"
