"""Every knob of the controller and the CLI, read from environment variables (Cloud Run style).

One typed object; `Settings()` reads the environment, and a bad value fails at start-up with the
variable's name. The README's table is generated from this class's field descriptions:
`python -m controller.settings` prints it and `--write` puts it into README.md; a test fails when
the README's copy is stale.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Annotated, Any

from pydantic import AfterValidator, AliasChoices, Field, TypeAdapter, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from controller.core.prices import PriceTable, PriceTableInvalid


def _store_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    if scheme not in ("sqlite", "gs") or not rest.strip("/"):
        raise ValueError("must be sqlite:///path/to/state.db or gs://bucket/prefix")
    return url


@functools.lru_cache(maxsize=4)
def read_price_table(value: str) -> PriceTable:
    """The table from inline JSON (starting with `{`) or from the JSON file `value` names (a
    mounted secret or config file on Cloud Run); empty when unset. Read once per value."""
    if not value.strip():
        return PriceTable()
    text = value
    if not value.lstrip().startswith("{"):
        try:
            with open(value, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            raise ValueError(f"cannot read the price table file: {error.strerror or error}") from None
    try:
        return PriceTable.from_json(json.loads(text))
    except json.JSONDecodeError as error:
        raise ValueError(f"is not JSON: {error}") from None
    except PriceTableInvalid as error:
        raise ValueError(str(error)) from None


def _price_table(value: str) -> str:
    read_price_table(value)  # a bad table fails at start-up, naming the variable
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RELAUNCH_", extra="ignore", frozen=True)

    project: str = Field(
        "relaunch-dev",
        validation_alias=AliasChoices("RELAUNCH_PROJECT", "GOOGLE_CLOUD_PROJECT"),
        description="Google Cloud project that owns the Vertex AI jobs, topics and buckets.",
    )
    region: str = Field("us-central1", description="Vertex AI region the jobs run in.")
    vertex_endpoint: str | None = Field(
        None,
        description="host:port of a plaintext Vertex JobService (devstack); unset = the "
        "regional Google endpoint with default credentials.",
    )
    regions: str = Field(
        "",
        description="Further Vertex AI regions, comma-separated, that jobs' placements may run in: "
        "listed and watched besides RELAUNCH_REGION (docs/multi-region.md).",
    )
    vertex_endpoints: str = Field(
        "",
        description="region=host:port pairs, comma-separated, of plaintext Vertex JobServices per "
        "region (devstack); a region not named uses RELAUNCH_VERTEX_ENDPOINT or Google's "
        "REGION-aiplatform.googleapis.com.",
    )

    # Pub/Sub.
    requests_topic: str = Field("relaunch-requests", description="Topic users publish job requests to.")
    requests_subscription: str = Field(
        "relaunch-requests-controller", description="Subscription the controller pulls requests from."
    )
    events_topic: str = Field(
        "vertex-job-events", description="Topic the Cloud Logging sink publishes Vertex job log entries to."
    )
    events_subscription: str = Field(
        "vertex-job-events-controller", description="Subscription the controller pulls job events from."
    )
    alerts_topic: str = Field("relaunch-alerts", description="Topic the controller publishes alerts to.")
    dead_letter_topic: str = Field(
        "relaunch-dead-letter", description="Topic rejected requests are published to, with the reason."
    )
    create_subscriptions: bool = Field(
        False, description="Create missing topics/subscriptions at start (devstack and first runs)."
    )
    max_outstanding_messages: int = Field(
        128,
        ge=1,
        description="Flow control for each subscription: messages held at once, each with a callback "
        "thread of its own. More requests in flight share SQLite's commits (larger batches) and overlap "
        "the GCS store's round trips; against a GCS stand-in on the same few cores, fewer cost less CPU "
        "per request (bench/README.md).",
    )

    # State.
    state_store: Annotated[str, AfterValidator(_store_url)] = Field(
        "sqlite:///var/lib/relaunch/state.db",
        description="Where job state lives: `sqlite:///path` (embedded) or `gs://bucket/prefix` "
        "(production; enables the leader lease).",
    )

    allow_local_checkpoints: bool = Field(
        False, description="Accept file:// checkpoint URIs (local runs only; never in production)."
    )
    checkpoint_buckets: str = Field(
        "",
        description="Comma-separated allow-list of checkpoint buckets (names, no gs://); empty = any "
        "bucket. A request naming another bucket is rejected.",
    )

    # Adaptive checkpoint interval (requests with `checkpoint.interval: auto`).
    interval_prior_mtbf_seconds: float | None = Field(
        None,
        gt=0,
        description="Prior mean training time between work-losing endings for a capacity class not seen "
        "yet, weighing half an ending (unset: 24 h for Spot, 7 days otherwise; see "
        "controller/core/checkpoint_interval.py). Set it where reclaims are known to be more frequent.",
    )

    estimate_half_life_seconds: float = Field(
        12 * 3600.0,
        gt=0,
        description="How fast the learned reclaim rates (the adaptive checkpoint interval's and the "
        "placement choice's) forget: an ending weighs half after this much later training in its "
        "capacity class, or, where longer, after the training in which the class expects 8 "
        "work-losing endings at its current rate (at most 30 days), so a busy class follows a rate "
        "that changes within hours while a calm one keeps several endings of evidence; each estimate "
        "rests on about the last 1.44 half-lives of training "
        '(see controller/core/checkpoint_interval.py, "Forgetting"). '
        "Applies to classes already in the book from their next update on.",
    )

    # Bounded state (a housekeeping pass while leading).
    housekeeping_seconds: float = Field(
        300.0, gt=0, description="Period of the pass that prunes rejected records and finished jobs."
    )
    rejected_retention_seconds: float = Field(
        7 * 86400.0,
        gt=0,
        description="Rejected-request records older than this are deleted (the dead-letter topic keeps "
        "its copy).",
    )
    rejected_max_records: int = Field(
        1000, ge=1, description="At most this many rejected-request records are kept; the oldest go first."
    )
    finished_job_retention_seconds: float = Field(
        30 * 86400.0,
        ge=0,
        description="A succeeded, failed or cancelled job is deleted from the state store (with its "
        "checkpoint-root claim) this long after it ended; 0 = keep for ever. Checkpoints are never deleted.",
    )

    # Timing.
    reconcile_seconds: float = Field(60.0, gt=0, description="Period of the list-by-label reconcile pass.")
    lease_seconds: float = Field(30.0, gt=0, description="Leader lease duration.")
    lease_renew_seconds: float = Field(10.0, gt=0, description="How often the leader renews the lease.")
    rpc_timeout_seconds: float = Field(30.0, gt=0, description="Deadline of each Google API call.")
    submit_retry_seconds: float = Field(
        30.0, gt=0, description="Wait before retrying a failed CreateCustomJob."
    )
    error_settle_seconds: float = Field(
        90.0,
        ge=0,
        description="The stated bound on waiting for a FAILED job's error (Vertex sets it about a "
        "minute after the end). Endings are decided at once from the evidence; the error, read "
        "again until this long after the end, confirms or corrects the record. Only a started "
        "non-Spot attempt with no error and no decisive trainer record waits, this long at most.",
    )
    error_recheck_seconds: float = Field(
        10.0,
        gt=0,
        description="While a FAILED job's error is awaited (to decide or to confirm), read it this often.",
    )
    capacity_retry_seconds: float = Field(
        120.0,
        ge=0,
        description="Wait before the next attempt after a 429 quota refusal at create; the ceiling of "
        "the backoff after stockouts before start (the first retry is at once; core/stockout.py); "
        "for a job with placements, how soon a refused placement it waits for is asked again. "
        "Neither spends maxFailures.",
    )
    capacity_wait_alert_seconds: float = Field(
        3600.0, gt=0, description="Alert when an attempt waits this long for capacity."
    )
    preemption_storm_count: int = Field(
        5, ge=1, description="Preemptions within the window that raise an alert."
    )
    preemption_storm_window_seconds: float = Field(
        3600.0, gt=0, description="Window of the preemption-storm alert."
    )

    # Health.
    shutdown_seconds: float = Field(
        8.0,
        gt=0,
        le=60,
        description="Budget of a graceful shutdown: drain the subscriptions, but release the leader "
        "lease within it (Cloud Run kills the instance 10 s after SIGTERM).",
    )
    loop_stall_seconds: float = Field(
        600.0,
        gt=0,
        description="/healthz fails when the control loop has not completed an iteration, or a reconcile "
        "pass has run, for this long (a wedged loop or pass gets the instance restarted).",
    )
    stream_retry_max_seconds: float = Field(
        60.0, gt=0, description="Longest wait before reopening a subscription stream that ended."
    )

    # Alerts.
    alert_cooldown_seconds: float = Field(
        900.0, ge=0, description="A (job, kind) alert fires at most once per this many seconds."
    )
    degraded_after_failed_passes: int = Field(
        3, ge=1, description="Raise controller_degraded after this many reconcile passes in a row fail."
    )
    webhook_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of each webhook POST.")
    webhook_queue_size: int = Field(
        100, ge=1, description="Alerts waiting for the webhook; beyond it new ones are dropped and counted."
    )

    # Quotas (Vertex defaults per project and region).
    creates_per_minute: int = Field(60, ge=1, description="CustomJob creations allowed per minute.")
    reads_per_minute: int = Field(
        300,
        ge=1,
        description="Vertex Get/List/Cancel calls this controller allows itself per minute. Vertex's quota "
        "is 600 resource-management requests per minute per project and region, shared with every other "
        "Vertex user of the project (Google's 'Vertex AI quotas and limits' page, "
        "https://cloud.google.com/vertex-ai/docs/quotas); the default leaves half of it to them. A reconcile pass costs one List call per 1,000 live "
        "CustomJobs plus one Get per live job whose CustomJob ended or vanished. Spent evenly: at most a tenth "
        "of it at once, the rest as it refills over the minute, so a burst never stalls every read (a "
        "recovery's included) for the rest of a minute; a third of that tenth is kept for the reads of "
        "running attempts (whose next state can only be their end), so a recovery's read never waits "
        "behind routine ones.",
    )
    hint_ignore_unknown: bool = Field(
        True,
        description="Read (GetCustomJob) only the Vertex jobs that the events sink reports and that a live "
        "Relaunch job recorded; the sink delivers every Vertex job of the project and a log entry carries "
        "no labels. Jobs not yet recorded are found by the reconcile pass.",
    )
    progress_probes_per_pass: int = Field(
        50,
        ge=0,
        description="At most this many running jobs have their checkpoint root listed per reconcile pass, "
        "least recently probed first, so probing scales with the pass instead of with every live job. An "
        "attempt's ending always reads its checkpoints. 0 = only at endings.",
    )
    metrics_sweep_seconds: float = Field(
        3600.0,
        gt=0,
        description="Period of the sweep over every stored job (finished ones included) that recounts the "
        "jobs-by-phase gauges and sets finished jobs' goodput; between sweeps the gauges change as jobs "
        "change. The first sweep starts with the first reconcile pass.",
    )
    metrics_sweep_per_pass: int = Field(
        200,
        ge=1,
        description="Documents a sweep reads per reconcile pass, so that it never makes one pass long "
        "(10,000 jobs: 50 passes).",
    )
    reconcile_workers: int = Field(
        16,
        ge=1,
        description="Threads that serve the work queue: each runs one job's reconcile at a time (never two "
        "on one job), and one of them runs the periodic pass, so that one job's slow call (a Vertex call "
        "retrying through an outage) holds one worker and no other job.",
    )
    queue_max_keys: int = Field(
        100_000,
        ge=1,
        description="Most job ids the work queue holds (waiting or with a wake-up). Beyond it a new id is "
        "refused and counted (the periodic pass offers every live job again).",
    )

    # Serving.
    port: int = Field(
        8080,
        validation_alias=AliasChoices("PORT", "RELAUNCH_PORT"),
        description="HTTP port (Cloud Run sets PORT): `/healthz`, `/readyz`, `/metrics`, `/v1/jobs`, "
        "`/pubsub/push`.",
    )
    push_audience: str | None = Field(
        None, description="Expected audience of Pub/Sub push OIDC tokens (the service URL)."
    )
    push_service_account: str | None = Field(
        None, description="Expected email of the Pub/Sub push identity; unset = push disabled."
    )
    push_certs_url: str | None = Field(
        None, description="Where to fetch token-signing certs (unset: Google's); devstack serves its own."
    )
    http_max_workers: int = Field(
        16,
        ge=1,
        le=256,
        description="Threads serving HTTP; connections beyond these (and a queue of as "
        "many again) are answered 503 at once.",
    )
    dead_letter_max_bytes: int = Field(
        9_000_000,
        ge=1024,
        le=10_000_000,
        description="Largest copy of a rejected request published to the dead-letter topic (Pub/Sub "
        "takes at most 10 MB); a longer one is cut and points to its stored record.",
    )
    webhook_url: str | None = Field(None, description="Optional Slack-compatible webhook for alerts.")
    controller_id: str | None = Field(
        None, description="Name of this instance in the lease (unset: host-pid)."
    )
    log_level: str = Field("INFO", description="Minimum log severity.")
    price_table: Annotated[str, AfterValidator(_price_table)] = Field(
        "",
        description="Prices per node hour for placements that name none: a JSON file's path, or the "
        'JSON itself ({"prices": [{region, machineType, acceleratorType, strategy, pricePerNodeHour, '
        "date, source}]}); docs/requests.md, *Placements*.",
    )

    @property
    def prices(self) -> PriceTable:
        return read_price_table(self.price_table)

    @property
    def checkpoint_bucket_allow_list(self) -> frozenset[str]:
        return frozenset(
            b.strip().removeprefix("gs://").strip("/")
            for b in self.checkpoint_buckets.split(",")
            if b.strip()
        )

    def topic_path(self, name: str) -> str:
        return name if name.startswith("projects/") else f"projects/{self.project}/topics/{name}"

    def subscription_path(self, name: str) -> str:
        return name if name.startswith("projects/") else f"projects/{self.project}/subscriptions/{name}"

    @property
    def vertex_parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def all_regions(self) -> tuple[str, ...]:
        """RELAUNCH_REGION first, then the further regions, each once."""
        named = [self.region, *(r.strip() for r in self.regions.split(",") if r.strip())]
        return tuple(dict.fromkeys(named))

    def vertex_endpoint_for(self, region: str) -> str | None:
        """The plaintext JobService of `region` (devstack), or None for Google's endpoint."""
        for pair in self.vertex_endpoints.split(","):
            name, _, host_port = pair.strip().partition("=")
            if name.strip() == region and host_port.strip():
                return host_port.strip()
        return self.vertex_endpoint


# ---- explaining a bad value ----------------------------------------------------------------
class InvalidSetting(ValueError):
    """One or more settings have values their fields refuse; the message names each."""


def variable_of(name: str) -> str:
    field = Settings.model_fields.get(name)
    if field is not None and isinstance(field.validation_alias, AliasChoices):
        return str(field.validation_alias.choices[0])
    return f"RELAUNCH_{name.upper()}"


def explain(error: ValidationError) -> str:
    """Each refused value as `VARIABLE='value': what is allowed`, one per line."""
    lines = []
    for problem in error.errors():
        location = str(problem["loc"][0]) if problem["loc"] else "?"
        variable = location if location.isupper() else variable_of(location)
        allowed = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{variable}={str(problem.get('input'))!r}: {allowed[0].lower()}{allowed[1:]}")
    return "\n".join(lines)


def load() -> Settings:
    """Settings from the environment; InvalidSetting names every bad variable and its value."""
    try:
        return Settings()
    except ValidationError as error:
        raise InvalidSetting(explain(error)) from None


def environ_prices() -> PriceTable:
    """The price table the environment names (RELAUNCH_PRICE_TABLE), for the CLI and the client,
    which check a request as the controller will; InvalidSetting names a bad table."""
    value = os.environ.get("RELAUNCH_PRICE_TABLE", "")
    try:
        return read_price_table(value)
    except ValueError as error:
        raise InvalidSetting(f"RELAUNCH_PRICE_TABLE={value!r}: {error}") from None


def check(name: str, value: str) -> None:
    """InvalidSetting unless `value` is allowed for setting `name` (as its variable would be)."""
    field = Settings.model_fields[name]
    try:
        kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        TypeAdapter(kind).validate_strings(value)
    except ValidationError as error:
        allowed = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InvalidSetting(f"{name}={value!r}: {allowed[0].lower()}{allowed[1:]}") from None


# ---- the README table ----------------------------------------------------------------------
README_BEGIN = "<!-- settings table: generated by `python -m controller.settings --write`; do not edit -->"
README_END = "<!-- end of settings table -->"


def _variables(name: str, field: Any) -> str:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return " / ".join(f"`{choice}`" for choice in alias.choices)
    return f"`RELAUNCH_{name.upper()}`"


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def markdown_table() -> str:
    """Every setting: its variable(s), default and meaning, as the README shows them."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        rows.append(f"| {_variables(name, field)} | {_default(field.default)} | {field.description} |")
    return "\n".join(rows)


def readme_with_table(readme: str) -> str:
    """`readme` with the text between the two markers replaced by the current table."""
    head, begin, rest = readme.partition(README_BEGIN)
    _, end, tail = rest.partition(README_END)
    if not begin or not end:
        raise ValueError("README.md lacks the settings table markers")
    return f"{head}{README_BEGIN}\n{markdown_table()}\n{README_END}{tail}"


def _main(argv: list[str]) -> int:
    """Print the table; `--write` puts it into README.md (and says whether anything changed)."""
    from pathlib import Path

    if "--write" not in argv:
        print(markdown_table())
        return 0
    readme_path = Path(__file__).resolve().parents[1] / "README.md"
    before = readme_path.read_text()
    after = readme_with_table(before)
    if after == before:
        print(f"{readme_path}: settings table already current")
        return 0
    readme_path.write_text(after)
    print(f"{readme_path}: settings table rewritten")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
