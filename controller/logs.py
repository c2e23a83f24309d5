"""Structured JSON logs in the field names Cloud Logging reads: `severity`, `message`, `time`.

Every line a job-related component writes carries `job_id` and `attempt` (bind them with
`log.bind(job_id=..., attempt=...)`), so one job's story can be filtered out of the stream.
"""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


def _cloud_logging_names(logger, method_name, event_dict):
    event_dict["severity"] = event_dict.pop("level", method_name).upper()
    event_dict["message"] = event_dict.pop("event", "")
    event_dict["time"] = event_dict.pop("timestamp", None)
    return event_dict


def configure(level: str = "INFO", stream=None) -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _cloud_logging_names,
            structlog.processors.JSONRenderer(sort_keys=False, default=str),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level.upper(), 20)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (grpc, google-api-core) stay quiet unless they warn.
    logging.basicConfig(level=logging.WARNING, stream=stream or sys.stderr)


def get(name: str = "relaunch", **bound):
    # get_logger stays lazy: the configuration is read at first use, not at import time.
    return structlog.get_logger(name, **bound)
