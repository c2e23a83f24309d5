"""The periodic pass at production scale, this tree beside an older commit (a benchmark script).

Seeds `--jobs` jobs of which `--live` run, through the store API directly (copies of two jobs that
really went through the controller: one finished, one running), each live one with a CustomJob
that devstack keeps running (simulated replicas), then times `--passes` reconcile passes and
counts the Vertex RPCs and GCS requests of each at devstack's side. Each side runs in a process
of its own against a devstack of its own (always this tree's devstack: the stand-in is the
same, only the controller differs); that process hosts the controller, so its RSS is the
controller's. Printed per store: pass time (first and median of the rest), calls per pass, RSS.

    .venv/bin/python bench/scale.py [--jobs 10000] [--live 1000] [--stores sqlite gcs] \
        [--old /tmp/old-aea] [--passes 4]

A pass, on this tree: the pass enqueues every live job and the work queue's
`reconcile_workers` workers serve the looks (as the daemon runs them); timed from the pass's
start until no look is left. On an older tree with the engine of aea2d43 (no work queue):
`Engine.reconcile()`, which did the whole pass itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "bench-scale"
SIMULATE = "DEVSTACK_SIMULATED_RUN_SECONDS"
VERTEX_QUOTA_PER_MINUTE = 600  # resource-management requests per project and region (README)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _control(url: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=600) as reply:
        return json.loads(reply.read())


def _start_devstack(workdir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    state = workdir / "devstack"
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack", "serve", "--dir", str(state), "--simulated-replicas", "forever"],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "devstack.err", "wb"),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            return proc, json.loads((state / "env.json").read_text())["env"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)  # a process we started: its run file is the only signal
    proc.kill()
    raise RuntimeError("devstack did not start")


def _request(job_id: str, run_seconds: str) -> bytes:
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": ["/nonexistent/simulated"],
            "env": [{"name": SIMULATE, "value": run_seconds}],
        },
    }
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool], "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{BUCKET}/ckpt/{job_id}"},
    }
    return json.dumps(body).encode()


# --- one side: the controller of one tree, in this process -----------------------------------
class Side:
    """The controller's service layer of the tree on sys.path, driven on this thread."""

    def __init__(self, store_kind: str, env: dict[str, str], workdir: Path):
        import random

        from controller.adapters.checkpoints import CheckpointProbe
        from controller.adapters.vertex import VertexBackend
        from controller.service.alerts import AlertSink
        from controller.service.metrics import Metrics
        from controller.settings import Settings

        self.settings = Settings(
            vertex_endpoint=env["RELAUNCH_VERTEX_ENDPOINT"],
            project=env["GOOGLE_CLOUD_PROJECT"],
            region=env["RELAUNCH_REGION"],
            creates_per_minute=100000,  # the pass is measured here, not the submissions
            reads_per_minute=100000,
        )
        if store_kind == "gcs":
            from controller.store.gcs import GcsStateStore

            self.store = GcsStateStore(BUCKET, "state")
        else:
            from controller.store.sqlite import SqliteStateStore

            self.store = SqliteStateStore(workdir / "state.db")
        try:
            from controller.service.reconciler import Dependencies
        except ImportError:  # the engine of aea2d43
            from controller.service.engine import Dependencies  # type: ignore[no-redef]
        deps = Dependencies(
            store=self.store,
            vertex=VertexBackend(self.settings),
            checkpoints=CheckpointProbe(),
            alerts=AlertSink(None, None),
            metrics=Metrics(),
        )
        try:
            from tests.support.engine import LocalController

            self.engine = LocalController(self.settings, deps, rng=random.Random(1))
            self.queued = True
            self.intake = self.engine.intake()
        except ImportError:
            from controller.service.engine import Engine
            from controller.service.intake import Intake

            self.engine = Engine(self.settings, deps, rng=random.Random(1))
            self.queued = False
            self.intake = Intake(self.engine)

    def drive(self, job_ids: list[str], phase: str, timeout: float = 600.0) -> None:
        from controller.store.keys import job_key

        deadline = time.monotonic() + timeout
        pending = set(job_ids)
        while pending and time.monotonic() < deadline:
            if self.queued:
                self.engine.run_pass()
                self.engine.queue.wait_for_work(0.2)
                self.engine.serve()
            else:
                self.engine.fire_due_timers()
                self.engine.reconcile()
                self.engine.timers.wait(0.2)
            pending = {j for j in pending if self.store.get(job_key(j)).document["state"]["phase"] != phase}
        if pending:
            raise RuntimeError(f"{len(pending)} jobs never became {phase}: {sorted(pending)[:5]}")

    def settle(self) -> None:
        """A few passes: the first looks after a start record what they learn."""
        for _ in range(3):
            if self.queued:
                self.engine.run_pass()
            else:
                self.engine.fire_due_timers()
                self.engine.reconcile()

    def start_workers(self) -> None:
        if self.queued:
            self.engine.queue.start(self.settings.reconcile_workers, self.engine.sources.serve)

    def one_pass(self) -> float:
        started = time.perf_counter()
        if not self.queued:
            self.engine.reconcile()
            return time.perf_counter() - started
        self.engine.sources.run_pass()
        while True:  # polling the queue's counters: this bench adds nothing to the controller
            stats = self.engine.queue.stats()
            if stats.ready == 0 and stats.serving == 0:
                return time.perf_counter() - started
            time.sleep(0.002)


def _job_service(env: dict[str, str]):
    """The real JobService client on devstack's plaintext port."""
    import grpc
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    channel = grpc.insecure_channel(env["RELAUNCH_VERTEX_ENDPOINT"])
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))


def _custom_job_json(client, vertex_name: str) -> str:
    """A CustomJob as JSON with what a create takes (spec, labels), to copy for other jobs."""
    from google.cloud.aiplatform_v1.types import CustomJob

    raw = json.loads(CustomJob.to_json(client.get_custom_job(name=vertex_name)))
    return json.dumps({k: raw[k] for k in ("displayName", "jobSpec", "labels") if k in raw})


def _create_running(client, parent: str, customs: list[str]) -> list[str]:
    """CustomJobs created through JobService (devstack runs them, simulated, until cancelled)."""
    from google.cloud.aiplatform_v1.types import CustomJob

    def create(custom: str) -> str:
        return client.create_custom_job(parent=parent, custom_job=CustomJob.from_json(custom)).name

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(create, customs))


def run_side(args) -> dict:
    """Seed and measure with the tree on sys.path; the figures as a dict."""
    from controller import logs

    logs.configure("WARNING")  # a line per look would swamp the figures
    workdir = Path(tempfile.mkdtemp(prefix="relaunch-bench-scale-"))
    devstack, env = _start_devstack(workdir)
    try:
        os.environ.update(env)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from controller.store.keys import job_key

        storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
            BUCKET
        )
        control = env["RELAUNCH_DEVSTACK_CONTROL"]
        side = Side(args.store, env, workdir)
        side.intake.accept(_request("tmpl-done", "0"), {})
        side.intake.accept(_request("tmpl-live", "forever"), {})
        side.drive(["tmpl-done"], "succeeded")
        side.drive(["tmpl-live"], "running")
        side.settle()
        done, live = (side.store.get(job_key(j)).document for j in ("tmpl-done", "tmpl-live"))
        done_text, live_text = json.dumps(done), json.dumps(live)
        done_name = done["state"]["attempts"][-1]["vertex_name"]
        live_name = live["state"]["attempts"][-1]["vertex_name"]

        seeding = time.monotonic()
        client = _job_service(env)
        parent = f"projects/{env['GOOGLE_CLOUD_PROJECT']}/locations/{env['RELAUNCH_REGION']}"
        live_custom = _custom_job_json(client, live_name)
        finished_custom = _custom_job_json(client, done_name)
        with ThreadPoolExecutor(16) as pool:  # documents written a thousand at a time: little memory held

            def store(documents: list[tuple[str, dict]]) -> None:
                list(pool.map(lambda item: side.store.create(job_key(item[0]), item[1]), documents))

            live_ids = [f"live-{i:05d}" for i in range(args.live - 1)]
            for start in range(0, len(live_ids), 1000):
                chunk = live_ids[start : start + 1000]
                names = _create_running(client, parent, [live_custom.replace("tmpl-live", j) for j in chunk])
                store(
                    [
                        (j, json.loads(live_text.replace(live_name, n).replace("tmpl-live", j)))
                        for j, n in zip(chunk, names, strict=True)
                    ]
                )
            finished_ids = [f"done-{i:05d}" for i in range(args.jobs - args.live - 1)]
            for start in range(0, len(finished_ids), 1000):
                chunk = finished_ids[start : start + 1000]
                customs = [json.loads(finished_custom.replace("tmpl-done", j)) for j in chunk]
                seeded = _control(
                    control, "/seed_finished", {"custom_jobs": customs, "state": "JOB_STATE_SUCCEEDED"}
                )
                store(
                    [
                        (j, json.loads(done_text.replace(done_name, n).replace("tmpl-done", j)))
                        for j, n in zip(chunk, seeded["names"], strict=True)
                    ]
                )
        seed_seconds = time.monotonic() - seeding
        Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here on: the passes' own

        if args.profile:  # a pass before the timed ones, served on this thread, under cProfile (stderr)
            import cProfile
            import pstats

            side.engine.run_pass() if side.queued else side.engine.reconcile()  # requests parsed once
            profiler = cProfile.Profile()
            profiler.runcall(side.engine.run_pass if side.queued else side.engine.reconcile)
            stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
            stats.print_stats(45)
            stats.print_callers("from_dict|observed_event")
        side.start_workers()
        times, vertex, gcs, gcs_reads, cpu_ours, cpu_stand_in = [], [], [], [], [], []
        for _ in range(args.passes):
            _control(control, "/calls", {"reset": True})
            ours, stand_in = _cpu_seconds(os.getpid()), _cpu_seconds(devstack.pid)
            times.append(side.one_pass())
            cpu_ours.append(_cpu_seconds(os.getpid()) - ours)
            cpu_stand_in.append(_cpu_seconds(devstack.pid) - stand_in)
            counts = _control(control, "/calls")
            vertex.append(counts["vertex"])
            gcs.append(sum(counts["gcs"].values()))
            gcs_reads.append(
                sum(n for kind, n in counts["gcs"].items() if kind in ("GET object", "GET download"))
            )
        return {
            "seed_s": seed_seconds,
            "first_s": times[0],
            "pass_s": statistics.median(times[1:] or times),
            # CPU seconds a pass costs the controller's process and devstack's (which shares the
            # cores here, and serves every listing and probe): less sensitive to load than time.
            "cpu_s": statistics.median(cpu_ours[1:] or cpu_ours),
            "devstack_cpu_s": statistics.median(cpu_stand_in[1:] or cpu_stand_in),
            "vertex": vertex[-1],
            "gcs": gcs[-1],
            "gcs_reads": gcs_reads[-1],
            "gcs_kinds": counts["gcs"],  # the last pass's GCS requests by kind
            "rss_mb": _status_kb("VmRSS") / 1024,
            "peak_rss_mb": _status_kb("VmHWM") / 1024,
            "load": os.getloadavg()[0],
            "code": str(Path(sys.modules["controller"].__file__ or "").parent.parent),
        }
    finally:
        devstack.terminate()
        try:
            devstack.wait(timeout=60)
        except subprocess.TimeoutExpired:  # slow to stop with thousands of jobs: not our figures
            devstack.kill()
            devstack.wait()


def _run_tree(tree: Path, args, store: str) -> dict:
    command = [
        sys.executable,
        str(ROOT / "bench" / "scale.py"),
        "--side",
        str(tree),
        "--store",
        store,
        "--jobs",
        str(args.jobs),
        "--live",
        str(args.live),
        "--passes",
        str(args.passes),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(command, cwd=str(tree), env=env, capture_output=True, text=True, check=False)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{tree} ({store}) gave no figures:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000, help="managed jobs in all")
    parser.add_argument("--live", type=int, default=1000, help="of which running")
    parser.add_argument("--stores", nargs="+", choices=["sqlite", "gcs"], default=["sqlite", "gcs"])
    parser.add_argument("--old", type=Path, default=None, help="a checkout of the older commit")
    parser.add_argument("--passes", type=int, default=4, help="passes timed (the first is reported apart)")
    parser.add_argument("--profile", action="store_true", help="with --side: profile one more pass")
    parser.add_argument("--side", type=Path, help="run one tree's controller in this process, print JSON")
    parser.add_argument("--store", choices=["sqlite", "gcs"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side is not None:
        sys.path.insert(0, str(args.side.resolve()))
        print(json.dumps(run_side(args)), flush=True)
        return 0

    trees = [("this tree", ROOT)] + ([("old", args.old.resolve())] if args.old else [])
    rows = []
    for store in args.stores:
        for label, tree in trees:
            started = time.monotonic()
            figures = _run_tree(tree, args, store)
            rows.append((store, label, figures))
            print(f"{store:6} {label:9} done in {time.monotonic() - started:.0f}s: {figures}", flush=True)

    print()
    print(
        f"{args.jobs} jobs, {args.live} live; {args.passes} passes (first apart); load = 1-min average at the end"
    )
    head = f"{'store':6} {'tree':9} {'1st pass s':>10} {'pass s':>7} {'CPU s':>6} {'devstack CPU s':>14}"
    head += f" {'Vertex calls/pass':<28} {'GCS calls':>9}"
    print(head + f" {'GCS reads':>9} {'RSS MB':>7} {'peak MB':>7} {'seed s':>7} {'load':>5}")
    for store, label, f in rows:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(f["vertex"].items())) or "-"
        print(
            f"{store:6} {label:9} {f['first_s']:>10.3f} {f['pass_s']:>7.3f} {f['cpu_s']:>6.2f} "
            f"{f['devstack_cpu_s']:>14.2f} {calls:<28} {f['gcs']:>9} "
            f"{f['gcs_reads']:>9} {f['rss_mb']:>7.0f} {f['peak_rss_mb']:>7.0f} {f['seed_s']:>7.0f} {f['load']:>5.1f}"
        )
    print()
    for store, label, f in rows:
        if label != "this tree":
            continue
        goal = 2.0 if store == "sqlite" else 5.0
        per_pass = sum(f["vertex"].values())  # a pass a minute by default (RELAUNCH_RECONCILE_SECONDS=60)
        print(
            f"{store}: pass {f['pass_s']:.2f} s (goal <= {goal:.0f} s); peak RSS {f['peak_rss_mb']:.0f} MB "
            f"(goal <= 300); Vertex calls per pass {per_pass}, i.e. a minute at the default period "
            f"(quota {VERTEX_QUOTA_PER_MINUTE} a minute, shared)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
