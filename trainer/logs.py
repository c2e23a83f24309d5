"""Structured JSON log lines (Cloud Logging field names: `severity`, `message`)."""

from __future__ import annotations

import logging
import os
import sys

import structlog

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


def _add_severity(_logger, method_name: str, event_dict: dict) -> dict:
    event_dict["severity"] = _SEVERITY.get(method_name, "DEFAULT")
    return event_dict


def configure(verbose: bool, **context) -> structlog.typing.FilteringBoundLogger:
    """One JSON object per line on stdout. Quiet processes (ranks other than 0) log warnings only."""
    structlog.configure(
        processors=[
            _add_severity,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO if verbose else logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )
    for key, env in (("job_id", "RELAUNCH_JOB_ID"), ("attempt", "RELAUNCH_ATTEMPT")):
        if os.environ.get(env):
            context.setdefault(key, os.environ[env])
    return structlog.get_logger().bind(**context)
