"""The nesting measure that guards every parser of untrusted JSON or YAML text."""

from __future__ import annotations

from controller.request.nesting import MAX_NESTING, nesting_depth, nests_too_deeply


def test_depth_counts_arrays_and_objects_but_not_brackets_inside_strings():
    assert nesting_depth(b"42") == 0
    assert nesting_depth(b'{"a": [1, {"b": "[[[[{{{{"}], "c": []}') == 3
    assert nesting_depth('{"escaped \\" quote [[[": [[1]]}') == 3
    assert nesting_depth("x: ['[[[[', [1, [2]]]") == 3


def test_the_bound_is_inclusive_and_unbalanced_text_is_measured_as_far_as_it_goes():
    assert not nests_too_deeply("[" * MAX_NESTING + "]" * MAX_NESTING)
    assert nests_too_deeply("[" * (MAX_NESTING + 1))
    assert nesting_depth("]]]][[") == 2
