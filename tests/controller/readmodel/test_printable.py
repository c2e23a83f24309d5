"""`printable`: text from requests and from Vertex cannot drive a terminal or reorder a line."""

from __future__ import annotations

from controller.readmodel.printable import counted, printable


def test_plain_text_and_ordinary_unicode_are_unchanged():
    assert printable("demo-gpt: Démo 训练 🚀") == "demo-gpt: Démo 训练 🚀"
    assert printable(None) == "" and printable(42) == "42"


def test_escape_sequences_and_line_breaks_are_shown_not_interpreted():
    shown = printable("a\x1b[2J\x1b]0;title\x07b\r\nSUCCEEDED\x9bX\x00")
    assert shown == "a\\x1b[2J\\x1b]0;title\\x07b\\r\\nSUCCEEDED\\x9bX\\x00"
    assert shown.isprintable()


def test_bidi_overrides_isolates_and_invisible_formatters_are_shown():
    for char in "\u202e\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u2028\u2029\ufeff":
        shown = printable(f"x{char}y")
        assert char not in shown and shown.startswith("x\\u") and shown.endswith("y"), repr(char)


def test_tabs_may_be_kept_for_log_lines():
    assert printable("a\tb") == "a\\tb"
    assert printable("a\tb\x1b", keep_tabs=True) == "a\tb\\x1b"


def test_counts_read_as_english():
    """Status said "1 preemptions"."""
    assert counted(1, "preemption") == "1 preemption"
    assert counted(0, "preemption") == "0 preemptions"
    assert counted(2, "failure") == "2 failures"
    assert counted(3, "replica", "replicas in all") == "3 replicas in all"
