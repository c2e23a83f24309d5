"""Job request format v1: what is accepted, and how each mistake is reported."""

from __future__ import annotations

import copy
import json

import pytest
from google.cloud import aiplatform_v1

from controller.core.policy import Backoff, RestartPolicy
from controller.request import (
    MAX_REQUEST_BYTES,
    CancelRequest,
    JobRequest,
    Problem,
    RequestInvalid,
    parse_request,
)


def pool(replicas: int = 1, **extra) -> dict:
    spec = {
        "replicaCount": replicas,
        "machineSpec": {
            "machineType": "a2-highgpu-1g",
            "acceleratorType": "NVIDIA_TESLA_A100",
            "acceleratorCount": 1,
        },
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/p/r/trainer:1",
            "command": ["python", "-m", "trainer"],
        },
    }
    spec.update(extra)
    return spec


def request(**changes) -> dict:
    document = {
        "jobId": "llama-ft-001",
        "jobSpec": {"workerPoolSpecs": [pool(1), pool(3)], "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": "gs://acme-ckpt/llama-ft-001"},
    }
    document.update(changes)
    return document


def problems_of(raw, **kwargs) -> list[Problem]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(raw, **kwargs)
    assert caught.value.problems, "RequestInvalid must carry at least one problem"
    return caught.value.problems


def fields_of(raw, **kwargs) -> list[str]:
    return [problem.field for problem in problems_of(raw, **kwargs)]


def reason_for(raw, field: str) -> str:
    matching = [p.reason for p in problems_of(raw) if p.field == field]
    assert matching, f"no problem reported for {field}"
    return matching[0]


# --------------------------------------------------------------------------- accepted requests


def test_minimal_request_gets_documented_defaults():
    parsed = parse_request(request())
    assert isinstance(parsed, JobRequest)
    assert parsed.job_id == "llama-ft-001"
    assert parsed.display_name is None
    assert parsed.labels == {}
    assert parsed.checkpoint_uri == "gs://acme-ckpt/llama-ft-001"
    assert parsed.restart_policy == RestartPolicy(
        max_failures=3,
        max_preemptions=None,
        backoff=Backoff(initial_seconds=30.0, multiplier=2.0, max_seconds=1800.0, jitter=0.2),
        crash_loop_attempts=3,
        on_demand_after_preemptions=None,
    )


def test_job_spec_is_a_vertex_custom_job_spec():
    parsed = parse_request(request())
    assert isinstance(parsed.job_spec, aiplatform_v1.CustomJobSpec)
    assert [p.replica_count for p in parsed.job_spec.worker_pool_specs] == [1, 3]
    assert parsed.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT


def test_full_restart_policy_is_carried_into_the_policy_object():
    parsed = parse_request(
        request(
            restartPolicy={
                "maxFailures": 0,
                "maxPreemptions": 20,
                "backoff": {"initialSeconds": 5, "multiplier": 1, "maxSeconds": 5, "jitter": 0},
                "crashLoopAttempts": 1,
                "onDemandAfterPreemptions": 4,
            }
        )
    )
    assert parsed.restart_policy == RestartPolicy(
        max_failures=0,
        max_preemptions=20,
        backoff=Backoff(initial_seconds=5.0, multiplier=1.0, max_seconds=5.0, jitter=0.0),
        crash_loop_attempts=1,
        on_demand_after_preemptions=4,
    )


def test_yaml_text_and_json_bytes_give_the_same_request():
    as_yaml = """
jobId: llama-ft-001
jobSpec:
  workerPoolSpecs:
    - &node
      replicaCount: 1
      machineSpec: {machineType: a2-highgpu-1g, acceleratorType: NVIDIA_TESLA_A100, acceleratorCount: 1}
      containerSpec: {imageUri: us-docker.pkg.dev/p/r/trainer:1, command: [python, -m, trainer]}
    - <<: *node
      replicaCount: 3
  scheduling: {strategy: SPOT}
checkpoint: {uri: gs://acme-ckpt/llama-ft-001}
"""
    from_yaml = parse_request(as_yaml)
    from_json = parse_request(json.dumps(request()).encode())
    assert from_yaml == from_json
    assert from_yaml.fingerprint() == from_json.fingerprint()


def test_empty_pool_placeholders_are_allowed_after_the_chief():
    parsed = parse_request(request(jobSpec={"workerPoolSpecs": [pool(1), {}, {}, pool(2)]}))
    assert len(parsed.job_spec.worker_pool_specs) == 4


def test_python_package_pools_are_accepted():
    package_pool = {
        "replicaCount": 1,
        "machineSpec": {"machineType": "n1-standard-8"},
        "pythonPackageSpec": {
            "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
            "packageUris": ["gs://acme-pkgs/trainer-1.0.tar.gz"],
            "pythonModule": "trainer",
        },
    }
    parsed = parse_request(request(jobSpec={"workerPoolSpecs": [package_pool]}))
    assert parsed.job_spec.worker_pool_specs[0].python_package_spec.python_module == "trainer"


def test_local_checkpoint_uri_needs_the_local_switch():
    local = request(checkpoint={"uri": "file:///tmp/relaunch/ckpt"})
    assert fields_of(local) == ["checkpoint.uri"]
    assert parse_request(local, allow_local_checkpoints=True).checkpoint_uri == "file:///tmp/relaunch/ckpt"


def test_trailing_slash_of_checkpoint_uri_is_dropped():
    parsed = parse_request(request(checkpoint={"uri": "gs://acme-ckpt/llama-ft-001/"}))
    assert parsed.checkpoint_uri == "gs://acme-ckpt/llama-ft-001"


# --------------------------------------------------------------------------- round trip, fingerprint


def test_to_json_round_trips_to_an_equal_request():
    original = parse_request(
        request(
            displayName="Llama fine-tune",
            labels={"team": "research"},
            restartPolicy={"maxPreemptions": 9, "onDemandAfterPreemptions": 3},
        )
    )
    again = parse_request(original.to_json())
    assert again == original
    assert again.to_json() == original.to_json()


def test_fingerprint_ignores_spelling_but_not_content():
    base = parse_request(request())
    reordered = dict(reversed(list(request().items())))
    defaults_spelled_out = request(restartPolicy={"maxFailures": 3, "backoff": {"jitter": 0.2}}, labels={})
    assert parse_request(reordered).fingerprint() == base.fingerprint()
    assert parse_request(defaults_spelled_out).fingerprint() == base.fingerprint()

    changed_spec = request()
    changed_spec["jobSpec"]["workerPoolSpecs"][1]["replicaCount"] = 4
    for different in (changed_spec, request(labels={"team": "x"}), request(restartPolicy={"maxFailures": 4})):
        assert parse_request(different).fingerprint() != base.fingerprint()


# --------------------------------------------------------------------------- cancel requests


def test_cancel_request():
    assert parse_request('{"jobId": "llama-ft-001", "action": "cancel"}') == CancelRequest("llama-ft-001")


def test_cancel_request_with_other_fields_is_rejected():
    problems = problems_of({"jobId": "llama-ft-001", "action": "cancel", "jobSpec": {}})
    assert [str(p) for p in problems] == ["jobSpec: not allowed in a cancel request (only jobId and action)"]


def test_unknown_action_is_rejected():
    assert fields_of({"jobId": "llama-ft-001", "action": "pause"}) == ["action"]


def test_cancel_request_needs_a_valid_job_id():
    assert fields_of({"jobId": "Bad", "action": "cancel"}) == ["jobId"]


# --------------------------------------------------------------------------- text and size


def test_invalid_json_reports_line_and_column():
    (problem,) = problems_of('{\n  "jobId": "x",\n  "jobSpec": {,}\n}')
    assert problem.field == "request"
    assert "invalid JSON at line 3, column 15" in problem.reason


def test_invalid_yaml_reports_line_and_column():
    (problem,) = problems_of("jobId: x\njobSpec:\n  workerPoolSpecs: [1, 2\n")
    assert problem.field == "request"
    assert problem.reason.startswith("invalid YAML at line 4")


def test_duplicate_keys_are_rejected_in_yaml_and_json():
    assert "duplicate key 'jobId'" in problems_of("jobId: a\njobId: b\n")[0].reason
    assert "duplicate key 'jobId'" in problems_of('{"jobId": "a", "jobId": "b"}')[0].reason


def test_request_over_one_mebibyte_is_rejected_before_parsing():
    big = b"{" + b" " * MAX_REQUEST_BYTES + b"}"
    (problem,) = problems_of(big)
    assert "limit is 1048576 bytes" in problem.reason


def test_yaml_alias_bomb_is_rejected():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    (problem,) = problems_of("\n".join(lines))
    assert "too many values" in problem.reason


@pytest.mark.parametrize("raw, kind", [("[1, 2]", "list"), ("42", "number"), ('"text"', "string")])
def test_request_must_be_an_object(raw, kind):
    (problem,) = problems_of(raw)
    assert problem.field == "request" and f"(got {kind})" in problem.reason


def test_empty_and_non_utf8_input():
    assert problems_of("  \n")[0].reason == "is empty"
    assert "not valid UTF-8" in problems_of(b"jobId: \xff\xfe")[0].reason


# --------------------------------------------------------------------------- Relaunch fields


def test_every_problem_is_reported_at_once():
    fields = fields_of(request(jobId="X", checkpoint={"uri": "s3://x/y"}, labels={"Team": "a"}, color="red"))
    assert set(fields) == {"jobId", "checkpoint.uri", "labels.Team", "color"}


def test_missing_required_fields():
    problems = problems_of({"displayName": "x"})
    assert {str(p) for p in problems} == {
        "jobId: required field is missing",
        "jobSpec: required field is missing",
        "checkpoint: required field is missing",
    }


@pytest.mark.parametrize(
    "job_id", ["Upper", "1starts-with-digit", "ends-with-", "has_underscore", "a" * 64, ""]
)
def test_job_id_rule(job_id):
    assert fields_of(request(jobId=job_id)) == ["jobId"]


def test_unknown_top_level_field_suggests_the_right_name():
    assert (
        str(problems_of(request(restartPolicies={}))[0])
        == "restartPolicies: unknown field; did you mean 'restartPolicy'?"
    )


def test_unknown_nested_field_is_reported_with_its_path():
    assert fields_of(request(restartPolicy={"backoff": {"initialSecs": 1}})) == [
        "restartPolicy.backoff.initialSecs"
    ]


def test_display_name_length_leaves_room_for_the_attempt_suffix():
    assert parse_request(request(displayName="d" * 100)).display_name == "d" * 100
    assert fields_of(request(displayName="d" * 101)) == ["displayName"]


@pytest.mark.parametrize(
    "uri",
    [
        "gs://acme-ckpt",  # bucket root
        "gs://Acme/ckpt",  # uppercase bucket
        "gs://ab/ckpt",  # too short
        "gs://my-google-bucket/ckpt",  # contains google
        "gs://192.168.1.1/ckpt",  # looks like an IP address
        "gs://acme-ckpt/a//b",  # empty segment
        "s3://acme-ckpt/ckpt",  # other cloud
        "/local/path",  # no scheme
    ],
)
def test_checkpoint_uri_rule(uri):
    assert fields_of(request(checkpoint={"uri": uri})) == ["checkpoint.uri"]


def test_relative_local_checkpoint_path_is_rejected():
    assert fields_of(request(checkpoint={"uri": "file://relative/dir"}), allow_local_checkpoints=True) == [
        "checkpoint.uri"
    ]


@pytest.mark.parametrize(
    "policy, field",
    [
        ({"maxFailures": -1}, "restartPolicy.maxFailures"),
        ({"maxFailures": True}, "restartPolicy.maxFailures"),
        ({"maxFailures": "3"}, "restartPolicy.maxFailures"),
        ({"maxPreemptions": -1}, "restartPolicy.maxPreemptions"),
        ({"crashLoopAttempts": 0}, "restartPolicy.crashLoopAttempts"),
        ({"onDemandAfterPreemptions": 0}, "restartPolicy.onDemandAfterPreemptions"),
        ({"backoff": {"initialSeconds": -1}}, "restartPolicy.backoff.initialSeconds"),
        ({"backoff": {"multiplier": 0.5}}, "restartPolicy.backoff.multiplier"),
        ({"backoff": {"jitter": 1}}, "restartPolicy.backoff.jitter"),
        ({"backoff": {"jitter": -0.1}}, "restartPolicy.backoff.jitter"),
        ({"backoff": {"initialSeconds": float("nan")}}, "restartPolicy.backoff.initialSeconds"),
    ],
)
def test_restart_policy_rule(policy, field):
    assert fields_of(request(restartPolicy=policy)) == [field]


def test_backoff_max_must_not_be_below_initial():
    reason = reason_for(
        request(restartPolicy={"backoff": {"initialSeconds": 60, "maxSeconds": 30}}),
        "restartPolicy.backoff.maxSeconds",
    )
    assert reason == "must be >= initialSeconds (60) (got 30)"


@pytest.mark.parametrize(
    "labels, field",
    [
        ({"Team": "x"}, "labels.Team"),
        ({"1team": "x"}, "labels.1team"),
        ({"team": "Research"}, "labels.team"),
        ({"team": "a" * 64}, "labels.team"),
        ({"k" * 64: "x"}, "labels." + "k" * 64),
        ({"team": 7}, "labels.team"),
    ],
)
def test_label_rule(labels, field):
    assert fields_of(request(labels=labels)) == [field]


@pytest.mark.parametrize("key", ["relaunch-job", "relaunch-attempt", "managed-by"])
def test_relaunch_label_keys_are_reserved(key):
    assert "reserved" in reason_for(request(labels={key: "x"}), f"labels.{key}")


def test_at_most_61_user_labels():
    assert parse_request(request(labels={f"k{i}": "v" for i in range(61)}))
    assert "at most 61 labels" in reason_for(request(labels={f"k{i}": "v" for i in range(62)}), "labels")


# --------------------------------------------------------------------------- jobSpec: Vertex types


def spec_with(mutate) -> dict:
    document = request()
    mutate(document["jobSpec"])
    return document


def test_typo_inside_job_spec_is_rejected_by_the_vertex_types():
    document = spec_with(lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(imgUri="x"))
    assert str(problems_of(document)[0]) == (
        "jobSpec.workerPoolSpecs[0].containerSpec.imgUri: unknown field of Vertex ContainerSpec; "
        "did you mean 'imageUri'?"
    )


def test_wrong_enum_value_lists_the_choices():
    reason = reason_for(
        spec_with(lambda s: s["scheduling"].update(strategy="SPOTTY")), "jobSpec.scheduling.strategy"
    )
    assert (
        "SPOT" in reason and "ON_DEMAND" in reason and "FLEX_START" in reason and '(got "SPOTTY")' in reason
    )


def test_wrong_value_types_inside_job_spec():
    def break_types(spec):
        spec["scheduling"]["timeout"] = "2h"
        spec["workerPoolSpecs"][1]["replicaCount"] = "three"
        spec["workerPoolSpecs"][0]["containerSpec"]["command"] = "python -m trainer"

    assert set(fields_of(spec_with(break_types))) == {
        "jobSpec.scheduling.timeout",
        "jobSpec.workerPoolSpecs[1].replicaCount",
        "jobSpec.workerPoolSpecs[0].containerSpec.command",
    }


def test_snake_case_vertex_names_are_accepted_like_gcloud_does():
    document = spec_with(
        lambda s: s["workerPoolSpecs"][0].update(replica_count=s["workerPoolSpecs"][0].pop("replicaCount"))
    )
    assert parse_request(document).job_spec.worker_pool_specs[0].replica_count == 1


def test_container_and_python_package_are_alternatives():
    document = spec_with(lambda s: s["workerPoolSpecs"][1].update(pythonPackageSpec={"pythonModule": "m"}))
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[1].pythonPackageSpec"]


# --------------------------------------------------------------------------- jobSpec: submit-time rules


def test_worker_pools_are_required():
    assert fields_of(spec_with(lambda s: s.update(workerPoolSpecs=[]))) == ["jobSpec.workerPoolSpecs"]


def test_chief_pool_must_have_exactly_one_replica():
    document = spec_with(lambda s: s["workerPoolSpecs"][0].update(replicaCount=2))
    assert [str(p) for p in problems_of(document)] == [
        "jobSpec.workerPoolSpecs[0].replicaCount: must be 1 for the chief pool (got 2)"
    ]


def test_chief_pool_must_not_be_empty():
    assert fields_of(spec_with(lambda s: s["workerPoolSpecs"].__setitem__(0, {}))) == [
        "jobSpec.workerPoolSpecs[0]"
    ]


def test_at_most_four_pools():
    assert fields_of(spec_with(lambda s: s.update(workerPoolSpecs=[pool(1)] + [pool(1)] * 4))) == [
        "jobSpec.workerPoolSpecs"
    ]


def test_non_empty_pool_needs_a_positive_replica_count():
    document = spec_with(lambda s: s["workerPoolSpecs"][1].update(replicaCount=0))
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[1].replicaCount"]


def test_pool_needs_an_image():
    document = spec_with(lambda s: s["workerPoolSpecs"][1]["containerSpec"].pop("imageUri"))
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[1].containerSpec.imageUri"]
    no_task = spec_with(lambda s: s["workerPoolSpecs"][1].pop("containerSpec"))
    assert fields_of(no_task) == ["jobSpec.workerPoolSpecs[1]"]


def test_python_package_pool_needs_its_parts():
    document = spec_with(
        lambda s: s["workerPoolSpecs"][1].update(containerSpec=None, pythonPackageSpec={"args": ["--x"]})
    )
    assert set(fields_of(document)) == {
        "jobSpec.workerPoolSpecs[1].pythonPackageSpec.executorImageUri",
        "jobSpec.workerPoolSpecs[1].pythonPackageSpec.packageUris",
        "jobSpec.workerPoolSpecs[1].pythonPackageSpec.pythonModule",
    }


def test_pool_needs_a_machine_type():
    document = spec_with(lambda s: s["workerPoolSpecs"][1]["machineSpec"].pop("machineType"))
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[1].machineSpec.machineType"]


def test_accelerator_count_needs_a_type():
    document = spec_with(lambda s: s["workerPoolSpecs"][1]["machineSpec"].pop("acceleratorType"))
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType"]


def test_env_limit_leaves_room_for_relaunch_variables():
    def env(count):
        return [{"name": f"VAR_{i}", "value": "x"} for i in range(count)]

    fits = spec_with(lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(env=env(96)))
    assert parse_request(fits)
    too_many = spec_with(lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(env=env(97)))
    assert "at most 96 entries" in reason_for(too_many, "jobSpec.workerPoolSpecs[0].containerSpec.env")


def test_env_names_must_be_variable_names():
    document = spec_with(
        lambda s: s["workerPoolSpecs"][0]["containerSpec"].update(env=[{"name": "MY-VAR", "value": "1"}])
    )
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[0].containerSpec.env[0].name"]


def test_type_and_rule_problems_are_reported_together_without_repeats():
    def break_everything(spec):
        spec["workerPoolSpecs"][0]["replicaCount"] = "one"  # type problem
        spec["workerPoolSpecs"][1]["replicaCount"] = 0  # rule problem
        spec["workerPoolSpecs"][1]["machineSpec"]["machineTyp"] = "x"  # typo

    fields = fields_of(spec_with(break_everything))
    assert sorted(fields) == sorted(
        [
            "jobSpec.workerPoolSpecs[0].replicaCount",
            "jobSpec.workerPoolSpecs[1].replicaCount",
            "jobSpec.workerPoolSpecs[1].machineSpec.machineTyp",
        ]
    )


def test_job_spec_must_be_an_object():
    assert [str(p) for p in problems_of(request(jobSpec=[]))] == ["jobSpec: must be an object (got [])"]


def test_problem_text_and_exception_message():
    problem = Problem("jobSpec.workerPoolSpecs", "at least one worker pool is required")
    assert str(problem) == "jobSpec.workerPoolSpecs: at least one worker pool is required"
    assert str(RequestInvalid([problem, Problem("jobId", "bad")])) == (
        "jobSpec.workerPoolSpecs: at least one worker pool is required; jobId: bad"
    )


def test_input_mapping_is_not_modified():
    document = request(labels={"team": "a"})
    snapshot = copy.deepcopy(document)
    parse_request(document)
    assert document == snapshot


def test_odd_values_the_library_chokes_on_are_reported_not_raised():
    document = spec_with(
        lambda s: s["workerPoolSpecs"][0]["machineSpec"].update(acceleratorType=float("inf"))
    )
    assert fields_of(document) == ["jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType"]


ODD_VALUES = [
    None,
    True,
    0,
    -1,
    1.5,
    2**70,
    "",
    "x",
    [],
    {},
    [None],
    [{}],
    float("inf"),
    float("nan"),
    "\u0000",
]


def _all_paths(document, prefix=()):
    yield prefix
    children = (
        document.items()
        if isinstance(document, dict)
        else enumerate(document)
        if isinstance(document, list)
        else ()
    )
    for key, child in children:
        yield from _all_paths(child, (*prefix, key))


def test_any_damaged_request_is_either_rejected_with_problems_or_usable():
    """Seeded random damage anywhere in a realistic request: never a stray exception."""
    import random

    from controller.request.render import build_custom_job

    rng = random.Random(20261121)
    base = request(displayName="x", labels={"team": "a"}, restartPolicy={"backoff": {"jitter": 0.1}})
    paths = [p for p in _all_paths(base) if p]
    for _ in range(300):
        document = copy.deepcopy(base)
        for path in rng.sample(paths, 2):
            parent = document
            try:
                for key in path[:-1]:
                    parent = parent[key]
                parent[path[-1]] = rng.choice(ODD_VALUES)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change removed this path
        try:
            parsed = parse_request(document)
        except RequestInvalid as invalid:
            assert all(p.field and p.reason for p in invalid.problems)
            continue
        build_custom_job(parsed, 1)
        assert parse_request(parsed.to_json()) == parsed
