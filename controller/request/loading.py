"""Turning request bytes or text into a plain JSON-like document, safely (size, depth, YAML tags, duplicate keys).

Whatever the bytes, the outcome is a document or `RequestInvalid` naming the field and the reason:
each way a decoder can fail on hostile input (number size, text encoding, nesting, memory) is
mapped here, and `parse_request` maps anything left as a last resort.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from controller.request.limits import MAX_NUMBER_DIGITS, MAX_REQUEST_BYTES
from controller.request.nesting import MAX_NESTING, nests_too_deeply
from controller.request.problems import Problem, RequestInvalid, format_path

# The smallest integer with more than MAX_NUMBER_DIGITS decimal digits. Python refuses to convert
# such a number to or from decimal text (its int-conversion limit), so no request may hold one.
_TOO_BIG = 10**MAX_NUMBER_DIGITS


class _NumberTooLong(ValueError):
    """Raised from inside the JSON decoder, which would otherwise raise Python's own ValueError."""

    def __init__(self, digits: int):
        super().__init__(f"holds a number of {digits} digits; numbers have at most {MAX_NUMBER_DIGITS}")


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and keeps dates as strings.

    A duplicated key silently dropping half of a job spec is the kind of surprise that costs a
    day of GPU time; dates would otherwise become datetime objects that JSON cannot carry.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: let the base class report it
                break
            if duplicate:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        return super().construct_mapping(node, deep=deep)

    # Composing recurses once per level of block-style nesting (`- - - -` or ever deeper
    # indentation), which the bracket count in `nesting` cannot see: bound it here, long before
    # the interpreter's recursion limit.
    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nests more than {MAX_NESTING} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_bounded_int(self, node):
        """YAML 1.1 integers, but none Python could not print: a long decimal raises the int-conversion
        limit's ValueError, a long hexadecimal or base-60 one would be quadratic work, then unprintable."""
        written = self.construct_scalar(node)
        if len(written) > MAX_NUMBER_DIGITS or abs(value := self.construct_yaml_int(node)) >= _TOO_BIG:
            problem = f"a number of more than {MAX_NUMBER_DIGITS} digits ({len(written)} characters)"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
        return value


_StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", _StrictYamlLoader.construct_bounded_int)


def _bounded_json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_NUMBER_DIGITS:
        raise _NumberTooLong(digits)
    return int(text)


def _reject_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise RequestInvalid(
            [Problem("request", f"is not valid UTF-8 text (bad byte at offset {error.start})")]
        ) from None


def _load_text(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped:
        raise RequestInvalid([Problem("request", "is empty")])
    if nests_too_deeply(stripped):
        raise RequestInvalid([Problem("request", f"nests more than {MAX_NESTING} levels deep")])
    try:
        if stripped[0] in "{[":
            try:
                return json.loads(
                    text, object_pairs_hook=_reject_duplicate_json_keys, parse_int=_bounded_json_int
                )
            except _NumberTooLong as error:
                raise RequestInvalid([Problem("request", str(error))]) from None
            except json.JSONDecodeError as error:
                raise RequestInvalid(
                    [
                        Problem(
                            "request",
                            f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}",
                        )
                    ]
                ) from None
            except ValueError as error:  # duplicate key
                raise RequestInvalid([Problem("request", f"invalid JSON: {error}")]) from None
        try:
            return yaml.load(text, Loader=_StrictYamlLoader)  # a SafeLoader subclass
        except yaml.YAMLError as error:
            raise RequestInvalid([Problem("request", _describe_yaml_error(error))]) from None
    except RecursionError:
        raise RequestInvalid([Problem("request", "is nested too deeply")]) from None


def _describe_yaml_error(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    detail = f"{problem} ({context})" if context else problem
    return f"invalid YAML{where}: {detail}"


# Values that hold no others: told apart by their exact type first, since a Mapping check is an
# abstract-class check, several times dearer, and a request is mostly such leaves.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _count_nodes_within(document: Any, budget: int) -> bool:
    """True when the document has at most `budget` values. YAML aliases can make a small text
    expand into a huge (or cyclic) structure; this bounds the work before anything walks it."""
    pending = [document]
    seen = 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > budget:
            return False
        if type(value) in _LEAVES:
            continue
        if isinstance(value, Mapping):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    return True


def _plain_document(document: Any) -> Any:
    """Re-encode as JSON so every later step sees plain dicts/lists/str/numbers, and measure it."""
    if not _count_nodes_within(document, budget=200_000):
        raise RequestInvalid([Problem("request", "expands to too many values (YAML aliases?)")])
    try:
        encoded = json.dumps(document, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError) as error:
        raise RequestInvalid([Problem("request", f"must contain only JSON values: {error}")]) from None
    except RecursionError:
        raise RequestInvalid([Problem("request", "is nested too deeply")]) from None
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate (JSON's "\ud800", or the same YAML escape) decodes to a str that is
        # not Unicode text: it can be neither stored nor sent to Vertex.
        raise RequestInvalid(
            [
                Problem(
                    _path_of_unencodable(document),
                    "holds a lone UTF-16 surrogate (such as \\ud800), not text",
                )
            ]
        ) from None
    if size > MAX_REQUEST_BYTES:
        raise RequestInvalid([Problem("request", f"is larger than {MAX_REQUEST_BYTES} bytes as JSON")])
    return json.loads(encoded)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path_of_unencodable(document: Any) -> str:
    """The field path of the first key or string that UTF-8 cannot encode ("request" if none)."""
    pending: list[tuple[tuple, Any]] = [((), document)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str) and not _encodes(value):
            return format_path(path)
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and not _encodes(key):
                    return format_path((*path, key.encode("utf-8", "replace").decode()))
                pending.append(((*path, key), item))
        elif isinstance(value, (list, tuple)):
            pending.extend(((*path, index), item) for index, item in enumerate(value))
    return "request"


def load_document(raw: bytes | str | Mapping) -> Any:
    """Text or mapping -> plain JSON-like value, with size, encoding and syntax errors as problems."""
    if isinstance(raw, Mapping):
        return _plain_document(raw)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw)
        if len(raw) > MAX_REQUEST_BYTES:
            raise RequestInvalid(
                [Problem("request", f"is {len(raw)} bytes; the limit is {MAX_REQUEST_BYTES} bytes (1 MiB)")]
            )
        raw = _decode(raw)
    if not isinstance(raw, str):
        raise RequestInvalid([Problem("request", f"must be text or an object (got {type(raw).__name__})")])
    size = len(raw.encode("utf-8", errors="surrogatepass"))
    if size > MAX_REQUEST_BYTES:
        raise RequestInvalid(
            [Problem("request", f"is {size} bytes; the limit is {MAX_REQUEST_BYTES} bytes (1 MiB)")]
        )
    return _plain_document(_load_text(raw))
