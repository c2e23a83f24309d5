"""`minReplicaCount` and `elastic`: what is accepted, how mistakes are reported (field and
reason), the canonical round trip, and what the CustomJob gets (Vertex never sees the minimum)."""

from __future__ import annotations

import pytest

from controller.core.elastic import GROW_AFTER, GROW_EVERY_ATTEMPT, GROW_NEVER, ElasticPolicy
from controller.request import RequestInvalid, parse_request
from controller.request.render import build_custom_job, custom_job_to_rest


def request(minimum=None, *, elastic=None, workers: int = 3, spelling: str = "minReplicaCount") -> dict:
    pool = {
        "replicaCount": 1,
        "machineSpec": {
            "machineType": "g2-standard-8",
            "acceleratorType": "NVIDIA_L4",
            "acceleratorCount": 1,
        },
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1"},
    }
    worker = {**pool, "replicaCount": workers}
    if minimum is not None:
        worker[spelling] = minimum
    body = {
        "jobId": "run",
        "jobSpec": {"workerPoolSpecs": [pool, worker]},
        "checkpoint": {"uri": "gs://acme-ckpt/run"},
    }
    if elastic is not None:
        body["elastic"] = elastic
    return body


def problems(body: dict) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(body)
    return {problem.field: problem.reason for problem in caught.value.problems}


def test_without_a_minimum_a_request_is_not_elastic_and_its_fingerprint_is_unchanged():
    parsed = parse_request(request())
    assert parsed.elastic is None
    assert "elastic" not in parsed.to_json()
    assert all("minReplicaCount" not in pool for pool in parsed.to_json()["jobSpec"]["workerPoolSpecs"])


def test_a_minimum_alone_gives_the_defaults():
    parsed = parse_request(request(1))
    assert parsed.elastic == ElasticPolicy(full=(1, 3), minimum=(1, 1))
    assert parsed.elastic.shrink_after_seconds == 900 and parsed.elastic.grow_back == GROW_EVERY_ATTEMPT


@pytest.mark.parametrize(
    ("block", "shrink_after", "grow_back", "after"),
    [
        ({"shrinkAfter": "5m"}, 300, GROW_EVERY_ATTEMPT, None),
        ({"shrinkAfter": 120, "growBack": "never"}, 120, GROW_NEVER, None),
        ({"growBack": "after:2h"}, 900, GROW_AFTER, 7200),
        ({"shrinkAfter": "90s", "growBack": "after: 30m"}, 90, GROW_AFTER, 1800),
    ],
)
def test_accepted_forms_and_their_canonical_round_trip(block, shrink_after, grow_back, after):
    parsed = parse_request(request(2, elastic=block))
    policy = parsed.elastic
    assert (policy.shrink_after_seconds, policy.grow_back, policy.grow_back_after_seconds) == (
        shrink_after,
        grow_back,
        after,
    )
    assert policy.minimum == (1, 2)
    again = parse_request(parsed.to_json())
    assert again == parsed and again.fingerprint() == parsed.fingerprint()


def test_the_proto_spelling_is_accepted_and_means_the_same():
    assert parse_request(request(1, spelling="min_replica_count")).fingerprint() == (
        parse_request(request(1)).fingerprint()
    )


def test_the_minimum_changes_the_fingerprint():
    assert parse_request(request(1)).fingerprint() != parse_request(request(2)).fingerprint()
    assert parse_request(request(1)).fingerprint() != parse_request(request()).fingerprint()


MIN_FIELD = "jobSpec.workerPoolSpecs[1].minReplicaCount"


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        (request(0), MIN_FIELD, "must be at least 1: a pool cannot shrink to nothing (got 0)"),
        (request(-2), MIN_FIELD, "must be at least 1"),
        (request(4), MIN_FIELD, "must not exceed replicaCount (3) (got 4)"),
        (request("1"), MIN_FIELD, 'must be an integer (got "1")'),
        (request(True), MIN_FIELD, "must be an integer"),
        (
            request(elastic={"shrinkAfter": "5m"}),
            "elastic",
            "has no effect: no workerPoolSpec sets minReplicaCount",
        ),
        (
            request(1, elastic={"shrinkAfter": 0}),
            "elastic.shrinkAfter",
            "shrinkAfter must be between 1 s and 30 days",
        ),
        (request(1, elastic={"shrinkAfter": "soon"}), "elastic.shrinkAfter", "must be a duration like"),
        (
            request(1, elastic={"growBack": "sometimes"}),
            "elastic.growBack",
            "must be 'everyAttempt', 'never' or",
        ),
        (request(1, elastic={"growBack": "after:forever"}), "elastic.growBack", "must be a duration like"),
        (request(1, elastic={"shrinkAftr": "5m"}), "elastic.shrinkAftr", "did you mean 'shrinkAfter'?"),
    ],
)
def test_mistakes_name_the_field_and_the_reason(body, field, reason):
    found = problems(body)
    assert field in found, found
    assert reason in found[field]


def test_a_minimum_on_the_chief_pool_cannot_go_below_one():
    body = request()
    body["jobSpec"]["workerPoolSpecs"][0]["minReplicaCount"] = 0
    assert "must be at least 1" in problems(body)["jobSpec.workerPoolSpecs[0].minReplicaCount"]


def test_a_minimum_on_an_empty_pool_is_refused():
    body = request(1)
    body["jobSpec"]["workerPoolSpecs"].append({"minReplicaCount": 1})
    assert "empty pool" in problems(body)["jobSpec.workerPoolSpecs[2].minReplicaCount"]


def test_a_misspelt_minimum_is_still_an_unknown_vertex_field():
    body = request()
    body["jobSpec"]["workerPoolSpecs"][1]["minReplicaCont"] = 1
    assert "unknown field" in problems(body)["jobSpec.workerPoolSpecs[1].minReplicaCont"]


def test_vertex_never_sees_the_minimum_and_each_attempt_gets_its_own_size():
    parsed = parse_request(request(1))
    full = custom_job_to_rest(build_custom_job(parsed, 1))
    shrunk = custom_job_to_rest(build_custom_job(parsed, 2, replicas=(1, 1)))
    for job in (full, shrunk):
        assert all("minReplicaCount" not in pool for pool in job["jobSpec"]["workerPoolSpecs"])
    assert [int(p["replicaCount"]) for p in full["jobSpec"]["workerPoolSpecs"]] == [1, 3]
    assert [int(p["replicaCount"]) for p in shrunk["jobSpec"]["workerPoolSpecs"]] == [1, 1]
    with pytest.raises(ValueError):
        build_custom_job(parsed, 2, replicas=(1,))
