"""Hostile request bodies: what an attacker or a buggy publisher sends, built from the examples.

Shared by the parser's property tests (hypothesis strategies) and by the hostile-flood test and
benchmark (a seeded `random.Random`), so both lanes throw the same kinds of input.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@functools.cache
def example_texts() -> tuple[bytes, ...]:
    """Every example request as written (YAML and JSON, valid and invalid), and each valid one as
    compact JSON too, so mutations hit both decoders."""
    raws = [path.read_bytes() for path in sorted(EXAMPLES.rglob("*")) if path.suffix in (".yaml", ".json")]
    documents = [yaml.safe_load(raw) for raw in raws]
    return (*raws, *(json.dumps(doc).encode() for doc in documents if isinstance(doc, dict)))


@functools.cache
def example_documents() -> tuple[dict, ...]:
    return tuple(doc for doc in (yaml.safe_load(raw) for raw in example_texts()) if isinstance(doc, dict))


# Fragments that have broken parsers: each is valid in some position of JSON or YAML text.
FRAGMENTS: list[bytes] = [
    b"9" * 4301,  # one digit over Python's int-conversion limit
    b"-" + b"9" * 5000,
    b"0x" + b"f" * 5000,  # YAML hexadecimal: no conversion limit, but unprintable as decimal
    b"1" + b":59" * 3000,  # YAML 1.1 base 60
    b"1e99999",
    b"-1e-99999",
    b"NaN",
    b"Infinity",
    b".inf",
    b'"\\ud800"',  # a lone surrogate, through JSON's and YAML's escapes
    b'"\\udfff\\ud800"',
    b'"\\u0000"',
    b"\x00",
    b"\x1b[2J",
    b"\xff\xfe",
    b"\xed\xa0\x80",  # a surrogate encoded as UTF-8: invalid UTF-8
    b"\xef\xbb\xbf",
    b"[" * 70,
    b"{" * 70,
    b"- " * 70,
    b"]" * 70,
    b"&a [*a, *a, *a]",
    b"*unknown_anchor",
    b"!!python/object/apply:os.system ['true']",
    b"!!binary aGVsbG8=",
    b"? [a, b]\n: c",
    b"<<: *a",
    b"'it''s",
    b'"\\"\\"\\"',
    b"%YAML 1.1\n---\n",
    b"---\n...\n---\n",
    b"2026-11-26T16:44:37Z",
    b"true",
    b"null",
    b"[]",
    b"{}",
    b'"' + b"x" * 2000 + b'"',
    b'{"jobId": "a", "jobId": "b"}',
]

# Values of the wrong type (or absurd size) for any field.
CONFUSED_VALUES: list[object] = [
    None,
    True,
    0,
    -1,
    2**63,
    1e308,
    float("nan"),
    "",
    "\ud800",
    "x" * 5000,
    "\x00\x1f\x7f",
    [],
    [None],
    {},
    {"": ""},
    {"jobId": {"jobId": []}},
    [[[[[[[[]]]]]]]],
]


def confuse(document: object, rng: random.Random) -> object:
    """A copy of `document` with one value, at a random path, replaced by a value of another type."""
    if not isinstance(document, (dict, list)) or not document or rng.random() < 0.25:
        return rng.choice(CONFUSED_VALUES)
    if isinstance(document, dict):
        key = rng.choice(list(document))
        return {**document, key: confuse(document[key], rng)}
    index = rng.randrange(len(document))
    return [*document[:index], confuse(document[index], rng), *document[index + 1 :]]


def as_text(document: object, rng: random.Random) -> bytes:
    """JSON text, or the same text read as YAML (a comment line first makes it YAML)."""
    text = json.dumps(document).encode()  # escapes surrogates, so any str serialises
    return text if rng.random() < 0.5 else b"# yaml\n" + text


def mutate(raw: bytes, rng: random.Random) -> bytes:
    """One to three edits: insert or overwrite a fragment, delete or repeat a slice, flip bits,
    cut the text short."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(raw))
        end = min(len(raw), at + rng.randint(0, 40))
        edit = rng.randrange(6)
        if edit == 0:
            raw = raw[:at] + rng.choice(FRAGMENTS) + raw[at:]
        elif edit == 1:
            raw = raw[:at] + rng.choice(FRAGMENTS) + raw[end:]
        elif edit == 2:
            raw = raw[:at] + raw[end:]
        elif edit == 3:
            raw = raw[:end] + raw[at:end] * rng.randint(2, 50) + raw[end:]
        elif edit == 4 and raw:
            index = min(at, len(raw) - 1)
            raw = raw[:index] + bytes([raw[index] ^ (1 << rng.randrange(8))]) + raw[index + 1 :]
        else:
            raw = raw[:at]
    return raw


def hostile_message(rng: random.Random) -> bytes:
    """One hostile request body of any kind above."""
    kind = rng.randrange(4)
    if kind == 0:
        return mutate(rng.choice(example_texts()), rng)
    if kind == 1:
        return as_text(confuse(rng.choice(example_documents()), rng), rng)
    if kind == 2:
        return rng.randbytes(rng.randint(0, 2000))
    return rng.choice(FRAGMENTS) * rng.randint(1, 20)
