"""`placements`, `objective` and `deadline`: what is accepted, how mistakes are reported, and that
a job without them is the job it was."""

from __future__ import annotations

import copy

import pytest

from controller.core.placement import Objective, Placement, Pool
from controller.request import RequestInvalid, parse_request


def request(**extra) -> dict:
    def pool(replicas: int) -> dict:
        machine = {
            "machineType": "a3-highgpu-8g",
            "acceleratorType": "NVIDIA_H100_80GB",
            "acceleratorCount": 8,
        }
        return {
            "replicaCount": replicas,
            "machineSpec": machine,
            "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1"},
        }

    spec = {"workerPoolSpecs": [pool(1), pool(2)]}  # a chief and two workers
    return {"jobId": "run", "jobSpec": spec, "checkpoint": {"uri": "gs://acme-ckpt/run"}, **extra}


def placement(
    name="central-spot", region="us-central1", strategy="SPOT", workers=2, accelerators=8, **extra
) -> dict:
    def pool(replicas: int) -> dict:
        return {
            "machineType": "a3-highgpu-8g",
            "acceleratorType": "NVIDIA_H100_80GB",
            "acceleratorCount": accelerators,
            "replicaCount": replicas,
        }

    return {
        "name": name,
        "region": region,
        "workerPools": [pool(1), pool(workers)],
        "strategy": strategy,
        "pricePerNodeHour": 30.0,
        **extra,
    }


def problems(document) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(document)
    return {p.field: p.reason for p in caught.value.problems}


def test_placements_are_parsed_into_the_cores_alternatives_and_round_trip():
    document = request(
        placements=[placement(), placement("east-flex", "us-east5", "FLEX_START", maxWait="2h")],
        objective="earliest-finish",
    )
    parsed = parse_request(document)
    pools = (Pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 1), Pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 2))
    assert parsed.placements == (
        Placement("central-spot", "us-central1", pools, "SPOT", 30.0),
        Placement("east-flex", "us-east5", pools, "FLEX_START", 30.0, max_wait_seconds=7200.0),
    )
    assert parsed.objective is Objective.EARLIEST_FINISH
    assert parse_request(parsed.to_json()) == parsed
    assert parse_request(parsed.to_json()).fingerprint() == parsed.fingerprint()


def test_a_job_without_placements_is_the_job_it_was():
    parsed = parse_request(request())
    assert (parsed.placements, parsed.objective, parsed.deadline) == ((), None, None)
    assert set(parsed.to_json()) == {"jobId", "jobSpec", "checkpoint", "restartPolicy", "labels"}


def test_every_placement_must_be_able_to_resume_the_same_checkpoint():
    found = problems(
        request(placements=[placement(), placement("small", workers=1), placement("a100", accelerators=4)])
    )
    assert "minReplicaCount" in found["placements[1].workerPools[1].replicaCount"]
    assert "must equal" in found["placements[2].workerPools[0].acceleratorCount"]
    # With minReplicaCount the range shrink-to-fit resumes across is allowed.
    elastic = request(placements=[placement(), placement("small", workers=1)])
    elastic["jobSpec"]["workerPoolSpecs"][1]["minReplicaCount"] = 1
    assert parse_request(elastic).placements[1].pools[1].replica_count == 1
    three_pools = request(placements=[placement()])
    three_pools["jobSpec"]["workerPoolSpecs"].append(
        copy.deepcopy(three_pools["jobSpec"]["workerPoolSpecs"][1])
    )
    assert "one entry per jobSpec.workerPoolSpecs (3)" in problems(three_pools)["placements[0].workerPools"]


def test_field_mistakes_name_the_field():
    found = problems(
        request(
            placements=[
                placement(strategy="PREEMPTIBLE"),
                placement("central-spot", region="US Central", maxWait="1h"),
                {**placement("x"), "pricePerNodeHour": -1},
            ]
        )
    )
    assert "placements[0].strategy" in found
    assert "placements[1].region" in found
    assert "placements[2].pricePerNodeHour" in found
    cross = problems(request(placements=[placement(), placement("central-spot", maxWait="1h")]))
    assert cross["placements[1].name"] == "repeats placements[0].name"
    assert cross["placements[1].maxWait"] == "applies to FLEX_START only"


def test_objective_and_deadline_go_together_and_need_placements():
    assert "has no effect" in problems(request(objective="earliest-finish"))["objective"]
    assert (
        "required"
        in problems(request(placements=[placement()], objective="lowest-cost-under-deadline"))["deadline"]
    )
    bad_time = request(
        placements=[placement()], objective="lowest-cost-under-deadline", deadline="next friday"
    )
    assert "RFC 3339" in problems(bad_time)["deadline"]
    good = request(
        placements=[placement()], objective="lowest-cost-under-deadline", deadline="2026-12-01T18:00:00Z"
    )
    assert parse_request(good).deadline == "2026-12-01T18:00:00Z"
    assert "objective" in problems(request(placements=[placement()], objective="cheapest"))


def test_an_unknown_accelerator_type_is_a_field_error():
    wrong = placement("x")
    wrong["workerPools"][0]["acceleratorType"] = "H100"
    found = problems(request(placements=[placement(), wrong]))
    assert "placements[1].workerPools[0].acceleratorType" in found


def test_the_chosen_placement_renders_its_machines_sizes_and_strategy():
    from google.cloud import aiplatform_v1 as vertex

    from controller.request.render import build_custom_job, placement_named

    document = request(
        placements=[
            placement(),
            placement("east-flex", "us-east5", "FLEX_START", workers=1, maxWait="2h"),
        ]
    )
    document["jobSpec"]["workerPoolSpecs"][1]["minReplicaCount"] = 1  # the workers may be fewer
    parsed = parse_request(document)
    flex = placement_named(parsed, "east-flex")
    job = build_custom_job(parsed, 2, placement=flex)
    spec = job.job_spec
    assert [p.replica_count for p in spec.worker_pool_specs] == [1, 1]  # the placement's size
    assert spec.scheduling.strategy == vertex.Scheduling.Strategy.FLEX_START
    assert spec.scheduling.max_wait_duration.total_seconds() == 7200
    spot = build_custom_job(parsed, 3, placement=placement_named(parsed, "central-spot"), on_demand=True)
    assert spot.job_spec.scheduling.strategy == vertex.Scheduling.Strategy.SPOT  # the placement's
    assert "max_wait_duration" not in spot.job_spec.scheduling
    assert [p.replica_count for p in spot.job_spec.worker_pool_specs] == [1, 2]
    # Without a placement: the jobSpec as it was.
    plain = build_custom_job(parsed, 1)
    assert plain.job_spec.worker_pool_specs[1].replica_count == 2
    assert plain.job_spec.scheduling.strategy == vertex.Scheduling.Strategy.SPOT
