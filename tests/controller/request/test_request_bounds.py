"""Every number and name a request carries has an upper bound, stated in the error (issue 12, finding 5
and the object-name part of finding 3)."""

from __future__ import annotations

import json

import pytest

from controller.request import RequestInvalid, parse_request


def job(**changes) -> dict:
    document = {
        "jobId": "bounded-1",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "replicaCount": 1,
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
                }
            ]
        },
        "checkpoint": {"uri": "gs://acme-ckpt/bounded-1"},
    }
    document.update(changes)
    return document


def problems(raw) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(raw)
    return {problem.field: problem.reason for problem in caught.value.problems}


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("initialSeconds", 1e308, "86400"),
        ("maxSeconds", 1e308, "86400"),
        ("initialSeconds", 86401, "86400"),
        ("multiplier", 1e6, "100"),
    ],
)
def test_backoff_beyond_a_day_is_refused_with_the_bound(field, value, bound):
    found = problems(json.dumps(job(restartPolicy={"backoff": {field: value}})))
    assert bound in found[f"restartPolicy.backoff.{field}"]


def test_a_one_day_backoff_is_still_accepted():
    request = parse_request(job(restartPolicy={"backoff": {"initialSeconds": 86400, "maxSeconds": 86400}}))
    assert request.restart_policy.backoff.max_seconds == 86400


@pytest.mark.parametrize(
    "field", ["maxFailures", "maxPreemptions", "crashLoopAttempts", "onDemandAfterPreemptions"]
)
def test_budgets_above_a_thousand_are_refused_with_the_bound(field):
    found = problems(json.dumps(job(restartPolicy={field: 1001})))
    assert "1000" in found[f"restartPolicy.{field}"]


def test_an_absurd_integer_is_refused_and_the_message_stays_short():
    raw = json.dumps(job()).replace(
        '"checkpoint"', '"restartPolicy": {"maxFailures": 1' + "0" * 1000 + '}, "checkpoint"'
    )
    found = problems(raw)
    reason = found["restartPolicy.maxFailures"]
    assert "1000" in reason and len(reason) < 200


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(literal):
    raw = json.dumps(job()).replace(
        '"checkpoint"', f'"restartPolicy": {{"backoff": {{"jitter": {literal}}}}}, "checkpoint"'
    )
    assert "restartPolicy.backoff.jitter" in problems(raw)


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("gs://acme-ckpt/" + "a" * 1000, "at most 900 bytes"),
        ("gs://acme-ckpt/" + "é" * 460, "at most 900 bytes"),  # 920 bytes of UTF-8 in 460 characters
        ("gs://acme-ckpt/runs/../other-job", "'..'"),
        ("gs://acme-ckpt/runs/./job", "'.'"),
        ("gs://acme-ckpt/runs?x=1", "'?'"),
        ("gs://acme-ckpt/runs#frag", "'#'"),
        ("gs://acme-ckpt/runs/[0]", "'['"),
        ("gs://acme-ckpt/runs\x7f", "'\\x7f'"),
        ("gs://acme-ckpt/runs\n", "control characters"),
    ],
)
def test_checkpoint_object_names_keep_to_cloud_storage_limits(uri, words):
    assert words in problems(job(checkpoint={"uri": uri}))["checkpoint.uri"]


def test_a_long_but_legal_checkpoint_root_is_accepted():
    uri = "gs://acme-ckpt/" + "a" * 900
    assert parse_request(job(checkpoint={"uri": uri})).checkpoint_uri == uri


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,  # JSON
        b'{"jobId": "deep-1", "labels": ' + b"{" * 100_000 + b"}" * 100_000 + b"}",
        b"jobId: deep-1\nlabels: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",  # YAML flow style
    ],
)
def test_a_request_nested_beyond_the_bound_is_refused_before_any_parser_recurses(raw):
    assert problems(raw) == {"request": "nests more than 64 levels deep"}


def test_brackets_inside_strings_do_not_count_as_nesting():
    deep_looking_argument = "[" * 500 + "{" * 500
    document = job()
    document["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] = [deep_looking_argument]
    for raw in (json.dumps(document), f"args: '{deep_looking_argument}'\njobId: x\n"):
        try:
            parse_request(raw)
        except RequestInvalid as error:
            assert all("nest" not in problem.reason for problem in error.problems)
