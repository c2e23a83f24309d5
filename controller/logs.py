"""Structured JSON logs in the field names Cloud Logging reads: `severity`, `message`, `time`.

Every line a job-related component writes carries `job_id` and `attempt` (bind them with
`log.bind(job_id=..., attempt=...)`), so one job's story can be filtered out of the stream.

A line costs what its processors cost, and little else (the intake writes a few per request):
- a module's logger (`get`) assembles structlog's bound logger once per configuration, not on
  every line as structlog's lazy proxy does without `cache_logger_on_first_use`; a new
  configuration (`configure`, `structlog.configure`, `structlog.reset_defaults`, tests capturing
  the stream) is seen by the next line, as before;
- the JSON encoder is made once, not per line (the text is `json.dumps(..., default=str)`'s);
- a line goes out in one write (structlog's PrintLogger prints the text and then the newline: two
  unbuffered writes, so two system calls, each letting go of the interpreter lock).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


def _cloud_logging_names(logger, method_name, event_dict):
    event_dict["severity"] = event_dict.pop("level", method_name).upper()
    event_dict["message"] = event_dict.pop("event", "")
    event_dict["time"] = event_dict.pop("timestamp", None)
    return event_dict


# What structlog.processors.JSONRenderer(sort_keys=False, default=str) writes, without making an
# encoder per line.
_encode = json.JSONEncoder(default=str).encode


def _render_json(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
    return _encode(event_dict)


# One lock per stream, so that lines written from many threads never interleave. Our own, not
# structlog's PrintLogger's private attributes (which its versions may rename).
_STREAM_LOCKS: dict[int, threading.Lock] = {}
_STREAM_LOCKS_GUARD = threading.Lock()


def _lock_for(stream: TextIO) -> threading.Lock:
    with _STREAM_LOCKS_GUARD:
        return _STREAM_LOCKS.setdefault(id(stream), threading.Lock())


class _LineLogger:
    """structlog's logger interface (a method per level, each given the rendered line): the line
    and its newline leave in one write."""

    def __init__(self, stream: TextIO):
        self._file = stream
        self._lock = _lock_for(stream)

    def msg(self, message: str) -> None:
        line = message + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _LineLoggerFactory:
    def __init__(self, file: TextIO):
        self._file = file

    def __call__(self, *args: Any) -> _LineLogger:
        return _LineLogger(self._file)


def configure(level: str = "INFO", stream=None) -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _cloud_logging_names,
            _render_json,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level.upper(), 20)),
        logger_factory=_LineLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (grpc, google-api-core) stay quiet unless they warn.
    logging.basicConfig(level=logging.WARNING, stream=stream or sys.stderr)


def _configuration() -> tuple[Any, ...]:
    """What an assembled logger depends on, compared by identity (structlog keeps the processor
    list's identity while tests swap its contents, and bound loggers hold that same list)."""
    config = structlog.get_config()
    return (
        config["processors"],
        config["logger_factory"],
        config["wrapper_class"],
        config["context_class"],
    )


class _Logger:
    """A module's logger: structlog's bound logger for the configuration in force, assembled
    again only when the configuration changed. Stays lazy: nothing is read at import time."""

    __slots__ = ("_factory_args", "_initial", "_assembled")

    def __init__(self, name: str, initial: dict[str, Any]):
        self._factory_args = (name,)
        self._initial = initial
        self._assembled: tuple[tuple[Any, ...], Any] | None = None

    def _bound(self) -> Any:
        current = _configuration()
        assembled = self._assembled
        if assembled is not None and all(a is b for a, b in zip(assembled[0], current, strict=True)):
            return assembled[1]
        bound = structlog.get_logger(*self._factory_args, **self._initial).bind()
        self._assembled = (current, bound)  # one tuple: a thread sees an old pair or a new one
        return bound

    def bind(self, **values: Any) -> Any:
        return self._bound().bind(**values)

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._bound().debug(event, *args, **kw)

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._bound().info(event, *args, **kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._bound().warning(event, *args, **kw)

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._bound().error(event, *args, **kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._bound().exception(event, *args, **kw)

    def __getattr__(self, name: str) -> Any:  # the rest of the bound logger's methods
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._bound(), name)


def get(name: str = "relaunch", **bound: Any) -> Any:
    return _Logger(name, bound)
