"""Any bytes at all give a parsed request or `RequestInvalid` naming a field and a reason
(issue 28): generated and mutated inputs, from the examples, through both decoders.

The parser's last resort turns an exception nobody mapped into the reason "internal error"; these
tests fail on that reason too, so they prove every failure they reach is mapped on purpose.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.request import CancelRequest, JobRequest, RequestInvalid, parse_request
from controller.request.nesting import nesting_depth
from controller.request.problems import MAX_FIELD_CHARS, MAX_REASON_CHARS
from tests.support.hostile import (
    CONFUSED_VALUES,
    FRAGMENTS,
    as_text,
    confuse,
    example_documents,
    example_texts,
    mutate,
)

# Fixed sizes keep the fast lane fast (each test a few seconds on one shared core); the deadline
# is off because a shared machine's pauses are not the parser's.
FEW = settings(max_examples=200, deadline=None)
MANY = settings(max_examples=700, deadline=None)


def assert_request_or_reasons(raw) -> None:
    try:
        request = parse_request(raw)
    except RequestInvalid as error:
        assert error.problems, "RequestInvalid without a problem"
        for problem in error.problems:
            assert isinstance(problem.field, str) and problem.field
            assert isinstance(problem.reason, str) and problem.reason
            assert "internal error" not in problem.reason, f"unmapped failure: {problem}"
            assert len(problem.field) <= MAX_FIELD_CHARS and len(problem.reason) <= MAX_REASON_CHARS
            # The reason is stored, logged and sent as a Pub/Sub attribute: it must be text.
            str(problem).encode("utf-8")
    else:
        assert isinstance(request, (JobRequest, CancelRequest))
        assert parse_request(request.to_json()) == request


@MANY
@given(st.randoms(use_true_random=False))
def test_mutated_examples_give_a_request_or_reasons(rng):
    assert_request_or_reasons(mutate(rng.choice(example_texts()), rng))


@MANY
@given(st.randoms(use_true_random=False))
def test_examples_with_a_value_of_the_wrong_type_give_a_request_or_reasons(rng):
    assert_request_or_reasons(as_text(confuse(rng.choice(example_documents()), rng), rng))


@FEW
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_give_reasons(raw):
    assert_request_or_reasons(raw)


# Every code point, lone surrogates included (hypothesis leaves them out of text by default).
ANY_CHARACTER = st.characters(codec=None, exclude_categories=())


@FEW
@given(st.text(ANY_CHARACTER, max_size=2000))
def test_arbitrary_text_gives_reasons(text):
    assert_request_or_reasons(text)


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(ANY_CHARACTER, max_size=50)
    | st.sampled_from(CONFUSED_VALUES)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(ANY_CHARACTER, max_size=20), inner, max_size=5)
    ),
    max_leaves=40,
)


@FEW
@given(JSON_VALUES, st.sampled_from(["jobId", "jobSpec", "checkpoint", "restartPolicy", "labels", "action"]))
def test_generated_documents_under_request_fields_give_a_request_or_reasons(value, field):
    document = {**demo_document(), field: value}
    assert_request_or_reasons(json.dumps(document).encode())
    assert_request_or_reasons("# yaml\n" + json.dumps(document))


@FEW
@given(
    st.sampled_from(FRAGMENTS),
    st.integers(1, 30),
    st.sampled_from([b"", b"jobId: ", b'{"jobId": ', b"[", b"- "]),
)
def test_repeated_fragments_give_reasons(fragment, times, prefix):
    assert_request_or_reasons(prefix + fragment * times)


def test_the_two_failures_the_flood_found_are_reasons_now():
    """Issue 28, finding 1: both crashed the parser before."""
    number = "9" * 5000
    for raw in (f"jobId: a\nx: {number}\n", f'{{"jobId": {number}}}'):
        reasons = _reasons(raw)
        assert "more than 4300 digits" in reasons["request"] or "5000 digits" in reasons["request"]
    for raw in (b'{"jobId": "\\ud800"}', b'jobId: "\\ud800"\n'):
        assert "surrogate" in _reasons(raw)["jobId"]


def test_a_surrogate_deep_in_a_request_is_named_by_its_field_path():
    document = demo_document()
    document["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] = ["ok", "\ud800"]
    reasons = _reasons(json.dumps(document))
    assert list(reasons) == ["jobSpec.workerPoolSpecs[0].containerSpec.args[1]"]


def test_a_long_hexadecimal_or_base_60_yaml_number_is_refused_quickly():
    for written in ("0x" + "f" * 20_000, "1" + ":59" * 20_000):
        assert "more than 4300 digits" in _reasons(f"jobId: a\nx: {written}\n")["request"]


def test_indentation_nested_beyond_the_bound_is_refused_before_the_parser_recurses():
    block_list = "- " * 100_000
    indented = "".join(" " * depth + "a:\n" for depth in range(200))
    for raw in (block_list, indented):
        assert "nests more than 64 levels" in _reasons(raw)["request"]


def test_the_examples_still_parse():
    for text in example_texts():
        assert_request_or_reasons(text)
    assert isinstance(parse_request(demo_document()), JobRequest)


def demo_document() -> dict:
    """A fresh copy of examples/demo.yaml's request."""
    (demo,) = {json.dumps(doc) for doc in example_documents() if doc.get("jobId") == "demo-gpt"}
    return json.loads(demo)


def _reasons(raw) -> dict[str, str]:
    try:
        parse_request(raw)
    except RequestInvalid as error:
        return {problem.field: problem.reason for problem in error.problems}
    raise AssertionError("accepted")


def test_hostile_strategies_reach_both_outcomes():
    """The generators are not vacuous: some mutated examples still parse, most do not."""
    rng = random.Random(28)
    outcomes = set()
    for _ in range(200):
        try:
            parse_request(mutate(rng.choice(example_texts()), rng))
            outcomes.add("request")
        except RequestInvalid:
            outcomes.add("invalid")
    assert outcomes == {"request", "invalid"}


@pytest.mark.timeout(120)  # the old pattern took hours on this body: fail, do not pin a core
def test_a_megabyte_of_escaped_quotes_in_an_unclosed_string_is_refused():
    """Every quote after an unclosed one used to restart a scan to the end of the text."""
    raw = b'{"jobId": "' + b'\\"' * 500_000
    assert "invalid JSON" in _reasons(raw)["request"]
    assert nesting_depth(raw) == 1


def test_a_field_or_reason_quoting_a_huge_key_is_cut_short():
    """A 300,000-character key, duplicated or unknown, used to come back whole in the reason or
    the field path, and so in the stored record, the log line and the alert."""
    key = "k" * 300_000
    document = demo_document()
    for raw in (f'{{"{key}": 1, "{key}": 2}}', json.dumps({**document, key: 1})):
        with pytest.raises(RequestInvalid) as caught:
            parse_request(raw)
        for problem in caught.value.problems:
            assert len(str(problem)) < 700 and "(300" in str(problem)
