"""Bound how deeply a JSON (or flow-style YAML) text nests, before a parser recurses into it.

Python's parsers recurse once per level. A small hostile body ("[" * 100_000) drives them to the
interpreter's recursion limit, and catching the RecursionError afterwards is not enough: a garbage
collection that runs while the stack is that deep can make an unrelated finaliser fail too. So
untrusted text is measured first, in one linear pass that never recurses.
"""

from __future__ import annotations

import re

MAX_NESTING = 64  # far deeper than any request, push envelope or log entry a sender means to send

# Quoted strings may hold brackets that do not nest anything: drop them before counting.
# Single quotes are YAML's other string form; JSON has none, so removing them there changes nothing
# a valid document could contain outside a double-quoted string.
# A string left open runs to the end of the text (the parser reports the syntax error). Without
# that, every quote after an unclosed one would start a scan to the end that fails, so a body
# such as `"\"\"\"...` costs quadratic time (40 KB took 15 s); with it every scan succeeds and
# the pass stays linear. The quantifiers are possessive: a backtracking `*` keeps a state per
# character it passes, and one 9.5 MB string took 2.4 s and 1.1 GB of memory.
_DOUBLE_QUOTED = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_SINGLE_QUOTED = re.compile(rb"'(?:[^']++|'')*+(?:'|\Z)")
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_OPENERS = frozenset(b"[{")


def nesting_depth(text: str | bytes) -> int:
    """The deepest level of `[`/`{` nesting outside quoted strings (0 for a scalar).

    Unbalanced text is measured as far as it goes; the parser reports its syntax error later.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    raw = _SINGLE_QUOTED.sub(b"", _DOUBLE_QUOTED.sub(b"", raw))
    depth = deepest = 0
    for byte in raw.translate(None, _NOT_A_BRACKET):
        if byte in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def nests_too_deeply(text: str | bytes, limit: int = MAX_NESTING) -> bool:
    return nesting_depth(text) > limit
