"""A randomized fault-injection run: controllers as real processes against devstack, with a
seeded, reproducible schedule of faults, judged from Vertex's side.

    run = FaultRun(devstack, workdir, FaultConfig(seed=7, duration_seconds=40))
    report = run.run()
    assert report.violations == []

The schedule (`plan`) is a pure function of the config: the same seed gives the same faults at
the same offsets (what the processes do in between is up to the machine). Faults:
  kill         kill -9 a controller, start a fresh one in its place
  pause        SIGSTOP a controller for longer than the lease, then SIGCONT
  preempt      reclaim a running CustomJob's Spot VMs (SIGTERM to its replicas)
  vertex_faults / vertex_outage   a share (or all) of Vertex RPCs answer UNAVAILABLE & co
  gcs_outage   every GCS request answers 503 (the state store and the lease live there)
  duplicate    publish a job's request a second time
  cancel       publish a cancel, racing the job's request (before or after it) or mid-run

Checks (`Report.violations`), from what Vertex and the store hold at the end:
  no controller exits by itself (a crash; it is restarted so the run goes on);
  one CustomJob per (job, attempt); never two live CustomJobs of one job (sampled throughout);
  every request recorded; every cancel recorded; every job terminal, succeeded unless cancelled
  (a cancelled job may end succeeded only if its last CustomJob had succeeded before the cancel
  was recorded, or the controller knew of the cancel when it applied the success); each attempt
  after the first resumed from the latest checkpoint committed before its CustomJob was created.

Checkpoints are local directories (`file://`), so a GCS outage hits the controllers only, and a
job's right ending stays "succeeded".
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemon import ControllerProcess, publish, topic_settings, wait_for
from tests.support.engine import FAKE_TRAINER, PROJECT
from trainer import layout

TERMINAL_VERTEX = ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "PARTIALLY_SUCCEEDED")
VERTEX_FAULT_CODES = ["UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "INTERNAL"]


@dataclass(frozen=True)
class FaultConfig:
    seed: int
    duration_seconds: float = 40.0  # faults happen in [0, duration); then the run drains
    controllers: int = 2
    jobs_per_minute: float = 12.0
    lease_seconds: float = 2.0
    renew_seconds: float = 0.4
    mean_fault_gap_seconds: float = 2.0
    steps: int = 30  # a job's work: steps x step_seconds, checkpoint every `every` steps
    step_seconds: float = 0.1
    every: int = 5
    drain_timeout_seconds: float = 240.0
    # start controllers from a pre-imported forkserver (tests/support/forked.py): kills are cheap
    forked: bool = False
    # relative weights of the fault kinds
    weights: tuple[tuple[str, float], ...] = (
        ("kill", 4.0),
        ("pause", 2.0),
        ("preempt", 2.0),
        ("vertex_faults", 1.0),
        ("vertex_outage", 0.5),
        ("gcs_outage", 0.5),
    )


@dataclass(frozen=True)
class Step:
    at: float
    kind: str  # publish, duplicate, cancel, or a fault kind
    target: str | int = ""
    seconds: float = 0.0  # how long a pause or an outage lasts


def plan(config: FaultConfig) -> list[Step]:
    """The whole schedule, from the seed alone."""
    rng = random.Random(config.seed)
    steps: list[Step] = []
    n_jobs = max(2, int(config.duration_seconds / 60 * config.jobs_per_minute))
    for i in range(n_jobs):
        job_id = f"s{config.seed}-j{i}"
        at = rng.uniform(0, config.duration_seconds * 0.8)
        steps.append(Step(at, "publish", job_id))
        if rng.random() < 0.3:
            steps.append(Step(at + rng.uniform(0, 3), "duplicate", job_id))
        draw = rng.random()
        if draw < 0.2:  # racing its request: just before or just after it
            steps.append(Step(max(0.0, at + rng.uniform(-1.0, 1.0)), "cancel", job_id))
        elif draw < 0.3:  # mid-run
            steps.append(Step(at + rng.uniform(1.0, 4.0), "cancel", job_id))
    kinds = [kind for kind, _ in config.weights]
    weights = [weight for _, weight in config.weights]
    t = rng.expovariate(1 / config.mean_fault_gap_seconds)
    while t < config.duration_seconds:
        kind = rng.choices(kinds, weights)[0]
        if kind in ("kill", "pause"):
            target: str | int = rng.randrange(config.controllers)
        else:
            target = rng.randrange(1 << 30)  # picks among the CustomJobs running at the time
        seconds = 0.0
        if kind == "pause":
            seconds = config.lease_seconds * rng.uniform(1.5, 3.0)
        elif kind in ("vertex_faults", "vertex_outage", "gcs_outage"):
            seconds = rng.uniform(1.0, 3.0 * config.lease_seconds)
        steps.append(Step(t, kind, target, seconds))
        t += rng.expovariate(1 / config.mean_fault_gap_seconds)
    return sorted(steps, key=lambda s: (s.at, s.kind, str(s.target)))


@dataclass
class Report:
    seed: int
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    jobs: int = 0
    attempts: int = 0

    def summary(self) -> dict:
        return {
            "seed": self.seed,
            "wall_seconds": round(self.wall_seconds, 1),
            "jobs": self.jobs,
            "attempts": self.attempts,
            "faults": dict(sorted(self.counts.items())),
            "violations": len(self.violations),
        }


def _serving(process: ControllerProcess) -> bool:
    """Up and answering HTTP (ready or not): past start-up, where a fault means something."""
    return process.proc.poll() is None and process.ready()[1] != "not listening"


class _LiveWatcher:
    """Samples Vertex while the run goes: two live CustomJobs of one job is a violation."""

    def __init__(self, devstack, prefix: str):
        self._devstack, self._prefix = devstack, prefix
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-watcher", daemon=True)

    def start(self) -> _LiveWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            live = defaultdict(list)
            for job in self._devstack.vertex.jobs():
                job_id = job.labels.get("relaunch-job", "")
                if job_id.startswith(self._prefix) and not job.state.name.endswith(TERMINAL_VERTEX):
                    live[job_id].append(job.name)
            for job_id, names in live.items():
                if len(names) > 1:
                    message = f"{job_id}: {len(names)} live CustomJobs at once: {sorted(names)}"
                    if message not in self.violations:
                        self.violations.append(message)


class FaultRun:
    def __init__(self, devstack, workdir: Path, config: FaultConfig, *, bucket: str):
        self.devstack = devstack
        self.config = config
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bucket = bucket
        self.prefix = f"s{config.seed}-"
        tag = f"f{config.seed}-{uuid.uuid4().hex[:4]}"
        self.state_prefix = f"fault-state-{tag}"
        self.settings = {
            "RELAUNCH_STATE_STORE": f"gs://{bucket}/{self.state_prefix}",
            "RELAUNCH_LEASE_SECONDS": str(config.lease_seconds),
            "RELAUNCH_LEASE_RENEW_SECONDS": str(config.renew_seconds),
            "RELAUNCH_RECONCILE_SECONDS": "1",
            "RELAUNCH_SUBMIT_RETRY_SECONDS": "1",
            "RELAUNCH_ALLOW_LOCAL_CHECKPOINTS": "true",
            "RELAUNCH_RPC_TIMEOUT_SECONDS": "5",
            **topic_settings(tag),
        }
        self.topic = self.settings["RELAUNCH_REQUESTS_TOPIC"]
        self.slots: list[ControllerProcess | None] = [None] * config.controllers
        self.retired: list[ControllerProcess] = []
        self._started = 0
        self.report = Report(config.seed)
        self.published: set[str] = set()
        self.cancelled: set[str] = set()

    # --- processes ------------------------------------------------------------------------
    def _start_controller(self, slot: int) -> ControllerProcess:
        self._started += 1
        process = ControllerProcess(
            self.devstack.env(),
            self.workdir / f"ctl-{slot}-{self._started}.log",
            forked=self.config.forked,
            **self.settings,
            RELAUNCH_CONTROLLER_ID=f"ctl-{slot}-{self._started}",
        )
        self.slots[slot] = process
        return process

    def _stop_all(self) -> None:
        for process in [*self.slots, *self.retired]:
            if process is not None:
                process.stop()

    # --- requests -------------------------------------------------------------------------
    def _request(self, job_id: str) -> bytes:
        c = self.config
        body = {
            "jobId": job_id,
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {"machineType": "n1-standard-4"},
                        "replicaCount": 1,
                        "containerSpec": {
                            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
                            "command": [
                                sys.executable,
                                FAKE_TRAINER,
                                "--steps",
                                str(c.steps),
                                "--every",
                                str(c.every),
                                "--step-seconds",
                                str(c.step_seconds),
                            ],
                        },
                    }
                ],
                "scheduling": {"strategy": "SPOT"},
            },
            "checkpoint": {"uri": f"file://{self.workdir / 'checkpoints' / job_id}"},
            "restartPolicy": {"backoff": {"initialSeconds": 0.2, "maxSeconds": 1.0}, "maxFailures": 10},
        }
        return json.dumps(body).encode()

    def _publish(self, body: bytes) -> None:
        publish(PROJECT, self.topic, body)

    # --- the run --------------------------------------------------------------------------
    def run(self) -> Report:
        started = time.monotonic()
        schedule = plan(self.config)
        watcher = _LiveWatcher(self.devstack, self.prefix).start()
        pending: list[tuple[float, str, object]] = []  # (due, what, arg): SIGCONTs, outage ends
        try:
            for slot in range(self.config.controllers):
                self._start_controller(slot)
            wait_for(
                lambda: any(p and "leader" in p.ready()[1] for p in self.slots), 120, what="a first leader"
            )
            t0 = time.monotonic()
            for step in schedule:
                while True:
                    now = time.monotonic() - t0
                    self._reap()
                    self._finish_due(pending, now)
                    if now >= step.at:
                        break
                    time.sleep(min(0.05, step.at - now))  # the schedule's own clock, not a sync
                self._do(step, pending, time.monotonic() - t0)
            self._finish_due(pending, float("inf"))
            self._clear_faults()
            self._drain()
        finally:
            self._clear_faults()
            for process in self.slots:
                if process is not None:
                    process.resume()
            watcher.stop()
            self._check(watcher)
            self._stop_all()
            self.report.wall_seconds = time.monotonic() - started
        return self.report

    def _do(self, step: Step, pending: list, now: float) -> None:
        counts = self.report.counts
        if step.kind == "publish":
            self.published.add(str(step.target))
            self._publish(self._request(str(step.target)))
        elif step.kind == "duplicate":
            self._publish(self._request(str(step.target)))
            counts["duplicate publishes"] += 1
        elif step.kind == "cancel":
            self.cancelled.add(str(step.target))
            self._publish(json.dumps({"jobId": step.target, "action": "cancel"}).encode())
            counts["cancels"] += 1
        elif step.kind == "kill":
            slot = int(step.target)
            victim = self.slots[slot]
            paused = any(p[2] is victim for p in pending)
            if victim is None or not (paused or _serving(victim)):
                # Killing a process still importing its libraries tests nothing: only a
                # controller that serves (standby or leader) counts as killed.
                counts["kills skipped (still starting)"] += 1
                return
            was = "paused" if paused else victim.ready()[1]
            victim.kill()  # a paused one too: SIGKILL needs no SIGCONT
            self.retired.append(victim)
            counts["kills"] += 1
            if "leader" in was:
                counts["kills of the leader"] += 1
            self._start_controller(slot)
        elif step.kind == "pause":
            victim = self.slots[int(step.target)]
            if victim is None or any(p[2] is victim for p in pending) or not _serving(victim):
                counts["pauses skipped (still starting or paused)"] += 1
            else:
                victim.pause()
                pending.append((now + step.seconds, "resume", victim))
                counts["pauses past the lease"] += 1
        elif step.kind == "preempt":
            running = [
                j
                for j in self.devstack.vertex.jobs()
                if j.labels.get("relaunch-job", "").startswith(self.prefix)
                and j.state.name.endswith("RUNNING")
            ]
            if running:
                victim = sorted(running, key=lambda j: j.name)[int(step.target) % len(running)]
                try:
                    if self.devstack.preempt(victim.name, grace_seconds=1.0):
                        counts["preemptions"] += 1
                except KeyError:
                    pass
            else:
                counts["preemptions skipped (nothing running)"] += 1
        elif step.kind in ("vertex_faults", "vertex_outage"):
            rate = 1.0 if step.kind == "vertex_outage" else 0.3
            self.devstack.faults(rate, VERTEX_FAULT_CODES if rate < 1 else ["UNAVAILABLE"], self.config.seed)
            pending.append((now + step.seconds, "vertex_ok", None))
            counts[step.kind.replace("_", " ")] += 1
        elif step.kind == "gcs_outage":
            self.devstack.gcs_faults(outage=True)
            pending.append((now + step.seconds, "gcs_ok", None))
            counts["gcs outages"] += 1

    def _reap(self) -> None:
        """A controller that exited without being killed broke a promise (no crash loops):
        note it, and start another in its place so the run goes on."""
        for slot, process in enumerate(self.slots):
            if process is not None and process.proc.poll() is not None:
                name = process.log_path.stem
                self.report.violations.append(
                    f"{name} exited by itself with status {process.proc.returncode}"
                )
                self.retired.append(process)
                self._start_controller(slot)

    def _finish_due(self, pending: list, now: float) -> None:
        for item in [p for p in pending if p[0] <= now]:
            pending.remove(item)
            _, what, arg = item
            if what == "resume":
                if arg.proc.poll() is None:
                    arg.resume()
            elif what == "vertex_ok":
                if not any(p[1] == "vertex_ok" for p in pending):
                    self.devstack.faults(0.0, [])
            elif what == "gcs_ok":
                if not any(p[1] == "gcs_ok" for p in pending):
                    self.devstack.gcs_faults(outage=False)

    def _clear_faults(self) -> None:
        self.devstack.faults(0.0, [])
        self.devstack.gcs_faults(outage=False)

    def _store(self):
        from controller.store.gcs import GcsStateStore

        return GcsStateStore(self.bucket, self.state_prefix)

    def _drain(self) -> None:
        """No more faults: wait until every published job is recorded and terminal."""
        store = self._store()

        def all_terminal() -> bool:
            self._reap()
            docs = {r.key.removeprefix("jobs/"): r.document for r in store.list("jobs/")}
            return all(
                job_id in docs and docs[job_id]["state"]["phase"] in ("succeeded", "failed", "cancelled")
                for job_id in self.published
            )

        try:
            wait_for(all_terminal, self.config.drain_timeout_seconds, what="every job terminal")
        except TimeoutError as error:
            self.report.violations.append(str(error))

    # --- the verdict ----------------------------------------------------------------------
    def _check(self, watcher: _LiveWatcher) -> None:
        report = self.report
        report.violations.extend(watcher.violations)
        ours = [
            j for j in self.devstack.vertex.jobs() if j.labels.get("relaunch-job", "").startswith(self.prefix)
        ]
        per_attempt = Counter((j.labels["relaunch-job"], j.labels.get("relaunch-attempt")) for j in ours)
        for (job_id, attempt), n in sorted(per_attempt.items()):
            if n > 1:
                report.violations.append(f"{job_id} attempt {attempt}: {n} CustomJobs")
        report.attempts = len(per_attempt)
        try:
            docs = {r.key.removeprefix("jobs/"): r.document for r in self._store().list("jobs/")}
        except Exception as error:  # the store must be readable once the faults are off
            report.violations.append(f"cannot read the state store: {error!r}")
            return
        try:
            cancels = {r.key.removeprefix("cancels/"): r.document for r in self._store().list("cancels/")}
        except Exception as error:
            report.violations.append(f"cannot read the cancel records: {error!r}")
            cancels = {}
        report.jobs = len(self.published)
        by_job = defaultdict(list)
        for job in ours:
            by_job[job.labels["relaunch-job"]].append(job)
        for job_id in sorted(self.published):
            doc = docs.get(job_id)
            if doc is None:
                report.violations.append(f"{job_id}: request published but never recorded")
                continue
            state = doc["state"]
            phase = state["phase"]
            if job_id in self.cancelled:
                self._check_cancel(job_id, state, by_job[job_id], cancels.get(job_id))
            elif phase != "succeeded":
                report.violations.append(
                    f"{job_id}: ended {phase} ({state.get('terminal_reason')}), expected succeeded"
                )
            self._check_resumes(job_id, by_job[job_id])

    def _check_cancel(self, job_id: str, state: dict, jobs: list, record: dict | None) -> None:
        """Honoured: recorded, and the job cancelled, unless it had already succeeded on Vertex
        by the time the cancel was recorded (or the controller knew of it when it ended)."""
        phase = state["phase"]
        if record is None:
            self.report.violations.append(f"{job_id}: a cancel was published but never recorded")
        if phase == "cancelled":
            return
        recorded_at = float(record["time"]) if record is not None else float("-inf")
        last = max(jobs, key=lambda j: int(j.labels["relaunch-attempt"]), default=None)
        ended = (
            last.end_time.timestamp() if last is not None and last.state.name.endswith("SUCCEEDED") else None
        )
        finished_first = ended is not None and ended <= recorded_at
        if phase == "succeeded" and (finished_first or state.get("cancel_requested")):
            return
        self.report.violations.append(
            f"{job_id}: cancel (recorded at {recorded_at:.1f}) not honoured, ended {phase} "
            f"({state.get('terminal_reason')}), last CustomJob ended at {ended}"
        )

    def _check_resumes(self, job_id: str, jobs: list) -> None:
        root = self.workdir / "checkpoints" / job_id
        markers: dict[int, float] = {}
        for marker in root.glob(f"step-*/{layout.COMMIT_MARKER_NAME}"):
            step = layout.parse_step_dir(marker.parent.name)
            if step is not None:
                markers[step] = marker.stat().st_mtime
        for job in jobs:
            attempt = int(job.labels["relaunch-attempt"])
            start_file = root / "starts" / f"attempt-{attempt:04d}.json"
            if attempt == 1 or not start_file.exists():
                continue  # never started (cancelled, or preempted before it ran)
            started = json.loads(start_file.read_text())
            created = job.create_time.timestamp()
            committed_before = [step for step, mtime in markers.items() if mtime <= created]
            expected = max(committed_before, default=0)
            if started["step"] != expected:
                self.report.violations.append(
                    f"{job_id} attempt {attempt}: resumed from step {started['step']}, "
                    f"latest committed before it was created: {expected}"
                )
