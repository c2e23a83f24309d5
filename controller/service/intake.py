"""Accepting requests: parse, validate and durably record one job or cancel request.

The intake is the only writer of new job records. It returns once the effect is stored, so the
caller (a Pub/Sub callback, or the push endpoint) may ack; bad input is recorded under
`rejected/`, copied to the dead-letter topic with its reason and alerted, and reported as
`invalid` / `conflict`. Anything else raises, and the caller does not ack; callers go through
`IntakeGuard` (intake_guard.py), which dead-letters a message that keeps failing while the store
answers, so that only the store being down holds requests back. A recorded job's id goes into the
work queue (`enqueue`); its reconcile submits it. The intake decides nothing about a job.

Intake needs no leadership. Every record it writes is an unfenced, create-only write (a job, a
cancel, a rejection), so any instance, leader or standby, may take a delivery and record it, and
a delivery seen twice records nothing twice. The leader acts on what is recorded.

A job request claims its checkpoint root (ownership.py) and then creates its record, reading
nothing first, both inside the store's `together`: a new job costs, on SQLite, one write of the
group commit (one commit wait) holding the claim, its neighbour reads and the record; on GCS two
create-only writes and the neighbour reads, one after the other. A duplicate or a conflict shows
itself as a refused create (or a refused claim), and only then is the job's record read. A conflicting request for a job whose root is another withdraws the claim
it made on its way, and so does its redelivery if a crash came in between: a claim naming a job
on a root that is not the job's own backs nothing. A crash between the claim and the record
leaves the claim alone, and the redelivery finds it its own and records the job.

A cancel is recorded under `cancels/{job}` whether or not the job exists yet. Every reconcile of
a job that decides reads its cancel record as one of the facts the core decides on, so a job
whose cancel came first is cancelled on its first look that decides (no Vertex job is ever made):
at once when a create slot is free; for a new job waiting for its create-slot turn (whose looks
decide nothing and read nothing), at its turn or by the next pass, whose listing of the cancel
records finds it. No cancel is lost to the order in which things arrive.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from controller import logs
from controller.core.decide import new_job
from controller.jobrecord import JobRecord
from controller.readmodel.jobs import entry
from controller.request import CancelRequest, JobRequest, RequestInvalid, parse_request
from controller.request.nesting import nests_too_deeply
from controller.service.alerts import AlertSink
from controller.service.ownership import (
    Refusal,
    claim_checkpoint_root,
    release_checkpoint_root,
    root_of,
)
from controller.settings import Settings
from controller.store import AlreadyExists, StateStore, StoreOps, Versioned
from controller.store.keys import cancel_key, job_key, rejected_key_for_payload

log = logs.get("relaunch.intake")

IntakeStatus = Literal["accepted", "duplicate", "conflict", "invalid", "cancel", "internal"]
INTAKE_STATUSES: frozenset[str] = frozenset(
    {"accepted", "duplicate", "conflict", "invalid", "cancel", "internal"}
)

# How much of a rejected message the store keeps (the whole message goes to the dead-letter topic).
STORED_PAYLOAD_BYTES = 65536


@dataclass(frozen=True)
class IntakeResult:
    # accepted: new job recorded; duplicate: same request seen before (no-op);
    # conflict: same jobId, different spec (recorded, dead-lettered); invalid: unparseable or
    # failed validation (recorded, dead-lettered); cancel: a cancel request was recorded;
    # internal: handling it kept failing for a reason not in the request (recorded,
    # dead-lettered; see intake_guard.py).
    status: IntakeStatus
    job_id: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.status not in INTAKE_STATUSES:
            raise ValueError(f"unknown intake status {self.status!r}")


class Intake:
    def __init__(
        self,
        store: StateStore,
        settings: Settings,
        alerts: AlertSink,
        *,
        enqueue: Callable[[str], object] = lambda job_id: None,
        # A new job's id and the record just created for it (its first look starts from it).
        enqueue_created: Callable[[str, Versioned], object] | None = None,
        remember: Callable[[JobRequest], None] = lambda request: None,
        clock: Callable[[], float] = time.time,
        metrics: Any | None = None,
        dead_letter: Callable[[bytes, str], None] | None = None,
    ):
        self.store = store
        self.settings = settings
        self.alerts = alerts
        self._enqueue = enqueue
        self._enqueue_created = enqueue_created or (lambda job_id, record: enqueue(job_id))
        self._remember = remember
        self.clock = clock
        self.metrics = metrics
        self._dead_letter = dead_letter

    def accept(
        self, data: bytes, attributes: dict[str, str] | None = None, *, message_id: str | None = None
    ) -> IntakeResult:
        """`message_id`: the delivery's, named in the "job accepted" line (for a Pub/Sub
        delivery, that line is the one its callback leaves: see daemon.Controller._on_request)."""
        settings = self.settings
        try:
            request = parse_request(
                data, allow_local_checkpoints=settings.allow_local_checkpoints, prices=settings.prices
            )
        except RequestInvalid as error:
            reason = "; ".join(str(p) for p in error.problems)
            return self._reject(data, "invalid", reason, _guess_job_id(data))

        if isinstance(request, CancelRequest):
            return self._record_cancel(request.job_id)

        canonical = request.to_json()
        fingerprint = request.fingerprint(canonical)
        now = self.clock()
        state = new_job(
            request.job_id,
            request.restart_policy,
            now,
            request.elastic,
            tuple(p.name for p in request.placements),
        )
        timeline = [entry(now, 0, "request accepted")]
        document = JobRecord(canonical, fingerprint, state, tuple(timeline)).to_dict()
        key = job_key(request.job_id)

        def claim_and_record(store: StoreOps) -> Refusal | int | None:
            # The claim first, then the job: a new job (the common case) costs no read of a record
            # that is not there; a duplicate or a conflict is told apart by the create's refusal.
            # Unfenced and create-only like every intake record: any instance may write them.
            refusal = claim_checkpoint_root(store, request.job_id, request.checkpoint_uri, settings)
            if refusal is not None:
                return refusal
            try:
                return store.create(key, document)
            except AlreadyExists:
                return None  # recorded before: the same request again, or a conflict

        # SQLite: one write of the group commit; GCS: the claim's steps, then the job's (ownership.py).
        outcome = self.store.together(claim_and_record)
        if isinstance(outcome, Refusal):
            existing = self.store.get(key)
            if existing is None:
                return self._reject(data, outcome.status, outcome.reason, request.job_id)
            # An invalid root was never claimed: nothing to withdraw.
            release = outcome.status != "invalid"
            return self._known_job(data, request, fingerprint, existing, release=release)
        if outcome is None:
            existing = self.store.get(key)
            if existing is None:  # deleted by retention since: the next delivery starts afresh
                raise AlreadyExists(key)
            return self._known_job(data, request, fingerprint, existing, release=True)
        self._remember(request)
        log.info("job accepted", job_id=request.job_id, attempt=0, message_id=message_id)
        # Its reconcile submits attempt 1 (or cancels it), starting from this record.
        self._enqueue_created(request.job_id, Versioned(key, document, outcome))
        return IntakeResult("accepted", request.job_id, "accepted")

    def _known_job(
        self, data: bytes, request: JobRequest, fingerprint: str, existing: Versioned, *, release: bool
    ) -> IntakeResult:
        """The request names a job already recorded: the same request again, or a conflict."""
        recorded = JobRecord.from_dict(existing.document)
        if recorded.fingerprint == fingerprint:
            return IntakeResult("duplicate", request.job_id, "already accepted; nothing to do")
        if release and root_of(recorded.checkpoint_uri or "") != root_of(request.checkpoint_uri):
            # The claim this request made (now, or in a try that crashed before this point) names
            # the job, but the job's own root is another: it backs nothing, so it goes.
            release_checkpoint_root(self.store, request.job_id, request.checkpoint_uri)
        return self._reject(
            data,
            "conflict",
            f"jobId: {request.job_id!r} already exists with a different request body; "
            "use a new jobId to run a different job",
            request.job_id,
        )

    def _record_cancel(self, job_id: str) -> IntakeResult:
        now = self.clock()
        try:
            self.store.create(cancel_key(job_id), {"jobId": job_id, "time": now})
        except AlreadyExists:
            pass  # cancelled before: the first record stands
        known = self.store.get(job_key(job_id)) is not None
        log.info("cancel recorded", job_id=job_id, attempt=None, job_known=known)
        if known:
            self._enqueue(job_id)  # the leader's reconcile applies it at once
            return IntakeResult("cancel", job_id, "cancel requested")
        return IntakeResult("cancel", job_id, "cancel recorded; the job will be born cancelled")

    def reject_unhandled(self, data: bytes, error: BaseException) -> IntakeResult:
        """Set aside a message whose handling keeps failing (a bug, not its content) the way an
        invalid one is, with the reason `internal: <exception type>`."""
        return self._reject(data, "internal", f"internal: {type(error).__name__}", _guess_job_id(data))

    def _reject(self, data: bytes, status: IntakeStatus, reason: str, job_id: str | None) -> IntakeResult:
        record = {
            "time": self.clock(),
            "status": status,
            "reason": reason,
            "jobId": job_id,
            "payload": data[:STORED_PAYLOAD_BYTES].decode("utf-8", errors="replace"),
        }
        try:
            self.store.create(rejected_key_for_payload(data), record)
        except AlreadyExists:
            pass  # the same bad message again: already recorded and alerted
        else:
            if self._dead_letter is not None:
                self._dead_letter(data, reason)
            self.alerts.raise_alert(
                "request_rejected",
                "WARNING",
                f"request rejected ({status}): {reason}",
                job_id=job_id,
                details={"reason": reason, "status": status},
                cause=_rejection_cause(status, reason),
            )
            if self.metrics is not None:
                self.metrics.rejected(status)
        log.warning("request rejected", job_id=job_id, attempt=None, status=status, reason=reason)
        return IntakeResult(status, job_id, reason)


def _rejection_cause(status: str, reason: str) -> str:
    """Cooldown cause of a rejection: anyone may publish a bad request naming a job, so only the
    same rejection (status and reason) may suppress another; a real conflict always alerts."""
    return f"{status}:{hashlib.sha256(reason.encode()).hexdigest()[:16]}"


def _guess_job_id(data: bytes) -> str | None:
    """The jobId of a request that failed validation, when one can be read, for the alert."""
    if nests_too_deeply(data):
        return None
    try:
        value = json.loads(data).get("jobId")
    except Exception:  # anything unreadable simply has no job id to report
        return None
    return value if isinstance(value, str) and len(value) <= 63 else None
