"""The emulator object: job store, JobService operations, fault injection, start and stop."""

from __future__ import annotations

import functools
import itertools
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.cloud.aiplatform_v1 import (
    CancelCustomJobRequest,
    CreateCustomJobRequest,
    CustomJob,
    DeleteCustomJobRequest,
    DeleteOperationMetadata,
    GenericOperationMetadata,
    GetCustomJobRequest,
    JobState,
    ListCustomJobsRequest,
    ListCustomJobsResponse,
    Scheduling,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, field_mask_pb2
from google.rpc import status_pb2

from devstack.calls import CallLog
from devstack.vertex import events
from devstack.vertex.behaviour import QUOTA_TEXT, VertexBehaviour
from devstack.vertex.errors import ApiError
from devstack.vertex.faults import ApiDelays, ApiFaults, Quotas
from devstack.vertex.filters import FilterError, parse_filter
from devstack.vertex.jobrun import (
    CAPACITY_MODES,
    TERMINAL_STATES,
    Capacity,
    JobRecord,
    JobRunner,
    Reclaim,
    Stockout,
)
from devstack.vertex.reclaims import ReclaimProcess
from devstack.vertex.service import JobServiceHandler
from devstack.vertex.simulated import Alarms, Simulation, simulation_for
from devstack.vertex.validation import validate_custom_job

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_OUTPUT_ONLY_FIELDS = ("name", "state", "create_time", "start_time", "end_time", "update_time", "error")

QUOTA_MODES = (None, "queue", "reject")


def _now() -> datetime:
    return datetime.now(UTC)


def _copy(job: CustomJob) -> CustomJob:
    # Callers get a snapshot: the gRPC layer serialises after the lock is released.
    return CustomJob.deserialize(CustomJob.serialize(job))


def _read_mask(request: ListCustomJobsRequest) -> field_mask_pb2.FieldMask | None:
    """The request's ``read_mask`` [types: ListCustomJobsRequest.read_mask], or None for every
    field. A path that names no CustomJob field is refused (unknown what Vertex answers; a
    refusal tells a caller at once that its mask is wrong)."""
    if "read_mask" not in request or not request.read_mask.paths:
        return None
    mask = field_mask_pb2.FieldMask(paths=list(request.read_mask.paths))
    if not mask.IsValidForDescriptor(CustomJob.pb().DESCRIPTOR):
        raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid read_mask: {list(mask.paths)}.")
    return mask


def _masked(job: CustomJob, mask: field_mask_pb2.FieldMask | None, into: Any) -> None:
    """Copy ``job``, or the fields ``mask`` names, into the empty raw message ``into``."""
    source = CustomJob.pb(job)
    if mask is None:
        into.CopyFrom(source)
        return
    top_level = _top_level_copiers(tuple(mask.paths))
    if top_level is None:
        mask.MergeMessage(source, into)
    else:
        for copy in top_level:
            copy(source, into)


def _merge_field(name: str, source: Any, kept: Any) -> None:
    getattr(kept, name).MergeFrom(getattr(source, name))


def _copy_message_field(name: str, source: Any, kept: Any) -> None:
    if source.HasField(name):
        getattr(kept, name).CopyFrom(getattr(source, name))


def _copy_scalar_field(name: str, source: Any, kept: Any) -> None:
    setattr(kept, name, getattr(source, name))


@functools.lru_cache(maxsize=32)
def _top_level_copiers(paths: tuple[str, ...]) -> tuple[Callable[[Any, Any], None], ...] | None:
    """For a mask of top-level fields only (a pass's mask), one copier per field: what
    `FieldMask.MergeMessage` does into an empty message, at half its cost per job, which counts
    when a page holds a thousand. None for a mask with a nested path."""
    if any("." in path for path in paths):
        return None
    fields = CustomJob.pb().DESCRIPTOR.fields_by_name
    copiers: list[Callable[[Any, Any], None]] = []
    for path in paths:
        field = fields[path]
        if field.is_repeated:  # maps included
            copiers.append(functools.partial(_merge_field, path))
        elif field.message_type is not None:
            copiers.append(functools.partial(_copy_message_field, path))
        else:
            copiers.append(functools.partial(_copy_scalar_field, path))
    return tuple(copiers)


class VertexEmulator:
    """A local Vertex AI JobService; build it with ``start_vertex`` rather than directly."""

    def __init__(
        self,
        *,
        project: str,
        region: str,
        workdir: str,
        event_sink: events.EventSink | None = None,
        python_bin_dir: str | None = None,
        provisioning_seconds: float = 0.5,
        kill_grace_seconds: float = 5.0,
        behaviour: VertexBehaviour | None = None,
        simulation: Simulation | None = None,
        first_job_id: int | None = None,
    ) -> None:
        self.project = project
        self.region = region
        self.workdir = str(Path(workdir).resolve())
        self.python_bin_dir = python_bin_dir or os.path.dirname(sys.executable)
        self.provisioning_seconds = provisioning_seconds
        self.kill_grace_seconds = kill_grace_seconds
        self.parent = f"projects/{project}/locations/{region}"
        self._lock = threading.RLock()
        # Waiters on the whole emulator (tests, wait_for_state); each job's runner waits on its
        # record's own condition over the same lock (see `wake`).
        self.changed = threading.Condition(self._lock)
        self.simulation = simulation
        self.alarms = Alarms()
        self.stopping = False
        self.host_port = ""
        self._jobs: dict[str, JobRecord] = {}  # by full job name
        self._operations: dict[str, operations_pb2.Operation] = {}
        # Microsecond clock as the first id: ids stay unique across restarts sharing a workdir.
        # Several regions (devstack.stack) start each its own range, so ids are unique across them.
        self._ids = itertools.count(first_job_id if first_job_id is not None else time.time_ns() // 1000)
        self._operation_ids = itertools.count(1)
        self._stockout = Stockout()
        self._quota_shortfall: str | None = None
        # set_capacity: replicas to be had per machine type (the key None: of every type).
        self._capacities: dict[str | None, Capacity] = {}
        self._reclaims = ReclaimProcess(self)  # set_reclaim_rate: Spot reclaims at random
        self._lost_create_replies = 0
        self.behaviour = behaviour or VertexBehaviour()
        self.faults = ApiFaults()
        self.delays = ApiDelays()
        self.quotas = Quotas()
        self.calls = CallLog()  # every RPC received, by method (devstack.calls)
        self._events = events.EventDispatcher(event_sink)
        self._server: grpc.Server | None = None
        Path(self.workdir).mkdir(parents=True, exist_ok=True)

    # ----- lifecycle of the emulator itself -------------------------------------------------

    def serve(self, host: str, port: int) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="vertex-rpc"))
        server.add_generic_rpc_handlers((JobServiceHandler(self),))
        bound = server.add_insecure_port(f"{host}:{port}")
        if bound == 0:
            raise OSError(f"cannot bind the Vertex stand-in to {host}:{port}")
        server.start()
        self._server = server
        self.host_port = f"{host}:{bound}"

    def stop(self) -> None:
        """Stop serving and kill every replica of every job; returns when they are gone."""
        with self.changed:
            self.stopping = True
            threads = [r.thread for r in self._jobs.values() if r.thread is not None]
            self.wake()
        if self._server is not None:
            self._server.stop(grace=0)
        self._reclaims.stop()
        self.alarms.stop()
        for thread in threads:
            thread.join(timeout=30.0)
        self._events.close()

    def __enter__(self) -> VertexEmulator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----- state changes (called by job runners and RPCs) -----------------------------------

    def wake(self, record: JobRecord | None = None) -> None:
        """Wake whoever waits on a change: ``record``'s runner, or every runner when a change of
        the whole emulator (stop, knobs, stockout, quota) may concern them all. Caller holds the lock."""
        records = [record] if record is not None else list(self._jobs.values())
        for each in records:
            each.wakeup.notify_all()
        self.changed.notify_all()

    def simulate(self, simulation: Simulation | None) -> None:
        """Make jobs created from now on simulated (``devstack.vertex.simulated``); None: real
        replica processes again. A job's own ``DEVSTACK_SIMULATED_*`` variables still win."""
        with self.changed:
            self.simulation = simulation

    def transition(self, record: JobRecord, state: JobState, error: status_pb2.Status | None = None) -> None:
        with self.changed:
            now = _now()
            job = record.job
            job.state = state
            job.update_time = now
            if state == JobState.JOB_STATE_RUNNING and "start_time" not in job:
                job.start_time = now
            if error is not None:
                job.error = error
            if events.state_text(state, self.behaviour.log_undocumented_transitions) is not None:
                self._events.publish(events.state_log_entry(self.project, record.job_id, state, now))
            self.wake(record)

    def service_log(self, record: JobRecord, text: str) -> None:
        """A service line that comes with no state change ("Job is preparing.", ...)."""
        with self.changed:
            self._events.publish(events.service_log_entry(self.project, record.job_id, text, _now()))

    def set_error(self, record: JobRecord, error: status_pb2.Status) -> None:
        """Vertex fills a FAILED job's `error` in about a minute after the end [training-service]."""
        with self.changed:
            record.job.error = error
            record.job.update_time = _now()
            self.wake(record)

    def advance(self, record: JobRecord, state: JobState) -> None:
        """Move a job forward on its way to running, unless a cancel or preemption got there
        first (a CANCELLING job must not flip back to PENDING or RUNNING)."""
        with self.changed:
            if record.active and not record.interrupted:
                self.transition(record, state)

    def finish(self, record: JobRecord, state: JobState, error: status_pb2.Status | None = None) -> None:
        with self.changed:
            if not record.active:
                return
            record.job.end_time = _now()
            self.transition(record, state, error)
            if record.capacity_held:
                record.capacity_held = 0
                self.wake()  # the machines are free: every job waiting for capacity looks again

    def stockout_queues_jobs(self) -> bool:
        with self.changed:
            return self._stockout.queue_seconds > 0

    def stockout_fails(self) -> bool:
        with self.changed:
            return self._stockout.fail

    def quota_holds_new_jobs(self) -> bool:
        with self.changed:
            return self._quota_shortfall == "queue"

    def _capacity_of(self, record: JobRecord) -> Capacity | None:
        """The limit a job's gang is held to: its chief pool's machine type's, else every type's."""
        pools = [p for p in record.job.job_spec.worker_pool_specs if p.replica_count > 0]
        machine_type = pools[0].machine_spec.machine_type if pools else None
        return self._capacities.get(machine_type) or self._capacities.get(None)

    def capacity_mode(self, record: JobRecord | None = None) -> str | None:
        with self.changed:
            if record is None:
                return next((c.mode for c in self._capacities.values()), None)
            capacity = self._capacity_of(record)
            return None if capacity is None else capacity.mode

    def take_capacity(self, record: JobRecord) -> bool:
        """Reserve the job's gang on its limited machine type if it fits in what live jobs on that
        limit leave free (all of it or nothing); True when it holds it now or needs none. Caller
        may hold the lock."""
        with self.changed:
            capacity = self._capacity_of(record)
            if record.capacity_held or capacity is None:
                return True
            needed = capacity.gang(record.job)
            if needed == 0:
                return True
            used = sum(
                r.capacity_held for r in self._jobs.values() if r.active and self._capacity_of(r) is capacity
            )
            if used + needed > capacity.replicas:
                return False
            record.capacity_held = needed
            return True

    def take_lost_create_reply(self) -> bool:
        """Whether this served create's reply is to be lost (see `lose_create_replies`)."""
        with self.changed:
            if self._lost_create_replies <= 0:
                return False
            self._lost_create_replies -= 1
            return True

    # ----- JobService -----------------------------------------------------------------------

    def _check_parent(self, parent: str) -> None:
        if not re.fullmatch(r"projects/[^/]+/locations/[^/]+", parent):
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent: {parent!r}.")
        if parent != self.parent:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"This devstack serves only {self.parent}, not {parent}.",
            )

    def _record(self, name: str) -> JobRecord:
        record = self._jobs.get(name)
        if record is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"The CustomJob does not exist: {name}.")
        return record

    def create_custom_job(self, request: CreateCustomJobRequest) -> CustomJob:
        self._check_parent(request.parent)
        problem = validate_custom_job(request.custom_job)
        if problem:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            simulation = simulation_for(request.custom_job.job_spec, self.simulation)
        except ValueError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        job = _copy(request.custom_job)
        for output_only in _OUTPUT_ONLY_FIELDS:
            if output_only in job:
                delattr(job, output_only)  # the server sets these; a client cannot
        with self.changed:
            if self.stopping:
                raise ApiError(grpc.StatusCode.UNAVAILABLE, "The Vertex stand-in is shutting down.")
            if self._quota_shortfall == "reject":
                raise ApiError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, QUOTA_TEXT.format(metric=self.behaviour.quota_metric)
                )
            job_id = str(next(self._ids))
            job.name = f"{self.parent}/customJobs/{job_id}"
            job.create_time = _now()
            record = JobRecord(
                job=job,
                job_id=job_id,
                stockout=self._stockout,
                wakeup=threading.Condition(self._lock),
                simulation=simulation,
            )
            self._jobs[job.name] = record
            self.transition(record, JobState.JOB_STATE_QUEUED)
            runner = JobRunner(self, record)
            record.thread = threading.Thread(target=runner.run, name=f"vertex-job-{job_id}", daemon=True)
            record.thread.start()
            return _copy(job)

    def get_custom_job(self, request: GetCustomJobRequest) -> CustomJob:
        with self.changed:
            return _copy(self._record(request.name).job)

    def list_custom_jobs(self, request: ListCustomJobsRequest) -> ListCustomJobsResponse:
        self._check_parent(request.parent)
        try:
            matches = parse_filter(request.filter)
        except FilterError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter: {exc}") from exc
        if request.page_size < 0:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative.")
        page_size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        # The token is the id of the last job of the previous page; newest jobs come first, so a
        # job created while paging never shifts the pages that follow.
        before: int | None = None
        if request.page_token:
            if not request.page_token.isdigit():
                raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "Invalid page_token.")
            before = int(request.page_token)
        mask = _read_mask(request)
        with self.changed:
            # Ids grow with creation, and the dict keeps creation order: newest first, no sort.
            newest_first = list(reversed(self._jobs.values()))
        # Each job is matched and copied under the lock on its own, not the page under one hold:
        # a page of a thousand takes tens of milliseconds to build, and Vertex answers a Get
        # while somebody else lists. A job that changes meanwhile is listed as it was when its
        # turn came, as a listing of a live service may.
        # The page is built as the raw protobuf message (no wrapper per job): a thousand wrappers
        # cost as much again as the copies.
        response = ListCustomJobsResponse.pb()()
        last_id, more = "", False
        for r in newest_first:
            if before is not None and int(r.job_id) >= before:
                continue
            with self.changed:
                if self._jobs.get(CustomJob.pb(r.job).name) is not r or not matches(r.job):
                    continue  # deleted since, or not asked for
                if len(response.custom_jobs) == page_size:
                    more = True
                    break
                _masked(r.job, mask, response.custom_jobs.add())
                last_id = r.job_id
        response.next_page_token = last_id if more else ""
        return ListCustomJobsResponse.wrap(response)

    def cancel_custom_job(self, request: CancelCustomJobRequest) -> empty_pb2.Empty:
        with self.changed:
            record = self._record(request.name)
            if not record.active:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Cannot cancel {request.name}: it is already in state {record.job.state.name}.",
                )
            if not record.cancel_requested:
                record.cancel_requested = True
                self.transition(record, JobState.JOB_STATE_CANCELLING)
        return empty_pb2.Empty()

    def delete_custom_job(self, request: DeleteCustomJobRequest) -> operations_pb2.Operation:
        with self.changed:
            record = self._record(request.name)
            if record.active:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"The CustomJob {request.name} cannot be deleted because it is in state "
                    f"{record.job.state.name}; cancel it first.",
                )
            del self._jobs[request.name]
            now = _now()
            metadata = DeleteOperationMetadata(
                generic_metadata=GenericOperationMetadata(create_time=now, update_time=now)
            )
            operation = operations_pb2.Operation(
                name=f"{request.name}/operations/{next(self._operation_ids)}", done=True
            )
            operation.metadata.Pack(DeleteOperationMetadata.pb(metadata))
            operation.response.Pack(empty_pb2.Empty())
            self._operations[operation.name] = operation
            return operation

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        with self.changed:
            operation = self._operations.get(request.name)
            if operation is None:
                raise ApiError(grpc.StatusCode.NOT_FOUND, f"Operation not found: {request.name}.")
            result = operations_pb2.Operation()
            result.CopyFrom(operation)
            return result

    # ----- fault injection and test helpers -------------------------------------------------

    def seed_finished(
        self,
        jobs: Iterable[CustomJob],
        state: JobState = JobState.JOB_STATE_SUCCEEDED,
        run_seconds: float = 60.0,
    ) -> list[str]:
        """Put CustomJobs that already ended (``state``, ``run_seconds`` long, ending now) into the
        store at once, with no runner, no replica and no log entry: history for the scale
        benchmarks. Each is validated as a create would be; returns their names, in order."""
        if state not in TERMINAL_STATES:
            raise ValueError(f"a seeded job must have ended; {state.name} is not a terminal state")
        names: list[str] = []
        with self.changed:
            ended = _now()
            started = datetime.fromtimestamp(ended.timestamp() - max(run_seconds, 0.0), UTC)
            for template in jobs:
                problem = validate_custom_job(template)
                if problem:
                    raise ValueError(problem)
                job = _copy(template)
                for output_only in _OUTPUT_ONLY_FIELDS:
                    if output_only in job:
                        delattr(job, output_only)
                job_id = str(next(self._ids))
                job.name = f"{self.parent}/customJobs/{job_id}"
                job.create_time = job.start_time = started
                job.end_time = job.update_time = ended
                job.state = state
                self._jobs[job.name] = JobRecord(
                    job=job, job_id=job_id, stockout=self._stockout, wakeup=threading.Condition(self._lock)
                )
                names.append(job.name)
            self.changed.notify_all()
        return names

    def preempt(
        self,
        job_name: str,
        grace_seconds: float | None = None,
        *,
        end_job: bool | None = None,
        error_code: int | None = None,
        error_text: str | None = None,
    ) -> bool:
        """Reclaim the job's VMs as Compute Engine reclaims Spot VMs: SIGTERM to every replica,
        SIGKILL after ``grace_seconds`` (default: the behaviour's 15 s; 0 = SIGKILL with no
        SIGTERM), then restart the job in place with its environment unchanged while restarts
        remain, else end it FAILED with the STOCKOUT-style error (``end_job=True`` ends it at
        once). On Vertex only Spot VMs are reclaimed; devstack reclaims whatever job it is told.
        ``error_code``/``error_text`` replace the behaviour's reclaim error for this reclaim
        (Google documents neither). False if the job had already ended or is being cancelled;
        KeyError if it is unknown."""
        with self.changed:
            record = self._jobs[job_name]
            if not record.active or record.cancel_requested:
                return False  # a cancelling job's machines are going away already
            if record.reclaim is None:
                grace = self.behaviour.reclaim_grace_seconds if grace_seconds is None else grace_seconds
                ends = self.behaviour.reclaim_ends_job if end_job is None else end_job
                record.reclaim = Reclaim(max(float(grace), 0.0), bool(ends), error_code, error_text)
            self.wake(record)
            return True

    def restart_in_place(self, job_name: str, grace_seconds: float | None = None) -> bool:
        """Reclaim the job's VMs and restart its replicas in place, as "Use Spot VMs with
        training" documents (https://cloud.google.com/vertex-ai/docs/training/use-spot-vms:
        "Compute Engine tries to restart the job up to six times"): SIGTERM, the grace, SIGKILL,
        then every replica runs again with its environment unchanged; the job stays the same
        CustomJob (RUNNING, or PENDING with `pending_during_restart`). Unlike `preempt`, whether
        `disableRetries` stops reclaim restarts (unknown) does not matter here; once the six
        restarts are used up the job ends FAILED as a reclaim does. False if the job had already
        ended or is being cancelled; KeyError if it is unknown."""
        with self.changed:
            record = self._jobs[job_name]
            if not record.active or record.cancel_requested:
                return False
            if record.reclaim is None:
                grace = self.behaviour.reclaim_grace_seconds if grace_seconds is None else grace_seconds
                record.reclaim = Reclaim(max(float(grace), 0.0), False, in_place=True)
            self.wake(record)
            return True

    def out_of_memory(self, job_name: str, replica: str = "workerpool0-0") -> bool:
        """Kill one replica as the container's memory limit would (SIGKILL, status 137); the
        job then ends FAILED with Vertex's documented out-of-memory error, not restarted.
        False if the job is not running that replica now; KeyError if the job is unknown."""
        with self.changed:
            record = self._jobs[job_name]
            target = next((r for r in record.replicas if r.plan.name == replica), None)
            if not record.active or target is None or target.exit_status is not None:
                return False
            target.out_of_memory = True
        if target.process is None:
            target.exit(128 + signal.SIGKILL)  # a simulated replica: no process to kill
        else:
            target.signal_group(signal.SIGKILL)
        return True

    def configure(self, **changes) -> VertexBehaviour:
        """Change behaviour knobs (``devstack.vertex.behaviour``); returns the previous behaviour,
        which ``restore`` puts back. Running jobs see the change at their next decision."""
        with self.changed:
            previous = self.behaviour
            self.behaviour = previous.with_changes(**changes)
            self.wake()
            return previous

    def restore(self, behaviour: VertexBehaviour) -> None:
        with self.changed:
            self.behaviour = behaviour
            self.wake()

    def set_quota_shortfall(self, mode: str | None) -> None:
        """Training-resource quota used up [training-service]: ``"queue"`` keeps new jobs QUEUED
        until cleared, ``"reject"`` answers creates 429 RESOURCE_EXHAUSTED with the text public
        issue threads show; None clears (and releases queued jobs)."""
        if mode not in QUOTA_MODES:
            raise ValueError(f"quota shortfall mode must be one of {QUOTA_MODES}, got {mode!r}")
        with self.changed:
            self._quota_shortfall = mode
            self.wake()

    def lose_create_replies(self, count: int = 1) -> None:
        """The next ``count`` creates are served (the job exists) but answered DEADLINE_EXCEEDED,
        as when the reply is lost on the way back."""
        if count < 0:
            raise ValueError("count must not be negative")
        with self.changed:
            self._lost_create_replies = count

    def set_capacity(
        self, replicas: int | None, machine_type: str | None = None, mode: str = "queue"
    ) -> None:
        """A stockout that leaves room for ``replicas`` replicas of ``machine_type`` (every machine
        type when None), shared by all jobs: a job whose gang needs more than the free replicas
        waits with ``mode="queue"`` (shown QUEUED, or PENDING with the behaviour knob
        ``capacity_wait_state``) until jobs end and free enough, or with ``mode="fail"`` is
        provisioned as a stockout is (retried while it lasts, then FAILED code 8 with the
        documented text). Jobs that already hold machines keep them. Each machine type has its
        own limit (a job is held to its chief pool's type's, else to the every-type one). None
        lifts that machine type's limit (with machine_type None: every limit) and releases the
        jobs waiting on it."""
        if mode not in CAPACITY_MODES:
            raise ValueError(f"capacity mode must be one of {CAPACITY_MODES}, got {mode!r}")
        if replicas is not None and replicas < 0:
            raise ValueError("replicas must not be negative")
        with self.changed:
            if replicas is not None:
                self._capacities[machine_type] = Capacity(int(replicas), machine_type, mode)
            elif machine_type is None:
                self._capacities.clear()
            else:
                self._capacities.pop(machine_type, None)
            self.wake()

    def set_reclaim_rate(self, per_hour: float, seed: int | None = None) -> None:
        """Reclaim running Spot jobs at random, `per_hour` times an hour each (a Poisson process
        per job, as `preempt` does it); 0 stops. FLEX_START and STANDARD jobs are never reclaimed:
        Spot VMs are preemptible, flex-start and on-demand ones are not (docs/devstack.md)."""
        self._reclaims.configure(per_hour, seed)

    def spot_running(self) -> list[str]:
        """Names of the running Spot jobs (what a reclaim may take)."""
        spot = Scheduling.Strategy.SPOT
        with self.changed:
            return [
                name
                for name, r in self._jobs.items()
                if r.job.state == JobState.JOB_STATE_RUNNING and r.job.job_spec.scheduling.strategy == spot
            ]

    def set_stockout(self, queue_seconds: float = 0.0, fail: bool = False) -> None:
        """New jobs wait ``queue_seconds`` before provisioning; with ``fail``, provisioning fails
        (retried 3 times, as documented, while the stockout lasts) and the job ends FAILED with
        code 8 and the documented text, without running. Defaults clear the stockout and release
        jobs waiting in it."""
        if queue_seconds < 0:
            raise ValueError("queue_seconds must not be negative")
        with self.changed:
            self._stockout = Stockout(float(queue_seconds), bool(fail))
            self.wake()

    def set_api_faults(
        self, rate: float, codes: Iterable[grpc.StatusCode | str | int] = (), seed: int | None = None
    ) -> None:
        """Answer ``rate`` of RPCs with one of ``codes`` instead of serving them; 0 clears."""
        self.faults.configure(rate, codes, seed)

    def set_api_delay(
        self,
        method: str,
        seconds: float = 0.0,
        *,
        until: threading.Event | None = None,
        only_if: Callable[[Any], bool] | None = None,
    ) -> None:
        """Serve ``method`` RPCs (e.g. "ListCustomJobs") ``seconds`` late, or hold them until the
        event ``until`` is set; ``only_if(request)`` picks which; 0 and no event clears."""
        self.delays.configure(method, seconds, until=until, only_if=only_if)

    def set_quota(self, enabled: bool, creates_per_minute: int = 60, other_per_minute: int = 600) -> None:
        """Enforce Vertex's per-minute limits; over them an RPC gets RESOURCE_EXHAUSTED."""
        self.quotas.configure(enabled, creates_per_minute, other_per_minute)

    def wait_for_state(self, job_name: str, states: set[JobState], timeout: float) -> CustomJob:
        """Block until the job is in one of ``states``; TimeoutError (with the last state) if not."""
        with self.changed:
            reached = self.changed.wait_for(
                lambda: job_name in self._jobs and self._jobs[job_name].job.state in states, timeout
            )
            if not reached:
                record = self._jobs.get(job_name)
                last = record.job.state.name if record else "missing"
                raise TimeoutError(f"{job_name} did not reach {sorted(s.name for s in states)}; it is {last}")
            return _copy(self._jobs[job_name].job)

    def wait_for_error(self, job_name: str, timeout: float) -> CustomJob:
        """Block until the ended job's `error` is set (Vertex sets it after the end)."""
        with self.changed:
            if not self.changed.wait_for(lambda: "error" in self._jobs[job_name].job, timeout):
                raise TimeoutError(f"{job_name} got no error within {timeout}s")
            return _copy(self._jobs[job_name].job)

    def replica_pids(self, job_name: str) -> dict[str, int]:
        """Process id of each started replica, by ``workerpool{i}-{j}``."""
        with self.changed:
            record = self._jobs[job_name]
            return {r.plan.name: r.process.pid for r in record.replicas if r.process is not None}

    def replica_log(self, job_name: str, replica: str = "workerpool0-0") -> Path:
        """Path of one replica's combined stdout/stderr."""
        with self.changed:
            return Path(self.workdir) / self._jobs[job_name].job_id / f"{replica}.log"

    def jobs(self) -> list[CustomJob]:
        """Every job not deleted, oldest first."""
        with self.changed:
            records = sorted(self._jobs.values(), key=lambda r: int(r.job_id))
            return [_copy(r.job) for r in records]


def start_vertex(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    project: str,
    region: str,
    workdir: str,
    event_sink: events.EventSink | None = None,
    python_bin_dir: str | None = None,
    provisioning_seconds: float = 0.5,
    kill_grace_seconds: float = 5.0,
    behaviour: VertexBehaviour | None = None,
    simulation: Simulation | None = None,
    first_job_id: int | None = None,
) -> VertexEmulator:
    """Start the JobService stand-in on ``host:port`` (0 picks a free port; see ``.host_port``)."""
    emulator = VertexEmulator(
        project=project,
        region=region,
        workdir=workdir,
        event_sink=event_sink,
        python_bin_dir=python_bin_dir,
        provisioning_seconds=provisioning_seconds,
        kill_grace_seconds=kill_grace_seconds,
        behaviour=behaviour,
        simulation=simulation,
        first_job_id=first_job_id,
    )
    emulator.serve(host, port)
    return emulator
