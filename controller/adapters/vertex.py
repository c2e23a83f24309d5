"""The Vertex AI adapter: the only module that talks to the JobService.

Every call has a deadline and a tenacity retry that retries only what can succeed on a second
try (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL for reads). CreateCustomJob
is the exception: a retried create could make a second job, so `ensure_attempt` retries the whole
"look up by labels, create only if absent" step instead, which is idempotent.

Side effects (create, cancel) take a `guard`: called just before the RPC, it raises when this
controller may no longer act (its leader lease ran out) and otherwise says for how many seconds
it still may; the RPC's deadline never reaches past that, so a call cannot land after a
successor took over. The create-quota slot is taken *before* the look-up by labels, so waiting
for quota can never stretch the time between "none exists" and CreateCustomJob.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.protobuf import field_mask_pb2
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from controller import logs
from controller.adapters.create_lane import CreateLane
from controller.adapters.ratelimit import RateLimiter
from controller.core import events as ev
from controller.core.classify import ReplicaExit
from controller.core.model import VERTEX_TERMINAL
from controller.request.aiplatform import aiplatform_v1
from controller.request.aiplatform import load as load_aiplatform
from controller.request.labels import ATTEMPT_LABEL, JOB_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, labels_for
from controller.settings import Settings
from trainer import layout

RETRYABLE_READ = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.InternalServerError,
)
# A create that failed with one of these may or may not have created the job: look before retrying.
# (RESOURCE_EXHAUSTED is no such answer: it is a 429 refusal, see CreateQuotaExceeded.)
AMBIGUOUS_CREATE = (
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ServiceUnavailable,
)
# Vertex refused the job itself; submitting the same spec again cannot succeed.
PERMANENT_CREATE = (
    gexc.InvalidArgument,
    gexc.FailedPrecondition,
    gexc.PermissionDenied,
    gexc.NotFound,
    gexc.Unauthenticated,
)

log = logs.get("relaunch.vertex")


def vertex_state_name(job: aiplatform_v1.CustomJob) -> str:
    return aiplatform_v1.JobState(job.state).name.removeprefix("JOB_STATE_")


def job_labels(job: aiplatform_v1.CustomJob) -> tuple[str | None, int | None]:
    """(job id, attempt) from a CustomJob's Relaunch labels, or (None, None)."""
    # The protobuf map under the proto-plus wrapper: the wrapper's copy costs ten times as much,
    # and a pass reads the labels of every listed job in one stretch.
    labels = aiplatform_v1.CustomJob.pb(job).labels
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
        return None, None
    try:
        return labels.get(JOB_LABEL), int(labels.get(ATTEMPT_LABEL, ""))
    except ValueError:
        return labels.get(JOB_LABEL), None


def job_name(job: aiplatform_v1.CustomJob) -> str:
    """The CustomJob's resource name, read from the protobuf message (the wrapper's read costs
    ten times as much, which counts when a pass reads a thousand)."""
    return aiplatform_v1.CustomJob.pb(job).name


def timestamp_seconds(value: Any) -> float | None:
    """A proto timestamp (DatetimeWithNanoseconds) as epoch seconds; None when unset."""
    if value is None:
        return None
    try:
        seconds = value.timestamp()
    except (AttributeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def _raw_seconds(raw: Any, field: str) -> float | None:
    """A Timestamp field of a raw message as epoch seconds (the same float as `timestamp_seconds`
    of the wrapper's datetime: whole microseconds); None when unset."""
    if not raw.HasField(field):
        return None
    stamp = getattr(raw, field)
    seconds = (stamp.seconds * 10**6 + stamp.nanos // 1000) / 10**6
    return seconds if seconds > 0 else None


def is_spot(job: aiplatform_v1.CustomJob) -> bool:
    """Whether the CustomJob runs on Spot VMs, the only ones Vertex reclaims."""
    return job.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT


def observed_event(
    job: aiplatform_v1.CustomJob,
    attempt: int,
    exit_record: layout.ExitRecord | None = None,
    *,
    progress_unknown: bool = False,
    replica_exits: Iterable[layout.ReplicaExit] = (),
) -> ev.VertexObserved:
    """What the decision core needs to know of one CustomJob read from Vertex (and, once it has
    ended, of the trainer's exit records for it: the chief's and every replica's)."""
    # Read from the protobuf message under the proto-plus wrapper: every field read through the
    # wrapper converts (a tenth of a millisecond here), and a pass makes one of these per live job.
    raw = aiplatform_v1.CustomJob.pb(job)
    return ev.VertexObserved(
        attempt=attempt,
        vertex_name=raw.name,
        vertex_state=aiplatform_v1.JobState(raw.state).name.removeprefix("JOB_STATE_"),
        error_code=raw.error.code,  # 0 and "" when the job has no error, as unset fields read
        error_message=raw.error.message,
        start_time=_raw_seconds(raw, "start_time"),
        end_time=_raw_seconds(raw, "end_time"),
        exit_reason=exit_record.reason if exit_record else None,
        spot=raw.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT,
        checkpoint_root=exit_record.checkpoint_root if exit_record else None,
        steps_lost=exit_record.steps_lost if exit_record else None,
        progress_unknown=progress_unknown,
        exit_step=exit_record.step if exit_record else None,
        exit_committed_step=exit_record.last_committed_step if exit_record else None,
        final_step=exit_record.final_step if exit_record else None,
        replica_exits=tuple(replica_fact(r) for r in replica_exits),
    )


# Bounds on what a trainer-written text may put into a reason, an alert or the status page.
DETAIL_LIMIT = 240


def bounded_text(text: str | None, limit: int = DETAIL_LIMIT) -> str | None:
    """`text` with control characters escaped (a record could carry terminal escapes) and cut to
    `limit` characters."""
    if text is None:
        return None
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def replica_fact(record: layout.ReplicaExit) -> ReplicaExit:
    """A replica's exit record as the core's facts, its free text bounded and escaped."""
    return ReplicaExit(
        replica=bounded_text(record.replica, 64) or "?",
        reason=record.reason,
        exit_code=record.exit_code,
        signal=bounded_text(record.signal, 64),
        step=record.step,
        detail=bounded_text(record.detail),
        worker_exit_code=record.worker_exit_code,
        worker_signal=bounded_text(record.worker_signal, 64),
    )


@dataclass(frozen=True)
class Submission:
    """What `ensure_attempt` found or did."""

    job: aiplatform_v1.CustomJob | None  # None: absent and not created
    created: bool
    # Every other job found for the same attempt. The adapter cancels none of them: which one
    # survives is the decision core's call (the one the store recorded).
    duplicates: tuple[str, ...] = ()


# Says whether this controller may still act, and for how long: raises when it may not.
Guard = Callable[[str], float]


def _always_allowed(what: str) -> float:
    return float("inf")


class SubmitRejected(Exception):
    """Vertex refused the CustomJob (INVALID_ARGUMENT and the like): retrying cannot help."""


class CreateQuotaExceeded(Exception):
    """CreateCustomJob answered 429 RESOURCE_EXHAUSTED: a quota (training resources, or the
    per-minute job submissions) is used up. Nothing was created; retry in minutes, not seconds."""


def label_filter(labels: dict[str, str]) -> str:
    """`labels.k="v" AND ...`: values quoted, as AIP-160 filters take any string value."""
    return " AND ".join(f'labels.{key}="{value}"' for key, value in labels.items())


# What a reconcile pass reads of a live CustomJob: its identity, labels, state, times and error
# (`job_spec`, the bulk of a CustomJob, is not needed while the job runs).
LIVE_READ_MASK = ("name", "state", "labels", "create_time", "start_time", "end_time", "update_time", "error")
# Pages as large as Vertex gives (its maximum is unknown: a smaller page just means more pages).
LIVE_PAGE_SIZE = 1000


def live_filter(labels: dict[str, str]) -> str:
    """`labels...` AND every terminal state excluded: "state supports = and !=" in
    ListCustomJobsRequest.filter [aiplatform_v1 reference]. Exclusion, not a list of live states,
    so a state Vertex adds later is listed rather than missed."""
    states = " AND ".join(f'state!="JOB_STATE_{name}"' for name in sorted(VERTEX_TERMINAL))
    return f"{label_filter(labels)} AND {states}"


def make_client(settings: Settings, region: str | None = None) -> aiplatform_v1.JobServiceClient:
    """A JobService client for `region` (default RELAUNCH_REGION): Vertex AI is regional, each
    region has its own endpoint, REGION-aiplatform.googleapis.com
    (https://cloud.google.com/vertex-ai/docs/reference/rest#service-endpoint)."""
    load_aiplatform()  # the package whole first, under its import lock (request/aiplatform.py)
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    region = region or settings.region
    endpoint = settings.vertex_endpoint_for(region)
    if endpoint:
        # A passed channel skips credential lookup: right for the plaintext devstack server.
        channel = grpc.insecure_channel(endpoint)
        return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
    return aiplatform_v1.JobServiceClient(
        client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"}
    )


def region_of(name: str) -> str | None:
    """The region in a CustomJob's name, projects/P/locations/REGION/customJobs/ID."""
    parts = name.split("/")
    return parts[3] if len(parts) >= 4 and parts[2] == "locations" else None


class VertexBackend:
    def __init__(
        self,
        settings: Settings,
        client: aiplatform_v1.JobServiceClient | None = None,
        *,
        on_api_error: Callable[[str, str], None] | None = None,
        retry_attempts: int = 5,
        retry_max_wait: float = 10.0,
    ):
        self.settings = settings
        self.parent = settings.vertex_parent
        # One client per region a placement uses (RELAUNCH_REGION's is `client`), each made on
        # first use, so that the Vertex API's import is off the path to ready.
        self._clients: dict[str, aiplatform_v1.JobServiceClient] = {}
        if client is not None:
            self._clients[settings.region] = client
        self.timeout = settings.rpc_timeout_seconds
        self.creates = RateLimiter(settings.creates_per_minute)
        # Which job takes the next create slot (oldest ready first); it never blocks a caller.
        self.lane = CreateLane(self.creates)
        # Reads spend their budget evenly (a tenth of it at once at most), so that a burst never
        # stalls every read, a recovery's included, for the rest of a minute; a third of that
        # tenth is kept for the urgent reads (`get(..., urgent=True)`: a running attempt's, whose
        # only next state is its end), so routine reads that keep the budget spent never make a
        # recovery wait for the refill.
        burst = max(1, settings.reads_per_minute // 10)
        self.reads = RateLimiter(settings.reads_per_minute, burst=burst, reserve=burst // 3)
        self._on_api_error = on_api_error or (lambda api, code: None)
        self._retry_attempts = retry_attempts
        self._retry_max_wait = retry_max_wait
        self._live_listing_refused = False

    @property
    def client(self) -> aiplatform_v1.JobServiceClient:
        """Made on first use, so that the Vertex API's import is off the path to ready (see
        controller/request/aiplatform.py). Two callers that race here make two clients, one of
        which is dropped: harmless, and cheaper than a lock on every call."""
        return self.client_for(None)

    # --- plumbing -----------------------------------------------------------------------
    def _retrying(self, retry_on: tuple[type[Exception], ...]) -> Retrying:
        return Retrying(
            retry=retry_if_exception_type(retry_on),
            stop=stop_after_attempt(self._retry_attempts),
            wait=wait_exponential_jitter(initial=0.2, max=self._retry_max_wait),
            reraise=True,
        )

    def _call(
        self,
        api: str,
        fn: Callable[[], Any],
        *,
        retry_on: tuple[type[Exception], ...] = RETRYABLE_READ,
        limiter: RateLimiter | None = None,
        urgent: bool = False,
    ) -> Any:
        for attempt in self._retrying(retry_on):
            with attempt:
                (limiter or self.reads).acquire(urgent=urgent)
                try:
                    return fn()
                except gexc.GoogleAPICallError as error:
                    self._on_api_error(api, type(error).__name__)
                    raise

    # --- regions --------------------------------------------------------------------------
    def client_for(self, region: str | None) -> aiplatform_v1.JobServiceClient:
        region = region or self.settings.region
        client = self._clients.get(region)
        if client is None:
            client = self._clients[region] = make_client(self.settings, region)
        return client

    def parent_for(self, region: str | None) -> str:
        return f"projects/{self.settings.project}/locations/{region or self.settings.region}"

    def names_for(self, vertex_job_id: str) -> list[str]:
        """The names a CustomJob id may have, one per watched region (an event names no region)."""
        return [f"{self.parent_for(r)}/customJobs/{vertex_job_id}" for r in self.settings.all_regions]

    # --- reads ----------------------------------------------------------------------------
    def get(self, name: str, *, urgent: bool = False) -> aiplatform_v1.CustomJob | None:
        """`urgent`: the read may spend the read budget's reserve (see `reads`)."""
        client = self.client_for(region_of(name))
        try:
            return self._call(
                "GetCustomJob",
                lambda: client.get_custom_job(name=name, timeout=self.timeout),
                urgent=urgent,
            )
        except gexc.NotFound:
            return None

    def list_jobs(
        self,
        filter_: str,
        *,
        read_mask: tuple[str, ...] = (),
        page_size: int = 100,
        regions: tuple[str, ...] | None = None,
    ) -> Iterator[aiplatform_v1.CustomJob]:
        """Every region watched (RELAUNCH_REGION and RELAUNCH_REGIONS), or those named."""
        for region in regions if regions is not None else self.settings.all_regions:
            yield from self._list_region(region, filter_, read_mask, page_size)

    def _list_region(
        self, region: str, filter_: str, read_mask: tuple[str, ...], page_size: int
    ) -> Iterator[aiplatform_v1.CustomJob]:
        client = self.client_for(region)

        def request(token: str = "") -> aiplatform_v1.ListCustomJobsRequest:
            built = aiplatform_v1.ListCustomJobsRequest(
                parent=self.parent_for(region), filter=filter_, page_size=page_size, page_token=token
            )
            if read_mask:
                built.read_mask = field_mask_pb2.FieldMask(paths=list(read_mask))
            return built

        page = self._call("ListCustomJobs", functools.partial(self._list_page, client, request()))
        while True:
            yield from page.custom_jobs
            if not page.next_page_token:
                return
            page = self._call(
                "ListCustomJobs",
                functools.partial(self._list_page, client, request(page.next_page_token)),
            )

    def _list_page(
        self, client: aiplatform_v1.JobServiceClient, request: aiplatform_v1.ListCustomJobsRequest
    ) -> Any:
        # One RPC per page, so each page is rate limited and retried on its own.
        # The pager delegates attribute reads to the page it fetched; it fetches no more unless
        # iterated, so `custom_jobs` and `next_page_token` here are this page's.
        return client.list_custom_jobs(request=request, timeout=self.timeout)

    def list_managed(self) -> Iterator[aiplatform_v1.CustomJob]:
        return self.list_jobs(label_filter({MANAGED_BY_LABEL: MANAGED_BY_VALUE}))

    def list_live_managed(self) -> list[aiplatform_v1.CustomJob]:
        """Our CustomJobs that have not ended, with only the fields a pass reads: one List call
        per page of live jobs, however many finished ones the project keeps. Should Vertex refuse
        the state filter or the mask (INVALID_ARGUMENT), every managed job is listed whole
        instead, from then on, and the refusal is logged once."""
        managed = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
        if not self._live_listing_refused:
            try:
                return list(
                    self.list_jobs(live_filter(managed), read_mask=LIVE_READ_MASK, page_size=LIVE_PAGE_SIZE)
                )
            except gexc.InvalidArgument as error:
                self._live_listing_refused = True
                log.warning(
                    "vertex refused the live-jobs listing; listing every managed job", error=str(error)
                )
        return list(self.list_jobs(label_filter(managed), page_size=LIVE_PAGE_SIZE))

    def find_attempt(
        self, job_id: str, attempt: int, region: str | None = None
    ) -> list[aiplatform_v1.CustomJob]:
        """The attempt's CustomJobs by their labels: in `region` (where its placement put it),
        else in every watched region."""
        filter_ = label_filter(labels_for(job_id, attempt))
        regions = (region,) if region else None
        found = self.list_jobs(filter_, regions=regions)
        return sorted(found, key=lambda j: (j.create_time.timestamp(), j.name))

    # --- writes ---------------------------------------------------------------------------
    def _deadline(self, guard: Guard, what: str) -> float:
        """The RPC deadline: our own, cut to the time the guard still allows (raises if none)."""
        return min(self.timeout, guard(what))

    def cancel(self, name: str, *, guard: Guard = _always_allowed) -> None:
        client = self.client_for(region_of(name))
        try:
            self._call(
                "CancelCustomJob",
                lambda: client.cancel_custom_job(name=name, timeout=self._deadline(guard, f"cancel {name}")),
            )
        except (gexc.NotFound, gexc.FailedPrecondition):
            pass  # already gone or already finished: nothing to cancel

    def ensure_attempt(
        self,
        job_id: str,
        attempt: int,
        build: Callable[[], aiplatform_v1.CustomJob],
        *,
        create: bool,
        guard: Guard = _always_allowed,
        slot_taken: bool = False,
        region: str | None = None,
        look_up: bool = True,
    ) -> Submission:
        """Adopt the Vertex job of this attempt if one exists; otherwise create it (if asked).

        `slot_taken`: the caller already holds a create slot for the first try (taken from the
        create lane, `self.lane`); a retry takes a new one. `look_up=False`: the caller knows no
        job of this attempt can exist yet (its intent was stored moments ago, in the write that
        started it): the first try creates without the look-up (a List call, from the read
        budget); a retry (the create's outcome unknown) always looks up first.

        `region`: where the attempt's placement puts it (None: RELAUNCH_REGION); the look-up and
        the create both go to that region's endpoint.

        Raises SubmitRejected for a permanent refusal; transient errors that outlast the retries
        propagate as google.api_core exceptions.
        """
        region = region or self.settings.region
        client = self.client_for(region)
        for try_ in self._retrying(AMBIGUOUS_CREATE):
            with try_:
                if create:
                    # Quota first: the wait for it must not sit between the look-up and the create.
                    if not slot_taken:
                        self.creates.acquire()
                    slot_taken = False
                    guard(f"look up attempt {attempt} of {job_id} before creating it")
                existing = self.find_attempt(job_id, attempt, region) if look_up else []
                look_up = True
                if existing:
                    return Submission(
                        existing[0], created=False, duplicates=tuple(j.name for j in existing[1:])
                    )
                if not create:
                    return Submission(None, created=False)
                custom_job = build()
                deadline = self._deadline(guard, f"create attempt {attempt} of {job_id}")
                try:
                    job = client.create_custom_job(
                        parent=self.parent_for(region), custom_job=custom_job, timeout=deadline
                    )
                except PERMANENT_CREATE as error:
                    self._on_api_error("CreateCustomJob", type(error).__name__)
                    raise SubmitRejected(error.message or str(error)) from error
                except gexc.ResourceExhausted as error:
                    self._on_api_error("CreateCustomJob", type(error).__name__)
                    raise CreateQuotaExceeded(error.message or str(error)) from error
                except gexc.GoogleAPICallError as error:
                    self._on_api_error("CreateCustomJob", type(error).__name__)
                    raise
                log.info("vertex job created", job_id=job_id, attempt=attempt, vertex_job=job.name)
                return Submission(job, created=True)
        raise AssertionError("unreachable")  # pragma: no cover
