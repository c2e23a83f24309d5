"""The `jobSpec` part: a Vertex AI CustomJobSpec in REST form, walked with the Vertex library's own descriptors so every
Vertex field is accepted and every typo rejected, plus Vertex's submit-time rules."""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from controller.request.aiplatform import aiplatform_v1 as vertex
from controller.request.fields import unknown_field_reason
from controller.request.limits import MAX_USER_ENV, RELAUNCH_ENV_NAMES, VERTEX_MAX_ENV
from controller.request.problems import Problem, format_path, kind_of, short_repr

#
# The Vertex library's descriptors decide what a field is and whether a value fits it; this code
# only walks the document so that every problem is found (the library stops at the first) and
# reported with its exact path and a readable reason.

_INTEGER_TYPES = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_WELL_KNOWN_TYPES = {
    "google.protobuf.Duration": 'a duration in seconds like "3600s"',
    "google.protobuf.Timestamp": 'an RFC 3339 timestamp like "2026-01-01T00:00:00Z"',
    "google.protobuf.Struct": "an object",
    "google.protobuf.Value": "a JSON value",
    "google.protobuf.FieldMask": 'a comma-separated list of field paths like "a,b.c"',
}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_WORKER_POOLS = 4


def _expected(field: FieldDescriptor) -> str:
    """What a value of `field` must look like, in words."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        return "one of " + ", ".join(value.name for value in field.enum_type.values)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true or false"
    if field.type in _INTEGER_TYPES:
        return "an integer"
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return "a number"
    if field.type == FieldDescriptor.TYPE_STRING:
        return "a string"
    if field.type == FieldDescriptor.TYPE_BYTES:
        return "base64-encoded bytes"
    name = field.message_type.full_name
    return _WELL_KNOWN_TYPES.get(name, f"a valid {name.rsplit('.', 1)[-1]}")


def _is_leaf(field: FieldDescriptor) -> bool:
    """Scalars, enums, maps and google.protobuf types: values the library checks in one piece."""
    message = field.message_type
    return (
        message is None or message.GetOptions().map_entry or message.full_name.startswith("google.protobuf.")
    )


_INVALID = object()  # marks a value the walk rejected and left out of the cleaned copy


def _leaf_is_valid(
    owner: Descriptor, field: FieldDescriptor, key: str, value: Any, path: tuple, problems: list[Problem]
) -> bool:
    scratch = message_factory.GetMessageClass(owner)()
    try:
        json_format.ParseDict({key: value}, scratch)
    except Exception:  # the library is the judge; it also raises OverflowError etc. for odd values
        shown = value[0] if isinstance(value, list) and len(value) == 1 else value
        problems.append(Problem(format_path(path), f"must be {_expected(field)} (got {short_repr(shown)})"))
        return False
    return True


def _walk_field(
    owner: Descriptor, field: FieldDescriptor, key: str, value: Any, path: tuple, problems: list[Problem]
) -> Any:
    """The value with its invalid parts removed, or _INVALID; problems are appended."""
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    if field.is_repeated and not is_map:
        if not isinstance(value, list):
            problems.append(Problem(format_path(path), f"must be a list (got {kind_of(value)})"))
            return _INVALID
        cleaned = []
        for index, item in enumerate(value):
            if _is_leaf(field):
                if _leaf_is_valid(owner, field, key, [item], (*path, index), problems):
                    cleaned.append(item)
            else:
                # An invalid element stays as {} so later rules still see the same indexes.
                cleaned.append(_walk_message(item, field.message_type, (*path, index), problems) or {})
        return cleaned
    if _is_leaf(field):
        return value if _leaf_is_valid(owner, field, key, value, path, problems) else _INVALID
    cleaned = _walk_message(value, field.message_type, path, problems)
    return _INVALID if cleaned is None else cleaned


def _walk_message(value: Any, descriptor: Descriptor, path: tuple, problems: list[Problem]) -> dict | None:
    """Check `value` against a Vertex message type, appending every problem found, and return a
    copy without the invalid parts (None when `value` is not an object at all), so that the
    submit-time rules can still look at everything that is valid."""
    if not isinstance(value, dict):
        problems.append(Problem(format_path(path), f"must be an object (got {kind_of(value)})"))
        return None
    # The library accepts both the JSON (camelCase) and the proto (snake_case) spelling.
    fields = {f.json_name: f for f in descriptor.fields} | {f.name: f for f in descriptor.fields}
    used_keys: dict[str, str] = {}
    oneof_keys: dict[str, str] = {}
    cleaned: dict[str, Any] = {}
    for key, item in value.items():
        here = (*path, key)
        field = fields.get(key)
        if field is None:
            allowed = [f.json_name for f in descriptor.fields]
            problems.append(
                Problem(
                    format_path(here), unknown_field_reason(key, allowed, owner=f"Vertex {descriptor.name}")
                )
            )
            continue
        if field.name in used_keys:
            problems.append(Problem(format_path(here), f"given twice (as {used_keys[field.name]} and {key})"))
            continue
        used_keys[field.name] = key
        if item is None:  # JSON null means "not set" to the library
            continue
        oneof = field.containing_oneof
        if oneof is not None:
            if oneof.name in oneof_keys:
                problems.append(
                    Problem(
                        format_path(here),
                        f"cannot be set together with {oneof_keys[oneof.name]} (choose one)",
                    )
                )
                continue
            oneof_keys[oneof.name] = key
        result = _walk_field(descriptor, field, key, item, here, problems)
        if result is not _INVALID:
            cleaned[key] = result
    return cleaned


def _within(field_path: str, reported: set[str]) -> bool:
    """True when `field_path` is, or lies inside, a path that already has a problem."""
    return any(
        field_path == other or field_path.startswith(other + ".") or field_path.startswith(other + "[")
        for other in reported
    )


def _library_reason(error: Exception) -> str:
    """The library's message without its nested 'Failed to parse X field:' wrapping."""
    text = str(error).splitlines()[0]
    text = re.sub(r"Failed to parse \w+ field: ", "", text)
    text = re.sub(r" at \"?[\w.\[\]]+\"?\.*$", "", text)
    return text.rstrip(".") or "is not a valid Vertex CustomJobSpec"


def _env_problems(env: Any, path: tuple) -> list[Problem]:
    problems = []
    user_entries = [entry for entry in env if entry.name not in RELAUNCH_ENV_NAMES]
    if len(user_entries) > MAX_USER_ENV:
        problems.append(
            Problem(
                format_path(path),
                (
                    f"at most {MAX_USER_ENV} entries: Vertex allows {VERTEX_MAX_ENV} and Relaunch adds "
                    f"{len(RELAUNCH_ENV_NAMES)} RELAUNCH_* variables (got {len(user_entries)})"
                ),
            )
        )
    for index, entry in enumerate(env):
        if not _ENV_NAME_RE.fullmatch(entry.name):
            problems.append(
                Problem(
                    format_path((*path, index, "name")),
                    f"must be a variable name of letters, digits and '_' not starting with a digit "
                    f"(got {short_repr(entry.name)})",
                )
            )
    return problems


def _pool_problems(pool: Any, index: int, path: tuple) -> list[Problem]:
    problems = []
    if pool.ByteSize() == 0:  # `{}` placeholder: Vertex skips the pool
        if index == 0:
            problems.append(Problem(format_path(path), "the chief pool (pool 0) must not be empty"))
        return problems
    count = pool.replica_count
    if index == 0 and count != 1:
        problems.append(
            Problem(format_path((*path, "replicaCount")), f"must be 1 for the chief pool (got {count})")
        )
    elif index > 0 and count < 1:
        problems.append(
            Problem(
                format_path((*path, "replicaCount")),
                f"must be at least 1 for a non-empty pool (got {count}); write {{}} to leave the pool out",
            )
        )
    task = pool.WhichOneof("task")
    if task is None:
        problems.append(
            Problem(format_path(path), "needs a containerSpec with an imageUri (or a pythonPackageSpec)")
        )
    elif task == "container_spec":
        if not pool.container_spec.image_uri:
            problems.append(Problem(format_path((*path, "containerSpec", "imageUri")), "is required"))
        problems.extend(_env_problems(pool.container_spec.env, (*path, "containerSpec", "env")))
    else:
        package = pool.python_package_spec
        package_path = (*path, "pythonPackageSpec")
        if not package.executor_image_uri:
            problems.append(Problem(format_path((*package_path, "executorImageUri")), "is required"))
        if not package.package_uris:
            problems.append(
                Problem(format_path((*package_path, "packageUris")), "needs at least one package URI")
            )
        if not package.python_module:
            problems.append(Problem(format_path((*package_path, "pythonModule")), "is required"))
        problems.extend(_env_problems(package.env, (*package_path, "env")))
    machine = pool.machine_spec
    if not machine.machine_type:
        problems.append(
            Problem(format_path((*path, "machineSpec", "machineType")), "is required (e.g. a3-highgpu-8g)")
        )
    if machine.accelerator_count > 0 and not machine.accelerator_type:
        problems.append(
            Problem(
                format_path((*path, "machineSpec", "acceleratorType")),
                f"is required when acceleratorCount is set (got acceleratorCount {machine.accelerator_count})",
            )
        )
    return problems


def _vertex_rules(spec: Any, path: tuple) -> list[Problem]:
    """What Vertex would reject at submit time although the types allow it."""
    pools_path = (*path, "workerPoolSpecs")
    pools = spec.worker_pool_specs
    if not pools:
        return [
            Problem(format_path(pools_path), "at least one worker pool is required (pool 0 runs the chief)")
        ]
    problems = []
    if len(pools) > MAX_WORKER_POOLS:
        problems.append(
            Problem(
                format_path(pools_path),
                (
                    f"at most {MAX_WORKER_POOLS} worker pools (chief, workers, parameter servers, evaluators) "
                    f"(got {len(pools)})"
                ),
            )
        )
    for index, pool in enumerate(pools):
        problems.extend(_pool_problems(pool, index, (*pools_path, index)))
    return problems


def parse_job_spec(rest: dict, path: tuple = ("jobSpec",)) -> tuple[Any, list[Problem]]:
    """A CustomJobSpec REST dict -> (aiplatform_v1.CustomJobSpec, []) or (None, problems)."""
    message = vertex.CustomJobSpec.pb()()
    try:
        # Most documents are valid: one pass of the library settles it (the walk costs a parse
        # per leaf). A document the library takes whole has nothing the walk would report.
        json_format.ParseDict(rest, message)
    except Exception:  # the library is the judge; the walk names every problem
        return _parse_with_walk(rest, path)
    problems = _vertex_rules(message, path)
    if problems:
        return None, problems
    return vertex.CustomJobSpec.wrap(message), []


def _parse_with_walk(rest: dict, path: tuple) -> tuple[Any, list[Problem]]:
    problems: list[Problem] = []
    cleaned = _walk_message(rest, vertex.CustomJobSpec.pb().DESCRIPTOR, path, problems)
    message = vertex.CustomJobSpec.pb()()
    try:
        json_format.ParseDict(cleaned or {}, message)
    except Exception as error:
        # The walk should have caught it; keep the library's word as the last line of defence.
        return None, problems + [Problem(format_path(path), _library_reason(error))]
    # Rules about parts that were already reported (and left out) would only repeat the news.
    reported = {problem.field for problem in problems}
    problems += [rule for rule in _vertex_rules(message, path) if not _within(rule.field, reported)]
    if problems:
        return None, problems
    # Parse the document as given (not the cleaned copy) so nothing can differ from the user's input.
    message = vertex.CustomJobSpec.pb()()
    json_format.ParseDict(rest, message)
    return vertex.CustomJobSpec.wrap(message), []


def spec_to_rest(spec: Any) -> dict:
    """aiplatform_v1.CustomJobSpec -> REST (camelCase) dict, as Vertex shows it."""
    return json_format.MessageToDict(vertex.CustomJobSpec.pb(spec))
