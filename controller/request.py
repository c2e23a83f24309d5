"""The job request format (v1): parsing, validation and the canonical form.

A request arrives as JSON (Pub/Sub) or YAML/JSON text (CLI files). The Relaunch part of it
(jobId, checkpoint, restartPolicy, labels) is checked with pydantic models; the `jobSpec` part is
a Vertex AI CustomJobSpec in REST form and is parsed with the Vertex client library's own types
(section "jobSpec" below), so every Vertex field is accepted and a typo is rejected by
the library's descriptors. Every problem is collected and reported with its field
path; nothing here ever lets a traceback reach the user.

Public API: `parse_request`, `JobRequest`, `CancelRequest`, `Problem`, `RequestInvalid`,
`request_json_schema`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml
from google.cloud import aiplatform_v1 as vertex
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel

from controller import labels as label_rules
from controller.core.policy import Backoff, RestartPolicy

MAX_REQUEST_BYTES = 1024 * 1024
MAX_DISPLAY_NAME_LENGTH = 100  # leaves room for " [attempt N]" within Vertex's 128
JOB_ID_PATTERN = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)

# Environment variables Relaunch sets on every container (docs/contracts.md). They always win over
# a user's value of the same name, and they count against Vertex's 100-entry limit.
RELAUNCH_ENV_NAMES = (
    "RELAUNCH_JOB_ID",
    "RELAUNCH_ATTEMPT",
    "RELAUNCH_CHECKPOINT_URI",
    "RELAUNCH_RESUME_FROM",
)
VERTEX_MAX_ENV = 100
MAX_USER_ENV = VERTEX_MAX_ENV - len(RELAUNCH_ENV_NAMES)


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: where (`field`, a path like `jobSpec.workerPoolSpecs[0]`)
    and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class RequestInvalid(Exception):
    """A request that cannot be accepted; `.problems` lists every reason found."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


_IDENTIFIER_RE = re.compile(r"[^.\[\]\"\s]+")  # keys that need no quoting in a path


def format_path(parts: tuple | list) -> str:
    """`("jobSpec", "workerPoolSpecs", 0, "replicaCount")` -> `jobSpec.workerPoolSpecs[0].replicaCount`."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER_RE.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(str(part))}]"
    return text or "request"


def short_repr(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it (JSON), cut short for one-line messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kind_of(value: Any) -> str:
    """The JSON name of a value's type, for messages like 'must be an object (got list)'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


# --------------------------------------------------------------------------- loading text


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and keeps dates as strings.

    A duplicated key silently dropping half of a job spec is the kind of surprise that costs a
    day of GPU time; dates would otherwise become datetime objects that JSON cannot carry.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: let the base class report it
                break
            if duplicate:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        return super().construct_mapping(node, deep=deep)


def _reject_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise RequestInvalid(
            [Problem("request", f"is not valid UTF-8 text (bad byte at offset {error.start})")]
        ) from None


def _load_text(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped:
        raise RequestInvalid([Problem("request", "is empty")])
    try:
        if stripped[0] in "{[":
            try:
                return json.loads(text, object_pairs_hook=_reject_duplicate_json_keys)
            except json.JSONDecodeError as error:
                raise RequestInvalid(
                    [
                        Problem(
                            "request",
                            f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}",
                        )
                    ]
                ) from None
            except ValueError as error:  # duplicate key
                raise RequestInvalid([Problem("request", f"invalid JSON: {error}")]) from None
        try:
            return yaml.load(text, Loader=_StrictYamlLoader)  # a SafeLoader subclass
        except yaml.YAMLError as error:
            raise RequestInvalid([Problem("request", _describe_yaml_error(error))]) from None
    except RecursionError:
        raise RequestInvalid([Problem("request", "is nested too deeply")]) from None


def _describe_yaml_error(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    detail = f"{problem} ({context})" if context else problem
    return f"invalid YAML{where}: {detail}"


def _count_nodes_within(document: Any, budget: int) -> bool:
    """True when the document has at most `budget` values. YAML aliases can make a small text
    expand into a huge (or cyclic) structure; this bounds the work before anything walks it."""
    pending = [document]
    seen = 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > budget:
            return False
        if isinstance(value, Mapping):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    return True


def _plain_document(document: Any) -> Any:
    """Re-encode as JSON so every later step sees plain dicts/lists/str/numbers, and measure it."""
    if not _count_nodes_within(document, budget=200_000):
        raise RequestInvalid([Problem("request", "expands to too many values (YAML aliases?)")])
    try:
        encoded = json.dumps(document, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError) as error:
        raise RequestInvalid([Problem("request", f"must contain only JSON values: {error}")]) from None
    except RecursionError:
        raise RequestInvalid([Problem("request", "is nested too deeply")]) from None
    if len(encoded.encode("utf-8")) > MAX_REQUEST_BYTES:
        raise RequestInvalid([Problem("request", f"is larger than {MAX_REQUEST_BYTES} bytes as JSON")])
    return json.loads(encoded)


def load_document(raw: bytes | str | Mapping) -> Any:
    """Text or mapping -> plain JSON-like value, with size, encoding and syntax errors as problems."""
    if isinstance(raw, Mapping):
        return _plain_document(raw)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw)
        if len(raw) > MAX_REQUEST_BYTES:
            raise RequestInvalid(
                [Problem("request", f"is {len(raw)} bytes; the limit is {MAX_REQUEST_BYTES} bytes (1 MiB)")]
            )
        raw = _decode(raw)
    if not isinstance(raw, str):
        raise RequestInvalid([Problem("request", f"must be text or an object (got {type(raw).__name__})")])
    size = len(raw.encode("utf-8", errors="surrogatepass"))
    if size > MAX_REQUEST_BYTES:
        raise RequestInvalid(
            [Problem("request", f"is {size} bytes; the limit is {MAX_REQUEST_BYTES} bytes (1 MiB)")]
        )
    return _plain_document(_load_text(raw))


# --------------------------------------------------------------------------- Relaunch fields


def _bucket_name_problem(bucket: str) -> str | None:
    """Cloud Storage bucket naming rules, the ones a typo is likely to break."""
    if not bucket:
        return "is missing the bucket name"
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*[a-z0-9]", bucket):
        return (
            f"bucket name {bucket!r} must use only lowercase letters, digits, '-', '_' and '.', "
            "and start and end with a letter or digit"
        )
    limit = 222 if "." in bucket else 63
    if not 3 <= len(bucket) <= limit:
        return f"bucket name {bucket!r} must be 3 to {limit} characters long"
    if any(len(part) > 63 for part in bucket.split(".")):
        return f"bucket name {bucket!r} has a dot-separated part longer than 63 characters"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        return f"bucket name {bucket!r} must not look like an IP address"
    if bucket.startswith("goog") or "google" in bucket:
        return f"bucket name {bucket!r} must not start with 'goog' or contain 'google'"
    return None


def checkpoint_uri_problem(uri: str, *, allow_local: bool) -> str | None:
    """Why `uri` cannot be a checkpoint root, or None when it can."""
    if any(ord(ch) < 32 for ch in uri):
        return "must not contain control characters"
    if uri.startswith("gs://"):
        bucket, _, prefix = uri[len("gs://") :].partition("/")
        bucket_problem = _bucket_name_problem(bucket)
        if bucket_problem:
            return bucket_problem
        prefix = prefix.rstrip("/")
        if not prefix:
            return (
                f"must name a folder inside the bucket (like gs://{bucket}/checkpoints/my-job), "
                "not the bucket root, so jobs never share checkpoints by accident"
            )
        if "//" in prefix:
            return "must not contain empty path segments ('//')"
        return None
    if uri.startswith("file://"):
        if not allow_local:
            return (
                "file:// URIs are accepted only for local runs (relaunch validate --local, "
                "RELAUNCH_ALLOW_LOCAL_CHECKPOINTS=true for the controller); use gs://bucket/prefix"
            )
        path = uri[len("file://") :].rstrip("/")
        if not path.startswith("/"):
            return f"must be an absolute local path like file:///abs/path (got {uri!r})"
        return None
    return f"must be a Cloud Storage URI like gs://bucket/prefix (got {short_repr(uri)})"


class _Strict(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=False,
        allow_inf_nan=False,
        frozen=True,
        field_title_generator=lambda name, info: to_camel(name),
        model_title_generator=lambda model: model.__name__.removesuffix("Model"),
    )


class BackoffModel(_Strict):
    """Delay between attempts: initialSeconds * multiplier^(k-1), capped at maxSeconds, with
    +/- jitter (a fraction)."""

    initial_seconds: float = Field(
        30.0, ge=0, description="Delay before the first retry (0 = resubmit at once)."
    )
    multiplier: float = Field(2.0, ge=1, description="Growth factor per retry (>= 1).")
    max_seconds: float = Field(1800.0, ge=0, description="Upper bound of any delay (>= initialSeconds).")
    jitter: float = Field(0.2, ge=0, lt=1, description="Random spread as a fraction, 0 <= jitter < 1.")

    @field_validator("max_seconds")
    @classmethod
    def _max_not_below_initial(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("initial_seconds")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= initialSeconds ({initial:g}) (got {value:g})")
        return value


class RestartPolicyModel(_Strict):
    """What Relaunch may do when an attempt ends without success."""

    max_failures: int = Field(3, ge=0, description="Non-preemption failures that may be retried.")
    max_preemptions: int | None = Field(
        None, ge=0, description="Preemptions that may be retried; null = unlimited."
    )
    backoff: BackoffModel = Field(default_factory=BackoffModel)
    crash_loop_attempts: int = Field(
        3, ge=1, description="Give up after this many consecutive attempts without checkpoint progress."
    )
    on_demand_after_preemptions: int | None = Field(
        None, ge=1, description="Switch scheduling to ON_DEMAND after this many preemptions; null = never."
    )

    def to_policy(self) -> RestartPolicy:
        backoff = self.backoff
        return RestartPolicy(
            max_failures=self.max_failures,
            max_preemptions=self.max_preemptions,
            backoff=Backoff(
                initial_seconds=float(backoff.initial_seconds),
                multiplier=float(backoff.multiplier),
                max_seconds=float(backoff.max_seconds),
                jitter=float(backoff.jitter),
            ),
            crash_loop_attempts=self.crash_loop_attempts,
            on_demand_after_preemptions=self.on_demand_after_preemptions,
        )


class CheckpointModel(_Strict):
    uri: str = Field(
        description="Checkpoint root of this job: gs://bucket/prefix (file:///abs/path for local runs).",
        json_schema_extra={"pattern": "^(gs://[a-z0-9][a-z0-9._-]*[a-z0-9]/.+|file:///.+)$"},
    )

    @field_validator("uri")
    @classmethod
    def _valid_uri(cls, value: str, info: ValidationInfo) -> str:
        allow_local = bool((info.context or {}).get("allow_local_checkpoints"))
        problem = checkpoint_uri_problem(value, allow_local=allow_local)
        if problem:
            raise ValueError(problem)
        return value.rstrip("/") if value.rstrip("/") not in ("gs:", "file:") else value


def _check_job_id(value: str) -> str:
    if not _JOB_ID_RE.fullmatch(value):
        raise ValueError(
            "must be 1-63 characters of lowercase letters, digits and '-', start with a letter "
            f"and not end with '-' (got {short_repr(value)})"
        )
    return value


def _check_label_key(key: str) -> str:
    problem = label_rules.label_key_problem(key)
    if problem:
        raise ValueError(problem)
    return key


def _check_label_value(value: str) -> str:
    problem = label_rules.label_value_problem(value)
    if problem:
        raise ValueError(problem)
    return value


JobId = Annotated[
    str, AfterValidator(_check_job_id), Field(json_schema_extra={"pattern": f"^{JOB_ID_PATTERN}$"})
]
LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]


class JobRequestModel(_Strict):
    """A Relaunch job request (v1)."""

    job_id: JobId = Field(
        description="Idempotency key and name of the job; also the value of the relaunch-job label."
    )
    display_name: str | None = Field(
        None,
        description="Human-readable name; Relaunch appends ' [attempt N]'.",
        max_length=MAX_DISPLAY_NAME_LENGTH,
    )
    job_spec: dict[str, Any] = Field(
        description=(
            "A Vertex AI CustomJobSpec in REST (camelCase JSON) form, exactly what "
            "`gcloud ai custom-jobs create --config` takes. Validated with the Vertex client library."
        ),
        json_schema_extra={
            "$comment": "https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec"
        },
    )
    checkpoint: CheckpointModel
    restart_policy: RestartPolicyModel = Field(default_factory=RestartPolicyModel)
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description=(
            f"Vertex labels, at most {label_rules.MAX_USER_LABELS}; keys relaunch-job, relaunch-attempt "
            "and managed-by are reserved."
        ),
        json_schema_extra={
            "maxProperties": label_rules.MAX_USER_LABELS,
            "propertyNames": {
                "pattern": "^[a-z][a-z0-9_-]{0,62}$",
                "not": {"enum": list(label_rules.RESERVED_LABEL_KEYS)},
            },
            "additionalProperties": {"type": "string", "pattern": "^[a-z0-9_-]{0,63}$"},
        },
    )

    @field_validator("display_name")
    @classmethod
    def _display_name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank (omit it to use the jobId)")
        return value

    @field_validator("labels")
    @classmethod
    def _not_too_many_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > label_rules.MAX_USER_LABELS:
            raise ValueError(
                f"at most {label_rules.MAX_USER_LABELS} labels: Vertex allows "
                f"{label_rules.VERTEX_MAX_LABELS} and Relaunch adds 3 of its own (got {len(value)})"
            )
        return value


class CancelRequestModel(_Strict):
    """Stop a job: cancel its running attempt and never resubmit it."""

    job_id: JobId
    action: Literal["cancel"]


def request_json_schema() -> dict:
    """JSON Schema of a request (job or cancel), as committed in docs/request-schema.json."""
    schema = TypeAdapter(JobRequestModel | CancelRequestModel).json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://relaunch.dev/schemas/request-v1.json",
        "title": "Relaunch request (v1)",
        "description": (
            "A job request or a cancel request. jobSpec is a Vertex AI CustomJobSpec in REST form; "
            "its contents are checked by the Vertex client library, not by this schema."
        ),
        **schema,
    }


def _allowed_field_names(model: type[BaseModel] | None, parent: tuple) -> list[str]:
    """Aliases accepted at `parent` (a pydantic loc) inside `model`; [] when not a model there."""
    for part in parent:
        if model is None:
            return []
        match = next((f for name, f in model.model_fields.items() if (f.alias or name) == part), None)
        annotation = match.annotation if match else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def unknown_field_reason(name: Any, allowed: list[str], owner: str = "") -> str:
    """'unknown field' plus the nearest allowed name, or the whole list when none is near."""
    text = f"unknown field of {owner}" if owner else "unknown field"
    if not allowed:
        return text
    close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6)
    if close:
        return f"{text}; did you mean {close[0]!r}?"
    return f"{text}; allowed: {', '.join(allowed)}"


_PYDANTIC_WORDS = (
    ("Input should be a valid dictionary", "must be an object"),
    ("Input should be a valid integer", "must be an integer"),
    ("Input should be a valid number", "must be a number"),
    ("Input should be a valid string", "must be a string"),
    ("Input should be a valid boolean", "must be true or false"),
    ("Input should be", "must be"),
    ("String should have", "must have"),
)


def _problems_from_pydantic(error: ValidationError, model: type[BaseModel]) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        kind = item["type"]
        if loc and loc[-1] == "[key]":  # the key itself is wrong (e.g. not a string)
            loc = loc[:-1]
        if kind == "extra_forbidden":
            reason = unknown_field_reason(loc[-1], _allowed_field_names(model, loc[:-1]))
        elif kind == "missing":
            reason = "required field is missing"
        elif kind == "value_error":
            reason = str(item["ctx"]["error"])
        elif kind == "literal_error" and loc == ("action",):
            reason = f"must be 'cancel', the only action (got {short_repr(item['input'])})"
        else:
            message = item["msg"]
            for library_words, our_words in _PYDANTIC_WORDS:
                message = message.replace(library_words, our_words)
            message = message[0].lower() + message[1:]
            reason = f"{message} (got {short_repr(item['input'])})"
        problems.append(Problem(format_path(loc), reason))
    return problems


# --------------------------------------------------------------------------- jobSpec (Vertex)
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


# --------------------------------------------------------------------------- parsed requests


@dataclass(frozen=True)
class CancelRequest:
    """`{jobId, action: cancel}`: stop the job for good."""

    job_id: str

    def to_json(self) -> dict:
        return {"jobId": self.job_id, "action": "cancel"}


@dataclass(frozen=True)
class JobRequest:
    """A valid job request. `job_spec` is shared, never mutate it (render copies it first)."""

    job_id: str
    display_name: str | None
    job_spec: Any = field(repr=False)  # google.cloud.aiplatform_v1.CustomJobSpec
    job_spec_rest: dict = field(compare=False, repr=False)  # as the user wrote it
    checkpoint_uri: str
    restart_policy: RestartPolicy
    labels: dict[str, str]

    def to_json(self) -> dict:
        """Canonical camelCase form; `parse_request` accepts it back and yields an equal request."""
        policy = self.restart_policy
        document = {"jobId": self.job_id}
        if self.display_name is not None:
            document["displayName"] = self.display_name
        document["jobSpec"] = spec_to_rest(self.job_spec)
        document["checkpoint"] = {"uri": self.checkpoint_uri}
        document["restartPolicy"] = {
            "maxFailures": policy.max_failures,
            "maxPreemptions": policy.max_preemptions,
            "backoff": {
                "initialSeconds": float(policy.backoff.initial_seconds),
                "multiplier": float(policy.backoff.multiplier),
                "maxSeconds": float(policy.backoff.max_seconds),
                "jitter": float(policy.backoff.jitter),
            },
            "crashLoopAttempts": policy.crash_loop_attempts,
            "onDemandAfterPreemptions": policy.on_demand_after_preemptions,
        }
        document["labels"] = dict(sorted(self.labels.items()))
        return document

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON: equal for the same request however it was spelled
        (key order, defaults written out or not), different when anything meaningful changes."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def parse_request(
    raw: bytes | str | Mapping, *, allow_local_checkpoints: bool = False
) -> JobRequest | CancelRequest:
    """Parse and validate a job or cancel request; raise `RequestInvalid` listing every problem.

    Text is JSON when it starts with `{` or `[`, YAML otherwise. `allow_local_checkpoints`
    admits `file:///abs/path` checkpoint URIs (local runs only; production must leave it off).
    """
    document = load_document(raw)
    if not isinstance(document, dict):
        raise RequestInvalid(
            [
                Problem(
                    "request",
                    f"must be an object with fields such as jobId and jobSpec (got {kind_of(document)})",
                )
            ]
        )
    if "action" in document:
        return _parse_cancel(document)
    return _parse_job(document, allow_local_checkpoints)


def _parse_cancel(document: dict) -> CancelRequest:
    try:
        model = CancelRequestModel.model_validate(document)
    except ValidationError as error:
        problems = []
        for problem in _problems_from_pydantic(error, CancelRequestModel):
            if problem.reason.startswith("unknown field"):
                problem = Problem(problem.field, "not allowed in a cancel request (only jobId and action)")
            problems.append(problem)
        raise RequestInvalid(problems) from None
    return CancelRequest(job_id=model.job_id)


def _parse_job(document: dict, allow_local_checkpoints: bool) -> JobRequest:
    problems: list[Problem] = []
    model = None
    try:
        model = JobRequestModel.model_validate(
            document, context={"allow_local_checkpoints": allow_local_checkpoints}
        )
    except ValidationError as error:
        problems.extend(_problems_from_pydantic(error, JobRequestModel))

    spec = None
    spec_rest = document.get("jobSpec")
    if isinstance(spec_rest, dict):
        spec, spec_problems = parse_job_spec(spec_rest, path=("jobSpec",))
        problems.extend(spec_problems)

    if problems or model is None or spec is None:
        raise RequestInvalid(problems or [Problem("request", "is not a valid job request")])
    return JobRequest(
        job_id=model.job_id,
        display_name=model.display_name,
        job_spec=spec,
        job_spec_rest=spec_rest,
        checkpoint_uri=model.checkpoint.uri,
        restart_policy=model.restart_policy.to_policy(),
        labels=dict(model.labels),
    )


if __name__ == "__main__":  # python -m controller.request > docs/request-schema.json
    print(json.dumps(request_json_schema(), indent=2))
