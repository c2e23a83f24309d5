"""The Relaunch part of a request (jobId, checkpoint, restartPolicy, labels), checked with pydantic models."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal, get_args

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

from controller.core.adaptive_interval import DEFAULT_MAX_SECONDS, DEFAULT_MIN_SECONDS, IntervalSetting
from controller.core.elastic import (
    DEFAULT_SHRINK_AFTER_SECONDS,
    GROW_AFTER,
    GROW_EVERY_ATTEMPT,
    GROW_NEVER,
)
from controller.core.policy import RestartPolicy
from controller.request import labels as label_rules
from controller.request.limits import JOB_ID_PATTERN, JOB_ID_RE, MAX_DISPLAY_NAME_LENGTH
from controller.request.problems import Problem, format_path, short_repr


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


# Cloud Storage object names are at most 1,024 bytes of UTF-8; the trainer appends its own names
# (step folders, shard files, exit records) below the root, so the root keeps room for them.
MAX_OBJECT_NAME_BYTES = 1024
RESERVED_SUFFIX_BYTES = 124
MAX_CHECKPOINT_PREFIX_BYTES = MAX_OBJECT_NAME_BYTES - RESERVED_SUFFIX_BYTES
# Characters Cloud Storage advises against in object names: they break URLs and wildcards.
_ODD_OBJECT_CHARACTERS = "?#[]*"
_ODD_OBJECT_CHARACTER = re.compile("[" + re.escape(_ODD_OBJECT_CHARACTERS) + "\x7f]")


def _object_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot start the names of checkpoint objects, or None."""
    size = len(prefix.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CHECKPOINT_PREFIX_BYTES:
        return (
            f"object prefix must be at most {MAX_CHECKPOINT_PREFIX_BYTES} bytes: Cloud Storage names "
            f"are at most {MAX_OBJECT_NAME_BYTES} bytes and Relaunch appends up to "
            f"{RESERVED_SUFFIX_BYTES} (got {size})"
        )
    odd = sorted(set(_ODD_OBJECT_CHARACTER.findall(prefix)))
    if odd:
        return f"must not contain {', '.join(repr(ch) for ch in odd)} (Cloud Storage advises against them)"
    if any(segment in (".", "..") for segment in prefix.split("/")):
        return "must not contain '.' or '..' path segments"
    return None


_CONTROL_CHARACTER = re.compile("[\x00-\x1f]")  # below a space: one pass in C, not a loop per character


def checkpoint_uri_problem(uri: str, *, allow_local: bool) -> str | None:
    """Why `uri` cannot be a checkpoint root, or None when it can."""
    if _CONTROL_CHARACTER.search(uri):
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
        return _object_prefix_problem(prefix)
    if uri.startswith("file://"):
        if not allow_local:
            return (
                "file:// URIs are accepted only for local runs (relaunch validate --local, "
                "RELAUNCH_ALLOW_LOCAL_CHECKPOINTS=true for the controller); use gs://bucket/prefix"
            )
        path = uri[len("file://") :].rstrip("/")
        if not path.startswith("/"):
            return f"must be an absolute local path like file:///abs/path (got {uri!r})"
        if any(segment in (".", "..") for segment in path.split("/")):
            return "must not contain '.' or '..' path segments"
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


# Upper bounds of every number a request carries. A delay beyond a day parks a job for so long
# that nobody would notice it waiting; a budget beyond a thousand attempts is a typo, not a plan.
MAX_BACKOFF_SECONDS = 86400.0
MAX_BACKOFF_MULTIPLIER = 100.0
MAX_BUDGET = 1000


class BackoffModel(_Strict):
    """Delay between attempts: initialSeconds * multiplier^(k-1), capped at maxSeconds, with
    +/- jitter (a fraction)."""

    initial_seconds: float = Field(
        30.0,
        ge=0,
        le=MAX_BACKOFF_SECONDS,
        description="Delay before the first retry (0 = resubmit at once), at most one day.",
    )
    multiplier: float = Field(
        2.0, ge=1, le=MAX_BACKOFF_MULTIPLIER, description="Growth factor per retry (1 to 100)."
    )
    max_seconds: float = Field(
        1800.0,
        ge=0,
        le=MAX_BACKOFF_SECONDS,
        description="Upper bound of any delay (>= initialSeconds), at most one day.",
    )
    jitter: float = Field(0.2, ge=0, lt=1, description="Random spread as a fraction, 0 <= jitter < 1.")

    @field_validator("max_seconds")
    @classmethod
    def _max_not_below_initial(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("initial_seconds")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= initialSeconds ({initial:g}) (got {value:g})")
        return value


class FallbackModel(_Strict):
    """After a stockout before start that lasts, ask for another scheduling strategy."""

    strategy: Literal["STANDARD", "FLEX_START"] = Field(
        description="The strategy to fall back to: STANDARD (on-demand) or FLEX_START (Dynamic "
        "Workload Scheduler).",
    )
    after: Any = Field(
        description=(
            "How long attempts may be refused for capacity before they start (Vertex's stockout "
            "ending, or creates refused for quota) before the next one asks for the fallback: "
            "seconds, or '90s', '15m', '2h' (1 s to 30 days)."
        ),
        json_schema_extra={"type": ["number", "string"]},
    )

    @field_validator("after")
    @classmethod
    def _valid_after(cls, value: Any) -> Any:
        parse_duration(value, "after")
        return value

    @property
    def after_seconds(self) -> float:
        return parse_duration(self.after, "after")


class RestartPolicyModel(_Strict):
    """What Relaunch may do when an attempt ends without success."""

    max_failures: int = Field(
        3, ge=0, le=MAX_BUDGET, description="Non-preemption failures that may be retried (at most 1000)."
    )
    max_preemptions: int | None = Field(
        None,
        ge=0,
        le=MAX_BUDGET,
        description="Preemptions that may be retried (at most 1000); null = unlimited.",
    )
    backoff: BackoffModel = Field(default_factory=BackoffModel)
    crash_loop_attempts: int = Field(
        3,
        ge=1,
        le=MAX_BUDGET,
        description="Give up after this many consecutive attempts without checkpoint progress.",
    )
    on_demand_after_preemptions: int | None = Field(
        None,
        ge=1,
        le=MAX_BUDGET,
        description="Switch scheduling to ON_DEMAND after this many preemptions; null = never.",
    )
    on_no_usable_checkpoint: Literal["fail", "restartFromScratch"] = Field(
        "fail",
        description="When the trainer can load no checkpoint under the job's root (data loss, always "
        "alerted): fail the job (default), or restart training from step 0.",
    )

    fallback_after_stockout: FallbackModel | None = Field(
        None,
        description="After a stockout before start that lasted `after`, later attempts ask for "
        "`strategy` instead (they keep it); null = stay on the jobSpec's strategy.",
    )

    def to_policy(self) -> RestartPolicy:
        # The model's fields are the policy's fields (the fallback flattened), so the snake_case
        # dump is its stored form.
        data = self.model_dump(exclude={"fallback_after_stockout"})
        fallback = self.fallback_after_stockout
        if fallback is not None:
            data |= {"fallback_strategy": fallback.strategy, "fallback_after_seconds": fallback.after_seconds}
        return RestartPolicy.from_dict(data)


# Bounds of `checkpoint.interval` (fixed seconds, and auto's min/max).
MIN_INTERVAL_SECONDS = 1.0
MAX_INTERVAL_SECONDS = 30 * 86400.0
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_INTERVAL_SCHEMA: dict[str, Any] = {
    "description": (
        "How often the trainer checkpoints (RELAUNCH_CHECKPOINT_INTERVAL_SECONDS in every pool's "
        "container). 'auto': learned per attempt from observed reclaims and measured checkpoint cost; "
        "{mode: auto, min, max} bounds it (durations: seconds, or '90s', '15m', '2h', '1d'); a number: "
        "fixed seconds. Omit it to leave the trainer's own flags in charge."
    ),
    "oneOf": [
        {"const": "auto"},
        {"type": "number", "minimum": MIN_INTERVAL_SECONDS, "maximum": MAX_INTERVAL_SECONDS},
        {
            "type": "object",
            "properties": {
                "mode": {"const": "auto"},
                "min": {"type": ["number", "string"]},
                "max": {"type": ["number", "string"]},
            },
            "required": ["mode"],
            "additionalProperties": False,
        },
    ],
}


def parse_duration(value: Any, what: str) -> float:
    """Seconds from a number or a '90s' / '15m' / '2h' / '1d' string; ValueError saying why not."""
    if isinstance(value, bool):
        raise ValueError(
            f"{what} must be a duration like 600, '90s', '15m' or '2h' (got {short_repr(value)})"
        )
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and _DURATION_RE.match(value):
        number, unit = _DURATION_RE.match(value).groups()  # type: ignore[union-attr]
        seconds = float(number) * _DURATION_UNITS[unit]
    else:
        raise ValueError(
            f"{what} must be a duration like 600, '90s', '15m' or '2h' (got {short_repr(value)})"
        )
    if not (MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS):
        raise ValueError(
            f"{what} must be between {MIN_INTERVAL_SECONDS:g} s and 30 days (got {short_repr(value)})"
        )
    return seconds


def parse_interval(value: Any) -> IntervalSetting | None:
    """`checkpoint.interval` as written: 'auto', seconds, or {mode: auto, min, max}."""
    if value is None:
        return None
    if value == "auto" and isinstance(value, str):
        return IntervalSetting(auto=True)
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"mode", "min", "max"})
        if unknown:
            raise ValueError(
                f"unknown field {unknown[0]!r}; allowed: mode, min, max (e.g. {{mode: auto, min: 5m, max: 4h}})"
            )
        if value.get("mode") != "auto":
            raise ValueError(f"mode must be 'auto' (got {short_repr(value.get('mode'))})")
        low = (
            parse_duration(value["min"], "min")
            if "min" in value
            else min(DEFAULT_MIN_SECONDS, _max_of(value))
        )
        high = parse_duration(value["max"], "max") if "max" in value else max(DEFAULT_MAX_SECONDS, low)
        if low > high:
            raise ValueError(f"min ({low:g} s) must not exceed max ({high:g} s)")
        return IntervalSetting(auto=True, min_seconds=low, max_seconds=high)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return IntervalSetting(auto=False, fixed_seconds=parse_duration(value, "a fixed interval"))
    if isinstance(value, str) and _DURATION_RE.match(value):
        return IntervalSetting(auto=False, fixed_seconds=parse_duration(value, "a fixed interval"))
    raise ValueError(
        "must be 'auto', {mode: auto, min: ..., max: ...}, or a fixed number of seconds "
        f"(got {short_repr(value)})"
    )


def _max_of(value: dict[str, Any]) -> float:
    return parse_duration(value["max"], "max") if "max" in value else DEFAULT_MAX_SECONDS


class CheckpointModel(_Strict):
    uri: str = Field(
        description="Checkpoint root of this job: gs://bucket/prefix (file:///abs/path for local runs).",
        json_schema_extra={"pattern": "^(gs://[a-z0-9][a-z0-9._-]*[a-z0-9]/.+|file:///.+)$"},
    )
    interval: Any = Field(None, json_schema_extra=_INTERVAL_SCHEMA)

    @field_validator("interval")
    @classmethod
    def _valid_interval(cls, value: Any) -> Any:
        parse_interval(value)  # raises ValueError with the reason
        return value

    @property
    def interval_setting(self) -> IntervalSetting | None:
        return parse_interval(self.interval)

    @field_validator("uri")
    @classmethod
    def _valid_uri(cls, value: str, info: ValidationInfo) -> str:
        allow_local = bool((info.context or {}).get("allow_local_checkpoints"))
        problem = checkpoint_uri_problem(value, allow_local=allow_local)
        if problem:
            raise ValueError(problem)
        return value.rstrip("/") if value.rstrip("/") not in ("gs:", "file:") else value


_GROW_BACK_RE = re.compile(r"^after:(.+)$")


def parse_grow_back(value: Any) -> tuple[str, float | None]:
    """`elastic.growBack`: 'everyAttempt', 'never' or 'after:<duration>' -> (mode, seconds)."""
    if value in (GROW_EVERY_ATTEMPT, GROW_NEVER) and isinstance(value, str):
        return value, None
    if isinstance(value, str):
        match = _GROW_BACK_RE.match(value.strip())
        if match:
            return GROW_AFTER, parse_duration(match.group(1).strip(), "the time in 'after:'")
    raise ValueError(
        f"must be 'everyAttempt', 'never' or 'after:<duration>' like 'after:2h' (got {short_repr(value)})"
    )


class ElasticModel(_Strict):
    """When a job whose pools set `minReplicaCount` runs smaller than requested, and grows back."""

    shrink_after: Any = Field(
        DEFAULT_SHRINK_AFTER_SECONDS,
        description=(
            "How long an attempt may wait for capacity (Vertex shows it QUEUED or PENDING) before it "
            "is replaced by one at the pools' minReplicaCount: seconds, or '90s', '15m', '2h'. "
            "An attempt that Vertex ends with a stockout before it ran is replaced at once."
        ),
        json_schema_extra={"type": ["number", "string"]},
    )
    grow_back: str = Field(
        GROW_EVERY_ATTEMPT,
        description=(
            "When a shrunk job asks for its full size again, always at a new attempt (a running job "
            "is never stopped to grow): 'everyAttempt' (each attempt after one that ran shrunk), "
            "'after:<duration>' (only once the job has been shrunk that long), or 'never'."
        ),
        json_schema_extra={"pattern": "^(everyAttempt|never|after:.+)$"},
    )

    @field_validator("shrink_after")
    @classmethod
    def _valid_shrink_after(cls, value: Any) -> Any:
        parse_duration(value, "shrinkAfter")
        return value

    @field_validator("grow_back")
    @classmethod
    def _valid_grow_back(cls, value: str) -> str:
        parse_grow_back(value)
        return value

    @property
    def shrink_after_seconds(self) -> float:
        return parse_duration(self.shrink_after, "shrinkAfter")


def _check_job_id(value: str) -> str:
    if not JOB_ID_RE.fullmatch(value):
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
            "`gcloud ai custom-jobs create --config` takes. Validated with the Vertex client library. "
            "A workerPoolSpec may also carry Relaunch's minReplicaCount (1 to its replicaCount): the "
            "fewest replicas the pool may run on (see elastic); it never reaches Vertex."
        ),
        json_schema_extra={
            "$comment": "https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec"
        },
    )
    checkpoint: CheckpointModel
    restart_policy: RestartPolicyModel = Field(default_factory=RestartPolicyModel)
    elastic: ElasticModel | None = Field(
        None,
        description=(
            "Shrink to fit: with minReplicaCount set on a workerPoolSpec, run on fewer replicas "
            "when the full size is not to be had, and grow back later. Defaults apply when "
            "minReplicaCount is set and this is omitted."
        ),
    )
    placements: list[Any] | None = Field(
        None,
        description=(
            "Alternatives for where and how attempts run (region, machines per workerPoolSpec, "
            "strategy SPOT / FLEX_START / STANDARD, price per node hour); each attempt goes to the "
            "one with the best expected cost or time per unit of training (see objective). Every "
            "one must be able to resume the same checkpoint. Omitted: every attempt runs as the "
            "jobSpec says. Items: see docs/requests.md, 'Placements'."
        ),
        json_schema_extra={"items": {"type": "object"}, "maxItems": 32},
    )
    objective: Literal["lowest-cost", "earliest-finish", "lowest-cost-under-deadline"] | None = Field(
        None, description="What the choice between placements minimises (default lowest-cost)."
    )
    deadline: str | None = Field(
        None,
        description="RFC 3339 time the job should finish by (objective lowest-cost-under-deadline).",
        max_length=40,
    )
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
        # An optional block (`ElasticModel | None`) names its model inside the union.
        candidates = (annotation, *get_args(annotation))
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
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


def problems_from_pydantic(error: ValidationError, model: type[BaseModel]) -> list[Problem]:
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
