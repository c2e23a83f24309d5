"""Capacity that follows the job, end to end: the real controller (the engine, with the real
Google clients) against two Vertex regions, the real trainer (DDP on gloo, the paced tiny GPT)
on 2 nodes. Spot stocks out in region A while the job trains there: the attempt after the
reclaim is refused in A, and the next one is decided with that refusal, on region B, resumes
from the newest checkpoint, and the job ends with parameters bitwise equal to a run that never
moved. (bench/region_failover.py plays the longer story: coming back, FLEX_START.)"""

from __future__ import annotations

import pytest

from tests.support.engine import accept, drive, terminal
from tests.support.real_trainer import (
    checkpoint_root,
    chief_records,
    newest_committed_by,
    resumed_from,
    trainer_request,
)
from tests.support.regions import A, B, two_node_spot_placement
from trainer.fault_hooks import HOLD_AT_STEP

STEPS, HOLD = 9, 4  # the first attempt holds after step 4 until it is reclaimed
MACHINE = "c2-standard-8"  # a machine type no other test limits


def placement(name: str, region: str, price: float) -> dict:
    return two_node_spot_placement(name, region, price, MACHINE)


def final_digest(devstack, vertex_job: str, vertex=None) -> str | None:
    done = [
        r for r in chief_records(devstack, vertex_job, vertex) if r.get("message") == "training completed"
    ]
    return done[-1].get("params_sha256") if done else None


@pytest.mark.slow
def test_a_spot_stockout_moves_the_job_to_another_region_at_once_and_it_ends_bitwise_equal(
    devstack, bucket, make_engine, region_b
):
    engine = make_engine(
        regions=B, vertex_endpoints=f"{A}={devstack.vertex.host_port},{B}={region_b.host_port}"
    )
    placements = {"placements": [placement("spot-a", A, 1.0), placement("spot-b", B, 1.05)]}
    held = {HOLD_AT_STEP: str(HOLD)}
    accept(engine, trainer_request("moved", bucket, steps=STEPS, replicas=2, env=held, fields=placements))
    # The same training in one region, never disturbed, at the same time.
    accept(engine, trainer_request("unmoved", bucket, steps=STEPS, replicas=2))
    try:
        holding = "test hook: holding for SIGTERM"
        doc = drive(
            engine,
            "moved",
            lambda d: (
                d["phase"] == "running"
                and any(
                    r.get("message") == holding
                    for r in chief_records(devstack, d["attempts"][-1]["vertexJob"])
                )
            ),
            timeout=300,
        )
        first = doc["attempts"][0]
        assert first["placement"]["chosen"] == "spot-a" and "/locations/us-central1/" in first["vertexJob"]

        # A's Spot machines are gone, and the attempt there is reclaimed (emergency checkpoint).
        devstack.vertex.set_capacity(0, MACHINE, "fail")
        assert devstack.vertex.preempt(first["vertexJob"], grace_seconds=15, end_job=True)
        doc = drive(engine, "moved", terminal, timeout=300)
        unmoved = drive(engine, "unmoved", terminal, timeout=300)
    finally:
        devstack.vertex.set_capacity(None, MACHINE)

    assert (doc["phase"], doc["failures"], unmoved["phase"]) == ("succeeded", 0, "succeeded"), doc
    reclaimed, refused, moved = doc["attempts"]
    assert reclaimed["ending"] == "preempted"
    # Nothing told the controller A was out: the next attempt asked A, and A refused it.
    assert refused["placement"]["chosen"] == "spot-a"
    assert (refused["ending"], refused["startedAt"]) == ("capacity", None)
    # The one after it was decided with the refusal (no backoff) and went to B, through B's endpoint.
    assert moved["placement"]["chosen"] == "spot-b" and "/locations/europe-west4/" in moved["vertexJob"]
    assert "refused this attempt" in moved["placement"]["reason"]
    assert moved["requestedAt"] - refused["endedAt"] < 5.0
    # It resumed from the newest checkpoint: the reclaimed attempt's emergency save at the held step.
    newest = newest_committed_by(checkpoint_root(bucket, "moved"), 2)
    assert newest == HOLD and moved["resumeFromStep"] == HOLD
    assert resumed_from(devstack, moved["vertexJob"], region_b) == HOLD
    # And training is the same as if it had never moved, bit for bit.
    digest = final_digest(devstack, moved["vertexJob"], region_b)
    assert digest is not None and digest == final_digest(devstack, unmoved["attempts"][-1]["vertexJob"])
