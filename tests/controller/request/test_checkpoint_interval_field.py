"""`checkpoint.interval`: what is accepted, how mistakes are reported, what the CustomJob gets,
and which capacity class an attempt draws on."""

from __future__ import annotations

import pytest

from controller.core.adaptive_interval import DEFAULT_MAX_SECONDS, DEFAULT_MIN_SECONDS, IntervalSetting
from controller.core.checkpoint_interval import CapacityClass
from controller.request import RequestInvalid, parse_request
from controller.request.capacity import capacity_class
from controller.request.render import build_custom_job

ENV = "RELAUNCH_CHECKPOINT_INTERVAL_SECONDS"


def request(interval=None, *, env=(), gpu=True) -> dict:
    machine = {"machineType": "a2-highgpu-1g"}
    if gpu:
        machine.update(acceleratorType="NVIDIA_TESLA_A100", acceleratorCount=1)
    pool = {
        "replicaCount": 1,
        "machineSpec": machine,
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1", "env": [dict(e) for e in env]},
    }
    checkpoint = {"uri": "gs://acme-ckpt/run"}
    if interval is not None:
        checkpoint["interval"] = interval
    return {"jobId": "run", "jobSpec": {"workerPoolSpecs": [pool, dict(pool)]}, "checkpoint": checkpoint}


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("auto", IntervalSetting(auto=True)),
        (
            {"mode": "auto", "min": "30s", "max": "2h"},
            IntervalSetting(auto=True, min_seconds=30, max_seconds=7200),
        ),
        (
            {"mode": "auto", "min": 90},
            IntervalSetting(auto=True, min_seconds=90, max_seconds=DEFAULT_MAX_SECONDS),
        ),
        ({"mode": "auto", "max": "30s"}, IntervalSetting(auto=True, min_seconds=30, max_seconds=30)),
        (600, IntervalSetting(auto=False, fixed_seconds=600)),
        ("15m", IntervalSetting(auto=False, fixed_seconds=900)),
        ("1d", IntervalSetting(auto=False, fixed_seconds=86400)),
    ],
)
def test_accepted_forms_and_their_canonical_round_trip(written, expected):
    parsed = parse_request(request(written))
    assert parsed.checkpoint_interval == expected
    again = parse_request(parsed.to_json())
    assert again == parsed and again.fingerprint() == parsed.fingerprint()


def test_without_interval_the_request_and_its_fingerprint_are_unchanged():
    parsed = parse_request(request())
    assert parsed.checkpoint_interval is None and "interval" not in parsed.to_json()["checkpoint"]
    assert IntervalSetting(auto=True).min_seconds == DEFAULT_MIN_SECONDS


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("sometimes", "must be 'auto', {mode: auto, min: ..., max: ...}, or a fixed number of seconds"),
        (0, "a fixed interval must be between 1 s and 30 days"),
        (-5, "a fixed interval must be between 1 s and 30 days"),
        (True, "must be 'auto'"),
        ({"mode": "fixed"}, "mode must be 'auto'"),
        ({"mode": "auto", "mn": 3}, "unknown field 'mn'; allowed: mode, min, max"),
        ({"mode": "auto", "min": "2h", "max": "1h"}, "min (7200 s) must not exceed max (3600 s)"),
        ({"mode": "auto", "min": "soon"}, "min must be a duration like 600, '90s', '15m' or '2h'"),
        ({"mode": "auto", "max": "90d"}, "max must be between 1 s and 30 days"),
    ],
)
def test_bad_values_name_the_field_and_the_reason(written, reason):
    with pytest.raises(RequestInvalid) as caught:
        parse_request(request(written))
    (problem,) = caught.value.problems
    assert problem.field == "checkpoint.interval"
    assert reason in problem.reason


def test_an_interval_leaves_room_for_one_variable_less_of_the_users():
    env = [{"name": f"V{i}", "value": "x"} for i in range(96)]
    parse_request(request(env=env))  # 96 fit without an interval
    with pytest.raises(RequestInvalid) as caught:
        parse_request(request("auto", env=env))
    assert [p.field for p in caught.value.problems] == [
        "jobSpec.workerPoolSpecs[0].containerSpec.env",
        "jobSpec.workerPoolSpecs[1].containerSpec.env",
    ]


def env_values(job) -> list[dict[str, str]]:
    return [{e.name: e.value for e in pool.container_spec.env} for pool in job.job_spec.worker_pool_specs]


def test_the_chosen_interval_reaches_every_pool_and_replaces_the_users_value():
    parsed = parse_request(request("auto", env=[{"name": ENV, "value": "5"}, {"name": "MINE", "value": "1"}]))
    job = build_custom_job(parsed, 2, checkpoint_interval_seconds=42.5)
    for env in env_values(job):
        assert env[ENV] == "42.500" and env["MINE"] == "1"
    names = [e.name for e in job.job_spec.worker_pool_specs[0].container_spec.env]
    assert names.count(ENV) == 1


def test_a_fixed_interval_is_rendered_and_no_interval_keeps_the_users_variable():
    assert all(env[ENV] == "900" for env in env_values(build_custom_job(parse_request(request("15m")), 1)))
    mine = parse_request(request(env=[{"name": ENV, "value": "5"}]))
    assert all(env[ENV] == "5" for env in env_values(build_custom_job(mine, 1)))


def test_the_capacity_class_comes_from_the_rendered_job():
    parsed = parse_request(request("auto"))
    assert capacity_class(build_custom_job(parsed, 1), "us-central1") == CapacityClass(
        "us-central1", "a2-highgpu-1g", "NVIDIA_TESLA_A100", "SPOT"
    )
    on_demand = capacity_class(build_custom_job(parsed, 3, on_demand=True), "europe-west4")
    assert on_demand.scheduling_strategy == "STANDARD" and on_demand.region == "europe-west4"
    cpu = capacity_class(build_custom_job(parse_request(request("auto", gpu=False)), 1), "r")
    assert cpu.accelerator == "" and cpu.machine_type == "a2-highgpu-1g"
