"""The adaptive checkpoint interval through the engine, against devstack with real clients: an
`auto` job's attempts carry RELAUNCH_CHECKPOINT_INTERVAL_SECONDS, the ending of one teaches the
ledger exactly once, and status shows the estimate behind each attempt's interval."""

from __future__ import annotations

import json

from controller.cli.commands.status import describe_job
from controller.core.adaptive_interval import Ledger
from controller.core.checkpoint_interval import CapacityClass
from controller.core.model import JobState
from controller.request import parse_request
from controller.request.render import interval_env_value
from controller.store.keys import INTERVAL_LEDGER_KEY, JOBS_PREFIX, LEDGER_PENDING_FIELD, job_key
from tests.support.engine import REGION, accept, drive, request, terminal, vertex_jobs_for

ENV = "RELAUNCH_CHECKPOINT_INTERVAL_SECONDS"
CAPACITY = CapacityClass(REGION, "n1-standard-4", "", "SPOT")


def auto_request(job_id: str, bucket: str) -> bytes:
    body = json.loads(
        request(
            job_id,
            bucket,
            args=["--steps", "100000", "--every", "5", "--checkpoint-stall", "0.02"],
            policy={"maxFailures": 0, "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.5}},
        )
    )
    body["checkpoint"]["interval"] = {"mode": "auto", "min": 1, "max": "1h"}
    return json.dumps(body).encode()


def interval_env(stack, job_id: str) -> dict[str, set[str]]:
    """attempt label -> the interval values across the attempt's pools."""
    return {
        job.labels["relaunch-attempt"]: {
            e.value
            for pool in job.job_spec.worker_pool_specs
            for e in pool.container_spec.env
            if e.name == ENV
        }
        for job in vertex_jobs_for(stack, job_id)
    }


def test_a_sigkilled_attempt_teaches_the_ledger_once_and_the_next_attempt_gets_a_shorter_interval(
    devstack, bucket, make_engine
):
    engine = make_engine(interval_prior_mtbf_seconds=600, estimate_half_life_seconds=7200)
    assert accept(engine, auto_request("auto-1", bucket)).status == "accepted"
    doc = drive(
        engine, "auto-1", lambda d: d["phase"] == "running" and (d["latestCheckpointStep"] or 0) >= 10
    )
    first = doc["attempts"][0]
    # No commit marker existed when attempt 1 was submitted: the default cost, the prior alone.
    assert first["checkpointInterval"]["costSource"].startswith("default")
    assert first["checkpointInterval"]["endings"] == 0

    # A reclaim with no warning: SIGKILL, no emergency save, no exit record.
    assert devstack.vertex.preempt(first["vertexJob"], grace_seconds=0)
    doc = drive(engine, "auto-1", lambda d: d["attempt"] == 2 and d["attempts"][1]["vertexJob"])
    ended, second = doc["attempts"]
    assert ended["ending"] == "preempted"

    estimate = Ledger.from_dict(engine.store.get(INTERVAL_LEDGER_KEY).document).book.estimate(CAPACITY)
    assert estimate.endings == 1 and estimate.exposure_seconds > 0
    # The configured half-life (RELAUNCH_ESTIMATE_HALF_LIFE_SECONDS), not the default 12 h.
    assert estimate.half_life_seconds == 7200
    chosen = second["checkpointInterval"]
    assert chosen["mode"] == "auto" and chosen["endings"] == 1
    assert chosen["costSource"].startswith("commit markers") and chosen["stallSeconds"] == 0.02
    assert chosen["seconds"] < first["checkpointInterval"]["seconds"]
    # Each CustomJob carries exactly the interval recorded for its attempt, in every pool.
    assert interval_env(devstack, "auto-1") == {
        "1": {interval_env_value(first["checkpointInterval"]["seconds"])},
        "2": {interval_env_value(chosen["seconds"])},
    }

    # Applying the same ending again (a redelivered event, a reconcile pass) counts nothing more.
    before = engine.store.get(INTERVAL_LEDGER_KEY)
    engine.run_pass()
    stored = engine.store.get(job_key("auto-1")).document
    state = JobState.from_dict(stored["state"])
    parsed = parse_request(stored["request"])
    engine.intervals.on_ending("auto-1", parsed, state.attempts[0], now=0.0)
    engine.intervals.catch_up([state], lambda job_id: parsed, now=0.0)
    assert engine.store.get(INTERVAL_LEDGER_KEY).version == before.version

    page = describe_job(doc, now=second["requestedAt"])
    assert "attempt 1 interval: work-losing endings" in page and "prior only" in page
    assert "attempt 2 interval: work-losing endings" in page and "1 work-losing ending(s)" in page
    assert "weighted over the last" in page and "half-life 2.0 h" in page

    engine.cancel("auto-1")
    assert drive(engine, "auto-1", terminal)["phase"] == "cancelled"
    # Its last ending counted at once, the finished job left the live index: no pass reads it.
    assert LEDGER_PENDING_FIELD not in engine.store.get(job_key("auto-1")).document
    assert Ledger.from_dict(engine.store.get(INTERVAL_LEDGER_KEY).document).has_counted("auto-1", 2)
    assert list(engine.store.list_live(JOBS_PREFIX)) == []
