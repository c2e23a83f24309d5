"""The controller's log lines: one JSON object per line, in Cloud Logging's field names, written
where the configuration in force says, whenever the module's logger was made."""

from __future__ import annotations

import io
import json

import pytest
import structlog
from structlog.testing import capture_logs

from controller import logs


class CountedWrites(io.StringIO):
    """A stream that remembers each write call's text."""

    def __init__(self):
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.fixture(autouse=True)
def _defaults_after():
    yield
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_carries_its_fields_then_severity_message_and_time():
    stream = io.StringIO()
    logs.configure("INFO", stream=stream)
    log = logs.get("relaunch.test", component="intake")

    log.bind(job_id="j-1", attempt=2).warning("slow store", store=object.__new__(Unprintable))
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        log.exception("it failed", job_id="j-2", attempt=None)
    log.debug("not at INFO")

    first, second = lines(stream)
    assert list(first) == ["component", "job_id", "attempt", "store", "severity", "message", "time"]
    assert first["severity"] == "WARNING" and first["message"] == "slow store"
    assert first["store"] == "unprintable, so shown with str()"
    assert first["time"].endswith("Z") and first["time"][:2] == "20"
    assert list(second) == ["component", "job_id", "attempt", "exception", "severity", "message", "time"]
    assert second["severity"] == "ERROR" and "ZeroDivisionError: division by zero" in second["exception"]
    # The text is the standard library's json.dumps spelling (", " and ": "), which readers match.
    assert stream.getvalue().startswith('{"component": "intake", "job_id": "j-1", "attempt": 2, ')


class Unprintable:
    def __str__(self) -> str:
        return "unprintable, so shown with str()"


def test_a_logger_made_earlier_follows_each_new_configuration():
    log = logs.get("relaunch.test")
    first, second = io.StringIO(), io.StringIO()
    logs.configure("INFO", stream=first)
    log.info("to the first stream", job_id="a", attempt=1)
    logs.configure("WARNING", stream=second)
    log.info("below the new level", job_id="a", attempt=1)
    log.warning("to the second stream", job_id="a", attempt=1)

    assert [line["message"] for line in lines(first)] == ["to the first stream"]
    assert [line["message"] for line in lines(second)] == ["to the second stream"]

    with capture_logs() as captured:  # structlog's own test helper swaps the processors in place
        log.warning("captured", job_id="a", attempt=1)
    assert captured == [{"event": "captured", "job_id": "a", "attempt": 1, "log_level": "warning"}]
    assert len(lines(second)) == 1


def test_each_line_leaves_in_one_write():
    # One write per line: nothing another writer of the stream (a library's warning) sends can
    # land between a line and its newline, and a line costs one system call on an unbuffered stream.
    stream = CountedWrites()
    logs.configure("INFO", stream=stream)
    log = logs.get("relaunch.test")
    for attempt in range(3):
        log.info("job accepted", job_id="j", attempt=attempt)

    assert len(stream.writes) == 3
    assert all(text.endswith("}\n") and text.count("\n") == 1 for text in stream.writes)
