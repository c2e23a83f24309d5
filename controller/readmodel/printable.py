"""Make text from a request or from Vertex safe to show on a terminal or a web page.

A job's displayName, an error message from Vertex or a line of training log is written by
someone else. Printed raw, an ANSI escape can clear the operator's screen or recolour it, a
newline can forge a whole "SUCCEEDED" line, and a bidi override can make text read backwards.
`printable` shows every such character as a visible escape (`\\x1b`, `\\n`, `\\u202e`) instead
of letting the terminal or the browser interpret it. Stdlib only.
"""

from __future__ import annotations

import unicodedata

# Characters that reorder text (bidi embeddings, overrides, isolates and marks): category Cf
# covers them, but they are named here so the intent stays readable.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\n":
        return "\\n"
    if char == "\r":
        return "\\r"
    if char == "\t":
        return "\\t"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    if char in _BIDI:
        return True
    # Cc: C0/C1 controls (ESC, CSI, BEL, newline...). Cf: format characters (zero-width and
    # direction controls). Zl/Zp: line and paragraph separators, which some terminals honour.
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def printable(value: object, *, keep_tabs: bool = False) -> str:
    """`value` as a string with every control, format or bidi character shown as an escape.

    A backslash is left alone: the escapes are for reading, not for parsing back.
    """
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():
        return text  # the common case, without a per-character walk
    return "".join(
        _escape(char) if _unsafe(char) and not (keep_tabs and char == "\t") else char for char in text
    )


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 preemption`, `2 preemptions`: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
