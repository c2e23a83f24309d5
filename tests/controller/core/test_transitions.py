"""The phase-transition table in controller/core/README.md is exactly what `decide` does."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.transitions import observed_transitions

README = Path(__file__).resolve().parents[3] / "controller" / "core" / "README.md"
ROW = re.compile(r"^\| (\w+) \| (\w+) \| ([\w, ]+) \| .+ \|$")


def written_transitions() -> set[tuple[str, str, str]]:
    rows: set[tuple[str, str, str]] = set()
    for line in README.read_text().splitlines():
        match = ROW.match(line)
        if match and match.group(1) not in ("from", "module"):
            source, target, events = match.groups()
            rows |= {(source, event.strip(), target) for event in events.split(",")}
    return rows


def test_every_transition_decide_makes_is_written_down():
    missing = observed_transitions() - written_transitions()
    assert not missing, f"transitions missing from controller/core/README.md: {sorted(missing)}"


def test_every_written_transition_happens():
    never_seen = written_transitions() - observed_transitions()
    assert not never_seen, f"rows in controller/core/README.md that decide never makes: {sorted(never_seen)}"


def test_the_table_is_read():
    # A table the parser silently skipped would make both tests above pass vacuously.
    assert len(written_transitions()) >= 30
