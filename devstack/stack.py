"""The whole devstack in one object: Pub/Sub, GCS and Vertex stand-ins plus the control server.

    stack = DevStack("/tmp/devstack").start()
    os.environ.update(stack.env())      # every Google client now talks to the stand-ins
    ...
    stack.preempt(job_name)              # fault injection, also over HTTP (devstack.control)
    stack.stop()

Vertex's job-state LogEntries are published, as JSON, to the Pub/Sub topic
`vertex-job-events`, as a Cloud Logging sink would; nothing else is created.

Regions: `DevStack(dir, region="us-central1", regions=("europe-west4",))` runs one Vertex
stand-in per region, each on its own port (Vertex AI is regional: each region has its own
endpoint, REGION-aiplatform.googleapis.com), each with its own jobs, capacity, stockouts, reclaim
rate and queue. The fault-injection methods take `region=` (default: the first); a job's own
region is read from its name. All regions log to the one events topic, as one project-wide sink.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.cloud.aiplatform_v1 import CustomJob, JobState
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from devstack.control import ControlServer
from devstack.gcs import start_gcs
from devstack.pubsub import start_pubsub
from devstack.vertex import start_vertex
from devstack.vertex.simulated import Simulation

log = logging.getLogger(__name__)

EVENTS_TOPIC = "vertex-job-events"


def settle_interpreter() -> None:
    """For a process that hosts the stand-ins. They share its interpreter lock and garbage
    collector, as Google's services share nothing: a 1 ms switch interval keeps one stand-in's
    work (a 1,000-job listing) from holding up another's answer, and full collections, which
    stalled every answer 130-290 ms with a thousand jobs held, come ten times less often."""
    sys.setswitchinterval(0.001)
    gc.set_threshold(2_000, 10, 100)


class DevStack:
    """State lives under `dir`: GCS objects in dir/gcs (kept across restarts), replica
    logs in dir/vertex/<job id>/. Pub/Sub and Vertex jobs live in memory."""

    def __init__(
        self,
        dir: str,
        project: str = "relaunch-dev",
        region: str = "us-central1",
        host: str = "127.0.0.1",
        regions: tuple[str, ...] = (),
        **vertex_options: Any,
    ):
        """`vertex_options` go to `start_vertex` (e.g. `provisioning_seconds`, `kill_grace_seconds`)."""
        self.dir = Path(dir).resolve()
        self.vertex_options = vertex_options
        # Every log entry Vertex wrote, in order, also kept here for tests that feed hints by hand.
        self.entries: list[dict] = []
        self.project = project
        self.region = region
        self.regions = tuple(dict.fromkeys((region, *regions)))
        self.host = host
        self.pubsub = self.gcs = self.vertex = self.control = None
        self.vertices: dict[str, Any] = {}  # region -> its Vertex stand-in (the first is `vertex`)
        self._publisher = None
        self.events_topic = f"projects/{project}/topics/{EVENTS_TOPIC}"

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, progress: Callable[[str], None] | None = None) -> DevStack:
        """Start every stand-in; `progress` (if given) hears of each one as it comes up."""
        say = progress or (lambda text: None)
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.pubsub = start_pubsub(self.host, 0)
            say(f"Pub/Sub stand-in listening on {self.pubsub.host_port}")
            self.gcs = start_gcs(self.host, 0, data_dir=str(self.dir / "gcs"))
            say(f"Cloud Storage stand-in listening on {self.gcs.url}")
            # A channel of our own: the stack must not depend on (or change) os.environ.
            channel = grpc.insecure_channel(self.pubsub.host_port)
            # One message per batch: the client's default waits up to 10 ms for a batch to fill,
            # and every state event waited that long (a stand-in's delay, not the sink's).
            self._publisher = pubsub_v1.PublisherClient(
                batch_settings=pubsub_v1.types.BatchSettings(max_messages=1),
                transport=PublisherGrpcTransport(channel=channel),
            )
            try:
                self._publisher.create_topic(name=self.events_topic)
            except gexc.AlreadyExists:
                pass
            first_id = time.time_ns() // 1000
            for index, region in enumerate(self.regions):
                self.vertices[region] = start_vertex(
                    self.host,
                    0,
                    project=self.project,
                    region=region,
                    workdir=str(self.dir / ("vertex" if index == 0 else f"vertex-{region}")),
                    event_sink=self._publish_event,
                    # A range of ids per region: a job id names one job in the project.
                    first_job_id=first_id + index * 10**12,
                    **self.vertex_options,
                )
                where = f" ({region})" if len(self.regions) > 1 else ""
                say(f"Vertex AI stand-in listening on {self.vertices[region].host_port}{where}")
            self.vertex = self.vertices[self.region]
            self.control = ControlServer(self, self.host, 0)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything that was started (replica processes included); safe to repeat."""
        for region, emulator in list(self.vertices.items())[1:]:
            try:
                emulator.stop()
            except Exception:  # keep stopping the others
                log.exception("stopping the Vertex stand-in of %s failed", region)
        self.vertices = {}
        for part in ("control", "vertex", "gcs", "pubsub"):
            server = getattr(self, part)
            if server is None:
                continue
            try:
                server.stop()
            except Exception:  # keep stopping the others
                log.exception("stopping the %s stand-in failed", part)
            setattr(self, part, None)
        if self._publisher is not None:
            self._publisher.stop()
            self._publisher = None

    def __enter__(self) -> DevStack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _publish_event(self, entry: dict) -> None:
        # Called on the Vertex stand-in's single event thread; waiting for each publish
        # keeps the topic in transition order.
        self.entries.append(entry)
        data = json.dumps(entry).encode("utf-8")
        self._publisher.publish(self.events_topic, data).result(timeout=30)

    # ---- what clients need -----------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {
            "PUBSUB_EMULATOR_HOST": self.pubsub.host_port,
            "STORAGE_EMULATOR_HOST": self.gcs.url,
            "RELAUNCH_VERTEX_ENDPOINT": self.vertex.host_port,
            "RELAUNCH_DEVSTACK_CONTROL": self.control.url,
            "GOOGLE_CLOUD_PROJECT": self.project,
            "RELAUNCH_REGION": self.region,
        }
        if len(self.regions) > 1:
            env["RELAUNCH_REGIONS"] = ",".join(self.regions[1:])
            env["RELAUNCH_VERTEX_ENDPOINTS"] = ",".join(
                f"{r}={v.host_port}" for r, v in self.vertices.items()
            )
        return env

    def in_region(self, region: str | None) -> Any:
        """The Vertex stand-in of `region` (None: the first region's)."""
        if region is None:
            return self.vertex
        if region not in self.vertices:
            raise ValueError(f"region {region!r} is not one of this devstack's: {', '.join(self.regions)}")
        return self.vertices[region]

    def _of_job(self, job_name: str) -> Any:
        """The stand-in that holds a job, by the region in its name."""
        parts = job_name.split("/")
        return self.in_region(parts[3] if len(parts) > 3 and parts[2] == "locations" else None)

    # ---- fault injection (the same names over HTTP: devstack.control.ControlClient) --------
    def preempt(
        self,
        job_name: str,
        grace_seconds: float | None = None,
        *,
        end_job: bool | None = None,
        error_code: int | None = None,
        error_text: str | None = None,
    ) -> bool:
        """Reclaim a job's VMs (SIGTERM, grace, SIGKILL; then an in-place restart or, with
        `end_job` or no restarts left, a FAILED job with `error_code`/`error_text`, default the
        behaviour's); False if it had already ended. KeyError if unknown."""
        return self._of_job(job_name).preempt(
            job_name, grace_seconds, end_job=end_job, error_code=error_code, error_text=error_text
        )

    def restart_in_place(self, job_name: str, grace_seconds: float | None = None) -> bool:
        """Reclaim a job's VMs and restart its replicas in place (the same CustomJob), as Vertex
        documents for Spot; False if it had already ended. KeyError if unknown."""
        return self._of_job(job_name).restart_in_place(job_name, grace_seconds)

    def out_of_memory(self, job_name: str, replica: str = "workerpool0-0") -> bool:
        """Kill one replica as its memory limit would; the job ends with Vertex's OOM error."""
        return self._of_job(job_name).out_of_memory(job_name, replica)

    def quota_shortfall(self, mode: str | None, region: str | None = None) -> None:
        """Training quota used up: "queue" holds new jobs QUEUED, "reject" answers creates 429."""
        self.in_region(region).set_quota_shortfall(mode)

    def lose_create_replies(self, count: int = 1) -> None:
        """Serve the next `count` creates but answer them DEADLINE_EXCEEDED."""
        self.vertex.lose_create_replies(count)

    def configure(self, **changes: Any) -> None:
        """Change Vertex behaviour knobs (devstack.vertex.behaviour)."""
        self.vertex.configure(**changes)

    def capacity(
        self,
        replicas: int | None,
        machine_type: str | None = None,
        mode: str = "queue",
        region: str | None = None,
    ) -> None:
        """Room for ``replicas`` replicas of ``machine_type`` (None: any); None lifts the limit."""
        self.in_region(region).set_capacity(replicas, machine_type, mode)

    def stockout(self, queue_seconds: float = 0.0, fail: bool = False, region: str | None = None) -> None:
        """New jobs queue `queue_seconds`, then fail with code 8 if `fail`; defaults clear it."""
        self.in_region(region).set_stockout(queue_seconds=queue_seconds, fail=fail)

    def reclaim_rate(self, per_hour: float, seed: int | None = None, region: str | None = None) -> None:
        """Running Spot jobs of the region are reclaimed at random, `per_hour` each; 0 stops."""
        self.in_region(region).set_reclaim_rate(per_hour, seed)

    def faults(self, rate: float, codes: list[str] = (), seed: int | None = None) -> None:
        """Answer `rate` of Vertex RPCs with one of the gRPC `codes`; rate 0 clears."""
        self.vertex.set_api_faults(rate, list(codes), seed)

    def gcs_faults(
        self, outage: bool | None = None, bucket: str | None = None, status: int | None = None
    ) -> None:
        """GCS outage on/off (every request answers 503), and/or refuse one bucket with `status`
        (e.g. 403; None lifts the refusal)."""
        if outage is not None:
            self.gcs.disturbances.set_outage(bool(outage))
        if bucket is not None:
            self.gcs.disturbances.refuse_bucket(bucket, status)

    def quota(self, enabled: bool, creates_per_minute: int = 60, other_per_minute: int = 600) -> None:
        self.vertex.set_quota(enabled, creates_per_minute, other_per_minute)

    def simulate(self, enabled: bool = True, run_seconds: float | None = None, exit_code: int = 0) -> None:
        """Jobs created from now on get simulated replicas (devstack.vertex.simulated): the
        primary ends with `exit_code` after `run_seconds` (None: runs until reclaimed or
        cancelled). `enabled=False`: real replica processes again."""
        self.vertex.simulate(Simulation(run_seconds, exit_code) if enabled else None)

    def seed_finished(
        self, custom_jobs: list[dict], state: str = "JOB_STATE_SUCCEEDED", run_seconds: float = 60.0
    ) -> list[str]:
        """Put finished CustomJobs (JSON, as the REST API writes them) into Vertex at once."""
        jobs = [CustomJob.from_json(json.dumps(job), ignore_unknown_fields=False) for job in custom_jobs]
        return self.vertex.seed_finished(jobs, JobState[state], run_seconds)

    def calls(self, reset: bool = False) -> dict[str, dict[str, int]]:
        """Requests served so far by kind: {"vertex": {method: n}, "gcs": {"GET list": n, ...}};
        `reset` starts the counts again (after reading them)."""
        counts = {"vertex": self.vertex.calls.counts(), "gcs": self.gcs.calls.counts()}
        if reset:
            self.vertex.calls.reset()
            self.gcs.calls.reset()
        return counts

    def status(self) -> dict[str, Any]:
        jobs = [
            {
                "name": job.name,
                "displayName": job.display_name,
                "state": job.state.name,
                "labels": dict(job.labels),
            }
            for vertex in self.vertices.values()
            for job in vertex.jobs()
        ]
        return {"pid": os.getpid(), "dir": str(self.dir), "env": self.env(), "jobs": jobs}
