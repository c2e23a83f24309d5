"""Resource names of topics and subscriptions, checked the way Pub/Sub checks them."""

from __future__ import annotations

import re

import grpc

# Topic and subscription ids: 3-255 characters, start with a letter, then letters, digits and
# - _ . ~ + %; ids starting with "goog" are reserved by Google (case-sensitive: Google's emulator
# accepts "GOOGx", and the documentation names the lower-case prefix).
_ID = r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}"
_PROJECT = r"[^/]+"
TOPIC_NAME = re.compile(rf"^projects/({_PROJECT})/topics/({_ID})$")
SUBSCRIPTION_NAME = re.compile(rf"^projects/({_PROJECT})/subscriptions/({_ID})$")
PROJECT_NAME = re.compile(rf"^projects/({_PROJECT})$")

# What a subscription's topic reads as after its topic was deleted (as on the real service).
DELETED_TOPIC = "_deleted-topic_"


class PubSubError(Exception):
    """A failure the gRPC layer turns into a status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def not_found(what: str) -> PubSubError:
    return PubSubError(grpc.StatusCode.NOT_FOUND, f"Resource not found (resource={what}).")


def already_exists(what: str) -> PubSubError:
    return PubSubError(
        grpc.StatusCode.ALREADY_EXISTS, f"Resource already exists in the project (resource={what})."
    )


def invalid(message: str) -> PubSubError:
    return PubSubError(grpc.StatusCode.INVALID_ARGUMENT, message)


def out_of_range(field: str, given: int, low: int, high: int) -> PubSubError:
    """The real service's wording and code (Google's emulator answers the same) for a numeric
    field outside its bounds."""
    if given < low:
        return PubSubError(
            grpc.StatusCode.OUT_OF_RANGE,
            f"The value for {field} is too small. You passed {given} in the request, "
            f"but the minimum value is {low}.",
        )
    return PubSubError(
        grpc.StatusCode.OUT_OF_RANGE,
        f"The value for {field} is too large. You passed {given} in the request, "
        f"but the maximum value is {high}.",
    )


def _check(pattern: re.Pattern[str], name: str, kind: str) -> str:
    match = pattern.match(name or "")
    if not match:
        raise invalid(f"Invalid [{kind}] name: ({name})")
    resource_id = match.group(match.lastindex or 1)
    if kind != "projects" and resource_id.startswith("goog"):
        raise invalid(f"Invalid [{kind}] name: ({name}); ids must not start with 'goog'")
    return name


def check_topic(name: str) -> str:
    return _check(TOPIC_NAME, name, "topics")


def check_subscription(name: str) -> str:
    return _check(SUBSCRIPTION_NAME, name, "subscriptions")


def check_project(name: str) -> str:
    return _check(PROJECT_NAME, name, "projects")


def project_of(name: str) -> str:
    """`projects/p/topics/t` -> `projects/p`."""
    return "/".join(name.split("/")[:2])
