"""Every knob of the controller and the CLI, read from environment variables (Cloud Run style).

One typed object; `Settings()` reads the environment, and a bad value fails at start-up with the
variable's name. The README lists them all (generated from this class's field descriptions).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    max_outstanding_messages: int = Field(32, ge=1, description="Flow control for each subscription.")

    # State.
    state_store: str = Field(
        "sqlite:///var/lib/relaunch/state.db",
        description="Where job state lives: sqlite:///path (embedded) or gs://bucket/prefix (production).",
    )

    allow_local_checkpoints: bool = Field(
        False, description="Accept file:// checkpoint URIs (local runs only; never in production)."
    )

    # Timing.
    reconcile_seconds: float = Field(60.0, gt=0, description="Period of the list-all reconcile pass.")
    lease_seconds: float = Field(30.0, gt=0, description="Leader lease duration.")
    lease_renew_seconds: float = Field(10.0, gt=0, description="How often the leader renews the lease.")
    rpc_timeout_seconds: float = Field(30.0, gt=0, description="Deadline of each Google API call.")
    submit_retry_seconds: float = Field(
        30.0, gt=0, description="Wait before retrying a failed CreateCustomJob."
    )
    error_settle_seconds: float = Field(
        90.0,
        ge=0,
        description="How long a FAILED Vertex job read with no error (Vertex sets it about a minute "
        "after the end) is read again before its ending is classified with what there is.",
    )
    error_recheck_seconds: float = Field(
        10.0, gt=0, description="While waiting for a FAILED job's error, read the job again this often."
    )
    capacity_retry_seconds: float = Field(
        120.0,
        ge=0,
        description="Least wait before the next attempt after a 429 quota refusal at create or a "
        "capacity ending before the attempt ran (neither spends maxFailures).",
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
    reads_per_minute: int = Field(600, ge=1, description="Get/List/Cancel calls allowed per minute.")

    # Serving.
    port: int = Field(
        8080,
        validation_alias=AliasChoices("PORT", "RELAUNCH_PORT"),
        description="HTTP port (Cloud Run sets PORT).",
    )
    push_audience: str | None = Field(None, description="Expected audience of Pub/Sub push OIDC tokens.")
    push_service_account: str | None = Field(
        None, description="Expected email of the Pub/Sub push identity; unset = push disabled."
    )
    push_certs_url: str | None = Field(
        None, description="Where to fetch token-signing certs (default: Google's); devstack sets its own."
    )
    webhook_url: str | None = Field(None, description="Optional Slack-compatible webhook for alerts.")
    controller_id: str | None = Field(
        None, description="Name of this instance in the lease (default: host-pid)."
    )
    log_level: str = Field("INFO", description="Minimum log severity.")

    def topic_path(self, name: str) -> str:
        return name if name.startswith("projects/") else f"projects/{self.project}/topics/{name}"

    def subscription_path(self, name: str) -> str:
        return name if name.startswith("projects/") else f"projects/{self.project}/subscriptions/{name}"

    @property
    def vertex_parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"
