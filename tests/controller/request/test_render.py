"""The CustomJob Relaunch submits for attempt N of a request."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from controller.request import parse_request
from controller.request.render import build_custom_job, custom_job_to_rest, labels_for

Strategy = aiplatform_v1.Scheduling.Strategy


def request(
    display_name=None, strategy="SPOT", labels=None, user_env=None, extra_pools=None, scheduling=None
):
    chief = {
        "replicaCount": 1,
        "machineSpec": {
            "machineType": "a3-highgpu-8g",
            "acceleratorType": "NVIDIA_H100_80GB",
            "acceleratorCount": 8,
        },
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1", "env": user_env or []},
    }
    workers = {
        "replicaCount": 3,
        "machineSpec": {"machineType": "a3-highgpu-8g"},
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
    }
    document = {
        "jobId": "llama-ft-001",
        "jobSpec": {
            "workerPoolSpecs": [chief, workers] + (extra_pools or []),
            "scheduling": scheduling
            if scheduling is not None
            else ({"strategy": strategy} if strategy else {}),
        },
        "checkpoint": {"uri": "gs://acme-ckpt/llama-ft-001"},
        "labels": labels or {},
    }
    if display_name is not None:
        document["displayName"] = display_name
    return parse_request(document)


def env_of(container) -> dict[str, str]:
    return {entry.name: entry.value for entry in container.env}


def test_labels_are_the_requests_plus_relaunchs_own():
    job = build_custom_job(request(labels={"team": "research"}), 2)
    assert dict(job.labels) == {
        "team": "research",
        "relaunch-job": "llama-ft-001",
        "relaunch-attempt": "2",
        "managed-by": "relaunch",
    }
    assert labels_for("llama-ft-001", 2) == {
        "relaunch-job": "llama-ft-001",
        "relaunch-attempt": "2",
        "managed-by": "relaunch",
    }


def test_display_name_carries_the_attempt():
    assert (
        build_custom_job(request(display_name="Llama fine-tune"), 3).display_name
        == "Llama fine-tune [attempt 3]"
    )
    assert build_custom_job(request(), 1).display_name == "llama-ft-001 [attempt 1]"


def test_display_name_is_cut_to_128_characters_keeping_the_suffix():
    name = build_custom_job(request(display_name="n" * 100), 123456789012345678901).display_name
    assert len(name) == 128
    assert name.endswith(" [attempt 123456789012345678901]")


def test_every_pool_gets_the_relaunch_environment():
    job = build_custom_job(request(), 4, resume_from="gs://acme-ckpt/llama-ft-001/step-0000001200")
    for pool in job.job_spec.worker_pool_specs:
        assert env_of(pool.container_spec) == {
            "RELAUNCH_JOB_ID": "llama-ft-001",
            "RELAUNCH_ATTEMPT": "4",
            "RELAUNCH_CHECKPOINT_URI": "gs://acme-ckpt/llama-ft-001",
            "RELAUNCH_RESUME_FROM": "gs://acme-ckpt/llama-ft-001/step-0000001200",
        }


def test_resume_from_is_empty_when_starting_fresh():
    job = build_custom_job(request(), 1)
    assert env_of(job.job_spec.worker_pool_specs[0].container_spec)["RELAUNCH_RESUME_FROM"] == ""


def test_user_cannot_override_relaunch_variables_but_keeps_their_own():
    user_env = [
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "RELAUNCH_ATTEMPT", "value": "99"},
        {"name": "RELAUNCH_RESUME_FROM", "value": "gs://elsewhere/x"},
    ]
    job = build_custom_job(request(user_env=user_env), 2)
    env = job.job_spec.worker_pool_specs[0].container_spec.env
    names = [entry.name for entry in env]
    assert names.count("RELAUNCH_ATTEMPT") == 1 and names.count("RELAUNCH_RESUME_FROM") == 1
    assert env_of(job.job_spec.worker_pool_specs[0].container_spec)["RELAUNCH_ATTEMPT"] == "2"
    assert env_of(job.job_spec.worker_pool_specs[0].container_spec)["RELAUNCH_RESUME_FROM"] == ""
    assert names[0] == "NCCL_DEBUG"


def test_empty_placeholder_pools_stay_empty():
    job = build_custom_job(
        request(
            extra_pools=[
                {},
                {
                    "replicaCount": 1,
                    "machineSpec": {"machineType": "n1-standard-8"},
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/eval:1"},
                },
            ]
        ),
        1,
    )
    pools = job.job_spec.worker_pool_specs
    assert aiplatform_v1.WorkerPoolSpec.pb(pools[2]).ByteSize() == 0
    assert env_of(pools[3].container_spec)["RELAUNCH_JOB_ID"] == "llama-ft-001"


def test_python_package_pools_get_the_environment_too():
    parsed = parse_request(
        {
            "jobId": "pkg-job",
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "replicaCount": 1,
                        "machineSpec": {"machineType": "n1-standard-8"},
                        "pythonPackageSpec": {
                            "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
                            "packageUris": ["gs://acme-pkgs/t.tar.gz"],
                            "pythonModule": "trainer",
                        },
                    }
                ]
            },
            "checkpoint": {"uri": "gs://acme-ckpt/pkg-job"},
        }
    )
    job = build_custom_job(parsed, 1)
    assert env_of(job.job_spec.worker_pool_specs[0].python_package_spec)["RELAUNCH_ATTEMPT"] == "1"


@pytest.mark.parametrize(
    "strategy, expected",
    [
        (None, Strategy.SPOT),  # unset means Spot: Relaunch exists for Spot capacity
        ("SPOT", Strategy.SPOT),
        ("FLEX_START", Strategy.FLEX_START),
        ("ON_DEMAND", Strategy.ON_DEMAND),  # deprecated, but the user's choice is kept
        ("STANDARD", Strategy.STANDARD),
    ],
)
def test_strategy_is_kept_and_defaults_to_spot(strategy, expected):
    assert build_custom_job(request(strategy=strategy), 1).job_spec.scheduling.strategy == expected


def test_on_demand_overrides_the_users_strategy():
    flex = request(scheduling={"strategy": "FLEX_START", "maxWaitDuration": "1800s", "timeout": "3600s"})
    job = build_custom_job(flex, 5, on_demand=True)
    assert job.job_spec.scheduling.strategy == Strategy.STANDARD  # ON_DEMAND is deprecated
    rest = custom_job_to_rest(job)["jobSpec"]["scheduling"]
    assert "maxWaitDuration" not in rest  # only valid with FLEX_START
    assert rest["timeout"] == "3600s"


def test_rendering_never_changes_the_request():
    parsed = request(user_env=[{"name": "RELAUNCH_ATTEMPT", "value": "99"}], strategy=None)
    before = parsed.to_json()
    build_custom_job(parsed, 3, on_demand=True)
    assert parsed.to_json() == before


def test_rest_form_is_what_vertex_shows():
    rest = custom_job_to_rest(build_custom_job(request(display_name="Llama"), 1))
    assert rest["displayName"] == "Llama [attempt 1]"
    assert rest["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    chief = rest["jobSpec"]["workerPoolSpecs"][0]
    assert chief["replicaCount"] == "1"  # int64 is a string in Vertex's JSON
    assert chief["machineSpec"]["acceleratorType"] == "NVIDIA_H100_80GB"
    # What Vertex shows can be parsed straight back into the client type.
    assert aiplatform_v1.CustomJob.from_json(json.dumps(rest)).display_name == "Llama [attempt 1]"


@pytest.mark.parametrize("attempt", [0, -1, True, "2"])
def test_attempts_count_from_one(attempt):
    with pytest.raises(ValueError):
        build_custom_job(request(), attempt)


def test_vertex_retries_are_disabled_so_every_restart_goes_through_relaunch():
    rest = custom_job_to_rest(build_custom_job(request(), 1))["jobSpec"]["scheduling"]
    assert rest["disableRetries"] is True
    assert "restartJobOnWorkerRestart" not in rest


@pytest.mark.parametrize(
    "scheduling, expected",
    [
        ({"strategy": "SPOT", "disableRetries": False}, (False, False)),
        ({"strategy": "SPOT", "restartJobOnWorkerRestart": True}, (False, True)),
    ],
)
def test_retry_settings_the_user_wrote_are_kept(scheduling, expected):
    job = build_custom_job(request(scheduling=scheduling), 1)
    assert (
        job.job_spec.scheduling.disable_retries,
        job.job_spec.scheduling.restart_job_on_worker_restart,
    ) == (expected)


def test_an_explicit_false_retry_choice_survives_the_round_trip_through_storage():
    # Stored jobs are parsed back from their canonical form after a restart: a user's explicit
    # `disableRetries: false` must still render the same CustomJob then.
    from controller.request import parse_request
    from controller.request.render import build_custom_job

    first = request(scheduling={"strategy": "SPOT", "disableRetries": False})
    again = parse_request(first.to_json())
    assert first.fingerprint() == again.fingerprint()
    rendered = [build_custom_job(r, 1).job_spec.scheduling.disable_retries for r in (first, again)]
    assert rendered == [False, False]
