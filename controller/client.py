"""A Python client for Relaunch: submit a job request, learn the controller's verdict, follow the
job, cancel it, read its status and timeline. The `relaunch` CLI is built on it.

    from controller.client import Client

    client = Client.from_config()            # the same settings as the CLI (`relaunch config`)
    verdict = client.submit("examples/demo.yaml")
    if not verdict.accepted:
        raise SystemExit("; ".join(verdict.reasons))
    final = client.wait(verdict.job_id)      # the status document once the job has ended
    print(final["phase"])

How a verdict is known (docs/client.md): requests go to the controller through Pub/Sub, which
has no reply channel, so the client reads the controller's state store (the same one `relaunch
status` reads, sqlite:///... on devstack, gs://bucket/prefix in production, readable with the
user's own credentials). An accepted request becomes the document `jobs/<jobId>` whose
`fingerprint` is the request's; a rejected one becomes `rejected/<digest>`, where the digest is
the first 24 hex digits of SHA-256 of the exact bytes published. The client publishes bytes it
serialised itself, so it knows the digest before it publishes.

Google client libraries are imported only by the calls that need them: reading status pulls in
no Pub/Sub client.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.jobrecord import JobRecord

TERMINAL = ("succeeded", "failed", "cancelled")
# Fewer seconds between two reads of the store would cost more than it tells.
DEFAULT_POLL_SECONDS = 2.0
# A controller being started beside the submit (the README's flow) writes its first heartbeat
# within seconds; after this long without one, nobody is there to give a verdict.
CONTROLLER_GRACE_SECONDS = 15.0


class ClientError(Exception):
    """Something the caller should see as one line: a missing setting, an unknown job."""


class JobNotFound(ClientError):
    def __init__(self, job_id: str):
        super().__init__(f"no job {job_id!r} in the state store (see `relaunch status` for the jobs there)")
        self.job_id = job_id


class WaitTimeout(ClientError):
    def __init__(self, job_id: str, last: dict | None, seconds: float):
        state = last["phase"] if last else "not accepted"
        super().__init__(f"{job_id} still {state} after {seconds:g}s (the job goes on)")
        self.job_id = job_id
        self.last = last


@dataclass(frozen=True)
class Verdict:
    """What the controller did with one published request.

    outcome: 'accepted' (the job record exists with this request's fingerprint), 'unchanged'
    (the same request was accepted before: nothing was published; `phase` says where that job
    is, `ended` whether it has finished), 'cancel requested', 'rejected' (reasons say why),
    'no controller' (published, but no controller has shown a sign of life on the state store:
    the request waits in the queue for one) or 'no verdict' (published, but the controller had
    not decided within the wait; it may still).
    """

    job_id: str
    outcome: str
    message_id: str | None = None
    reasons: list[str] = field(default_factory=list)
    phase: str | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome in ("accepted", "unchanged", "cancel requested")

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL

    @property
    def rejected(self) -> bool:
        return self.outcome == "rejected"


def message_digest(data: bytes) -> str:
    """The key suffix the controller files a rejected message under (`rejected/<digest>`)."""
    return hashlib.sha256(data).hexdigest()[:24]


class Client:
    def __init__(
        self,
        *,
        state_store: str | None,
        project: str = "relaunch-dev",
        requests_topic: str = "relaunch-requests",
        rpc_timeout: float = 30.0,
        verdict_seconds: float = 60.0,
        store=None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`state_store` is the controller's RELAUNCH_STATE_STORE URL (or pass an open `store`)."""
        self.state_store = state_store
        self.project = project
        self.requests_topic = requests_topic
        self.rpc_timeout = rpc_timeout
        self.verdict_seconds = verdict_seconds
        self._store = store
        self._sleep = sleep
        self._clock = clock

    @classmethod
    def from_config(cls, **overrides: Any) -> Client:
        """A client with the CLI's settings (environment, `relaunch config`, devstack)."""
        from controller import userconfig as config

        config.export_to_environ()  # PUBSUB_EMULATOR_HOST etc. for the Google clients
        values: dict[str, Any] = {
            "state_store": config.get("state_store"),
            "project": config.get("project"),
            "requests_topic": config.get("requests_topic"),
            "rpc_timeout": config.seconds("rpc_timeout_seconds"),
            "verdict_seconds": config.seconds("verdict_seconds"),
        }
        values.update(overrides)
        return cls(**values)

    # ---- reading -----------------------------------------------------------------------------
    @property
    def store(self):
        if self._store is None:
            if not self.state_store:
                raise ClientError("state_store is not set (the controller's RELAUNCH_STATE_STORE)")
            if self.state_store.startswith("sqlite://"):
                path = self.state_store[len("sqlite://") :]
                if path and not Path(path).exists():
                    raise ClientError(
                        f"no state store at {path} (has the controller run with it? set "
                        "RELAUNCH_STATE_STORE or `relaunch config set state_store URL` to the controller's)"
                    )
            from controller.store.factory import open_store

            self._store = open_store(self.state_store)
        return self._store

    def store_exists(self) -> bool:
        """False while an SQLite store has not been created yet (the controller is starting)."""
        if self._store is None and self.state_store and self.state_store.startswith("sqlite://"):
            return Path(self.state_store[len("sqlite://") :]).exists()
        return True

    def _stored_if_any(self, job_id: str) -> dict | None:
        return self.stored(job_id) if self.store_exists() else None

    def stored(self, job_id: str) -> dict | None:
        """The job's stored document (request, state, timeline), or None."""
        from controller.store.base import check_key
        from controller.store.keys import job_key

        try:
            check_key(job_key(job_id))
        except ValueError:
            return None  # not a name any job can have
        record = self.store.get(job_key(job_id))
        return record.document if record else None

    def status(self, job_id: str | None = None, *, timeline: bool = False) -> Any:
        """One job's status document (JobNotFound if unknown), or a list of every job's."""
        from controller.store.keys import JOBS_PREFIX

        if job_id is None:
            return [
                with_goodput(r.document, time.time(), timeline=timeline) for r in self.store.list(JOBS_PREFIX)
            ]
        document = self.stored(job_id)
        if document is None:
            raise JobNotFound(job_id)
        return with_goodput(document, time.time(), timeline=timeline)

    def controller_heartbeat(self) -> dict | None:
        """The leading controller's last sign of life in the store ({"holder", "time",
        "everySeconds"}), or None if no controller ever wrote one there."""
        from controller.store.heartbeat import last_beat

        return last_beat(self.store) if self.store_exists() else None

    def controller_alive(self) -> bool:
        """Whether a controller has shown a sign of life on this state store recently."""
        from controller.store.heartbeat import is_fresh

        return is_fresh(self.controller_heartbeat(), time.time())

    def committed_checkpoint_step(self, checkpoint_uri: str) -> int | None:
        """The step of the newest committed checkpoint under a job's checkpoint root, read from
        storage itself (the controller's record learns of it only at its next look)."""
        from controller.adapters.checkpoints import committed_step

        return committed_step(checkpoint_uri, timeout=self.rpc_timeout)

    def events(self, job_id: str) -> list[dict]:
        """The job's timeline, oldest first: {"time", "attempt", "kind", "what", ...} entries
        (`kind`: one of controller.readmodel.jobs.EVENT_KINDS)."""
        from controller.readmodel.jobs import with_kind

        document = self.stored(job_id)
        if document is None:
            raise JobNotFound(job_id)
        # Entries are appended as transitions are stored; an attempt's "running" entry carries
        # Vertex's start time, so order by time (stable, keeping stored order for ties).
        entries = sorted(JobRecord.from_dict(document).timeline, key=lambda e: e.get("time") or 0)
        return [with_kind(item) for item in entries]

    # ---- writing -----------------------------------------------------------------------------
    def submit(self, request: Any, *, wait_for_verdict: bool = True, allow_local: bool = False) -> Verdict:
        """Validate and publish a job request: a file path, YAML/JSON text or bytes, or a dict.

        Raises `controller.request.RequestInvalid` (with `.problems`) for an invalid request,
        before publishing anything. Then waits up to `verdict_seconds` for the controller.
        """
        from controller.request import CancelRequest, Problem, RequestInvalid, parse_request
        from controller.settings import environ_prices

        parsed = parse_request(
            _request_bytes(request), allow_local_checkpoints=allow_local, prices=environ_prices()
        )
        if isinstance(parsed, CancelRequest):
            raise RequestInvalid([Problem("action", f"a cancel request; use cancel({parsed.job_id!r})")])
        stored = self._stored_if_any(parsed.job_id)
        existing = JobRecord.from_dict(stored) if stored is not None else None
        if existing is not None and existing.fingerprint == parsed.fingerprint():
            # Like `kubectl apply` on an unchanged object: nothing to do, and nothing published.
            return Verdict(parsed.job_id, "unchanged", phase=existing.state.phase.value)
        data = json.dumps(parsed.to_json()).encode()
        message_id = self.publish(data)
        if not wait_for_verdict:
            return Verdict(parsed.job_id, "published", message_id)
        return self._await_verdict(parsed.job_id, data, message_id, parsed.fingerprint())

    def cancel(self, job_id: str, *, wait_for_verdict: bool = True) -> Verdict:
        """Ask the controller to cancel a job. JobNotFound (nothing published) if it has no such job."""
        if self.stored(job_id) is None:
            raise JobNotFound(job_id)
        data = json.dumps({"jobId": job_id, "action": "cancel"}).encode()
        message_id = self.publish(data)
        if not wait_for_verdict:
            return Verdict(job_id, "published", message_id)
        return self._await_verdict(job_id, data, message_id, None)

    def publish(self, data: bytes) -> str:
        """Publish raw bytes to the requests topic; the server's message id. Every try has the
        RPC deadline, so an unreachable Pub/Sub fails in that time, not in the library's ten
        minutes; this is the same publish path the controller and the demo use."""
        from controller.adapters.pubsub import TopicPublisher

        topic = self.requests_topic
        if not topic.startswith("projects/"):
            topic = f"projects/{self.project}/topics/{topic}"
        publisher = TopicPublisher(timeout=self.rpc_timeout)
        try:
            return publisher.publish(topic, data)
        finally:
            publisher.client.stop()

    def _await_verdict(self, job_id: str, data: bytes, message_id: str, fingerprint: str | None) -> Verdict:
        from controller.store.keys import cancel_key, rejected_key

        started = self._clock()
        deadline = started + self.verdict_seconds
        rejected = rejected_key(message_digest(data))
        while True:
            stored = self._stored_if_any(job_id)
            document = JobRecord.from_dict(stored) if stored is not None else None
            if fingerprint is not None and document is not None:
                if document.fingerprint == fingerprint:
                    return Verdict(job_id, "accepted", message_id)
                # The controller rejects a second, different request for a jobId it has.
                reason = f"jobId: {job_id!r} already exists with a different request body; use a new jobId"
                return Verdict(job_id, "rejected", message_id, [reason])
            if fingerprint is None and document is not None and _cancel_seen(document):
                return Verdict(job_id, "cancel requested", message_id)
            if fingerprint is None and self.store_exists() and self.store.get(cancel_key(job_id)):
                # The intake records a cancel on its own; the leader applies it to the job next.
                return Verdict(job_id, "cancel requested", message_id)
            record = self.store.get(rejected) if self.store_exists() else None
            if record is not None:
                reason = str(record.document.get("reason") or record.document.get("status") or "rejected")
                return Verdict(job_id, "rejected", message_id, [r.strip() for r in reason.split(";")])
            remaining = deadline - self._clock()
            if remaining <= 0:
                return Verdict(job_id, "no verdict", message_id)
            if self._clock() - started >= CONTROLLER_GRACE_SECONDS and not self.controller_alive():
                return Verdict(job_id, "no controller", message_id)
            self._sleep(min(0.25, remaining))  # polling the store: Pub/Sub has no reply channel

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll: float = DEFAULT_POLL_SECONDS,
        until: Callable[[dict], bool] | None = None,
        on_change: Callable[[dict], None] | None = None,
        appear_within: float | None = None,
    ) -> dict:
        """Follow a job until it ends (or `until(status)` holds); its last status document.

        `on_change(status)` is called each time the phase, attempt or checkpoint step changes.
        WaitTimeout after `timeout` seconds; JobNotFound if the job never appears in that time
        (or, without a timeout, within `verdict_seconds`; or within `appear_within` if given:
        0 for a job that must exist already).
        """
        started = self._clock()
        grace = appear_within if appear_within is not None else timeout
        first_seen_by = started + (grace if grace is not None else self.verdict_seconds)
        deadline = None if timeout is None else started + timeout
        last_key = None
        status = None
        while True:
            document = self._stored_if_any(job_id)
            if document is not None:
                status = with_goodput(document, time.time(), timeline=False)
                key = (status["phase"], status["attempt"], status["latestCheckpointStep"])
                if key != last_key:
                    last_key = key
                    if on_change is not None:
                        on_change(status)
                if (until or _ended)(status):
                    return status
            elif self._clock() >= first_seen_by:
                if deadline is not None and appear_within is None:
                    raise WaitTimeout(job_id, None, timeout)
                raise JobNotFound(job_id)
            if deadline is not None and self._clock() >= deadline:
                raise WaitTimeout(job_id, status, timeout)
            pause = poll if deadline is None else min(poll, max(0.0, deadline - self._clock()))
            self._sleep(pause)  # polling the store: the client has no channel to be told of changes


def _ended(status: dict) -> bool:
    return status["phase"] in TERMINAL


def _cancel_seen(document: JobRecord) -> bool:
    return document.state.cancel_requested or document.state.phase.terminal


def _request_bytes(request: Any) -> bytes:
    if isinstance(request, bytes):
        return request
    if isinstance(request, dict):
        return json.dumps(request).encode()
    if isinstance(request, os.PathLike):
        return Path(request).read_bytes()
    if isinstance(request, str):
        # A path to an existing file, or the request text itself.
        if "\n" not in request and len(request) < 4096 and Path(request).is_file():
            return Path(request).read_bytes()
        return request.encode()
    raise TypeError(f"a request is a path, text, bytes or a dict, not {type(request).__name__}")


def with_goodput(document: dict, now: float, *, timeline: bool = True) -> dict:
    """The status document of a stored job plus its goodput figures (what `status --json` prints)."""
    from controller.readmodel.goodput import compute
    from controller.readmodel.jobs import status_document

    out = status_document(document, with_timeline=timeline)
    result = compute(document, now)
    out["goodput"] = {
        "ratio": result.ratio,
        "totalSeconds": result.total,
        "productiveSeconds": result.productive,
        "lostSeconds": result.lost,
        "waitingForCapacitySeconds": result.waiting_for_capacity,
        "restartingSeconds": result.restarting,
        "stepsPerSecond": result.step_rate,
        # Work at the size actually run (an elastic job may run on fewer replicas).
        "nodeSeconds": result.node_seconds,
        "productiveNodeSeconds": result.productive_node_seconds,
    }
    return out
