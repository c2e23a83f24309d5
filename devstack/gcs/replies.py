"""GCS-shaped JSON error replies."""

from __future__ import annotations

from http import HTTPStatus

PRECONDITION_MESSAGE = "At least one of the pre-conditions you specified did not hold."


def error(response, status: HTTPStatus, reason: str, message: str) -> None:
    response.status = status
    response.json(
        {
            "error": {
                "code": status.value,
                "message": message,
                "errors": [{"domain": "global", "reason": reason, "message": message}],
            }
        }
    )


def not_found(response, message: str = "Not Found") -> None:
    error(response, HTTPStatus.NOT_FOUND, "notFound", message)


def precondition_failed(response) -> None:
    error(response, HTTPStatus.PRECONDITION_FAILED, "conditionNotMet", PRECONDITION_MESSAGE)


def bad_request(response, message: str) -> None:
    error(response, HTTPStatus.BAD_REQUEST, "invalid", message)
