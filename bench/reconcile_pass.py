"""What does one reconcile pass cost as history grows? (a benchmark script, not a test)

Starts devstack in its own process with simulated replicas (devstack/README.md, "Thousands of
cheap jobs"), runs the controller's service layer (reconciler, work queue, sources) in this process (so this process's RSS is the
controller's), submits `--live` jobs whose CustomJobs run until cancelled, and then grows the
history in steps: finished jobs are seeded in bulk, in the state store (copies of one job that
really ran and finished) and in Vertex (finished CustomJobs with the same Relaunch labels). At each
step it times `--passes` reconcile passes and counts the Vertex RPCs and GCS requests of each, at
devstack's side (GET/POST /calls), and prints every goal beside its measured value.

    .venv/bin/python bench/reconcile_pass.py [--live 100] [--finished 100 900 9900] [--store sqlite|gcs]

`--devstack-root DIR` runs devstack from another checkout (to measure an older controller
against the same devstack, which must have simulated replicas and /seed_finished).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUCKET = "bench-reconcile"
SIMULATE = "DEVSTACK_SIMULATED_RUN_SECONDS"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Control:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="GET" if body is None else "POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=600) as reply:
            return json.loads(reply.read())


def start_devstack(devstack_root: Path, workdir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    state = workdir / "devstack"
    env = {**os.environ, "PYTHONPATH": str(devstack_root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack", "serve", "--dir", str(state), "--simulated-replicas", "forever"],
        cwd=str(devstack_root),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "devstack.err", "wb"),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            return proc, json.loads((state / "env.json").read_text())["env"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)  # a process we started: polling its run file is the only signal
    proc.kill()
    raise RuntimeError("devstack did not start")


def request_body(job_id: str, *, run_seconds: str) -> bytes:
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
        "checkpoint": {"uri": f"gs://{BUCKET}/{job_id}"},
    }
    return json.dumps(body).encode()


def drive_until(engine, job_ids: list[str], done, timeout: float = 600.0) -> None:
    from controller.jobrecord import JobRecord
    from controller.store.keys import job_key

    deadline = time.monotonic() + timeout
    pending = set(job_ids)
    while pending and time.monotonic() < deadline:
        engine.serve()
        engine.run_pass()
        pending = {
            j
            for j in pending
            if not done(JobRecord.from_dict(engine.store.get(job_key(j)).document).state.phase.value)
        }
        if pending:
            engine.queue.wait_for_work(0.2)
    if pending:
        raise RuntimeError(f"{len(pending)} jobs did not get there: {sorted(pending)[:5]}")


def build_engine(args, env: dict[str, str], workdir: Path):
    from controller.adapters.checkpoints import CheckpointProbe
    from controller.adapters.vertex import VertexBackend
    from controller.service.alerts import AlertSink
    from controller.service.metrics import Metrics
    from controller.service.reconciler import Dependencies
    from controller.settings import Settings
    from tests.support.engine import LocalController

    settings = Settings(
        vertex_endpoint=env["RELAUNCH_VERTEX_ENDPOINT"],
        project=env["GOOGLE_CLOUD_PROJECT"],
        region=env["RELAUNCH_REGION"],
        creates_per_minute=100000,  # the pass is measured here, not the submissions
        reads_per_minute=100000,
    )
    if args.store == "gcs":
        from controller.store.gcs import GcsStateStore

        store = GcsStateStore(BUCKET, "state")
    else:
        from controller.store.sqlite import SqliteStateStore

        store = SqliteStateStore(workdir / "state.db")
    deps = Dependencies(
        store=store,
        vertex=VertexBackend(settings),
        checkpoints=CheckpointProbe(),
        alerts=AlertSink(None, None),
        metrics=Metrics(),
    )
    return LocalController(settings, deps, rng=random.Random(1))


def seed_finished(engine, control: Control, template: dict, start: int, count: int) -> None:
    """`count` more finished jobs: copies of the template job's document in the store, each
    naming its own finished CustomJob, seeded in Vertex with the job's labels."""
    from google.cloud import aiplatform_v1

    from controller.jobrecord import JobRecord
    from controller.request import parse_request
    from controller.request.render import build_custom_job
    from controller.store.keys import job_key

    tmpl = JobRecord.from_dict(template)
    tmpl_id, tmpl_vertex = tmpl.job_id, tmpl.state.attempts[-1].vertex_name
    text = json.dumps(template)
    for chunk_start in range(start, start + count, 1000):
        ids = [f"hist-{i:06d}" for i in range(chunk_start, min(start + count, chunk_start + 1000))]
        customs = []
        for job_id in ids:
            request = parse_request(JobRecord.from_dict(json.loads(text.replace(tmpl_id, job_id))).request)
            custom = build_custom_job(request, 1)
            customs.append(json.loads(aiplatform_v1.CustomJob.to_json(custom)))
        names = control.call("/seed_finished", {"custom_jobs": customs, "state": "JOB_STATE_SUCCEEDED"})[
            "names"
        ]
        for job_id, name in zip(ids, names, strict=True):
            engine.store.create(
                job_key(job_id), json.loads(text.replace(tmpl_vertex, name).replace(tmpl_id, job_id))
            )


def measure(engine, control: Control, passes: int) -> dict:
    times, vertex_calls, gcs_calls, gcs_reads = [], [], [], []
    for _ in range(passes):
        control.call("/calls", {"reset": True})
        started = time.perf_counter()
        engine.run_pass()
        times.append(time.perf_counter() - started)
        counts = control.call("/calls")
        vertex_calls.append(counts["vertex"])
        gcs_calls.append(sum(counts["gcs"].values()))
        gcs_reads.append(
            sum(n for kind, n in counts["gcs"].items() if kind in ("GET object", "GET download"))
        )
    return {
        "first_s": times[0],
        "median_s": statistics.median(times[1:] or times),
        "vertex": vertex_calls[-1],
        "gcs": gcs_calls[-1],
        "gcs_reads": gcs_reads[-1],
        "rss_mb": _rss_mb(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--live", type=int, default=100, help="jobs whose CustomJobs keep running")
    parser.add_argument(
        "--finished", type=int, nargs="+", default=[100, 900, 9900], help="finished jobs added at each step"
    )
    parser.add_argument(
        "--passes", type=int, default=4, help="passes timed at each step (the first is reported apart)"
    )
    parser.add_argument("--store", choices=["sqlite", "gcs"], default="sqlite")
    parser.add_argument("--devstack-root", type=Path, default=ROOT)
    parser.add_argument("--profile", action="store_true", help="print where one more pass spends its time")
    args = parser.parse_args()

    from controller import logs

    logs.configure("WARNING")  # one line per probe and transition would swamp the figures
    workdir = Path(tempfile.mkdtemp(prefix="relaunch-bench-reconcile-"))
    devstack, env = start_devstack(args.devstack_root.resolve(), workdir)
    try:
        os.environ.update(env)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from controller.store.keys import job_key

        storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
            BUCKET
        )
        control = Control(env["RELAUNCH_DEVSTACK_CONTROL"])
        engine = build_engine(args, env, workdir)
        intake = engine.intake()

        # One job that really runs and finishes: the template of the history.
        intake.accept(request_body("tmpl-job", run_seconds="0"), {})
        drive_until(engine, ["tmpl-job"], lambda phase: phase == "succeeded")
        template = engine.store.get(job_key("tmpl-job")).document
        live_ids = [f"live-{i:04d}" for i in range(args.live)]
        for job_id in live_ids:
            intake.accept(request_body(job_id, run_seconds="forever"), {})
        drive_until(engine, live_ids, lambda phase: phase == "running")
        print(f"{args.live} live jobs running; store: {args.store}; code under test: {ROOT}", flush=True)

        rows = []
        seeded = 0
        for step in args.finished:
            seed_started = time.monotonic()
            seed_finished(engine, control, template, seeded, step)
            seeded += step
            print(f"seeded {step} finished jobs in {time.monotonic() - seed_started:.1f}s", flush=True)
            figures = measure(engine, control, args.passes)
            managed = args.live + seeded + 1
            rows.append((managed, seeded + 1, figures))
            print(f"  managed {managed}: {figures}", flush=True)
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(engine.run_pass)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    finally:
        devstack.terminate()
        devstack.wait(timeout=60)

    print()
    print(f"store {args.store}, {args.live} live jobs, {args.passes} passes per step (first apart)")
    print(
        f"{'managed':>8} {'finished':>9} {'1st pass s':>10} {'pass s':>7} {'Vertex calls':<40} {'GCS calls':>9} "
        f"{'GCS reads':>9} {'RSS MB':>7}"
    )
    for managed, finished, f in rows:
        vertex = ", ".join(f"{k} {v}" for k, v in sorted(f["vertex"].items())) or "-"
        print(
            f"{managed:>8} {finished:>9} {f['first_s']:>10.3f} {f['median_s']:>7.3f} {vertex:<40} {f['gcs']:>9} "
            f"{f['gcs_reads']:>9} {f['rss_mb']:>7.0f}"
        )
    last_managed, _, last = rows[-1]
    live_pages = -(-args.live // 1000)
    print()
    print("goals (at the largest step):")
    print(f"  one pass <= 2 s at {last_managed} managed jobs: {last['median_s']:.3f} s")
    print(f"  Vertex calls per pass = list pages of live jobs only ({live_pages}): {last['vertex']}")
    print(f"  no GCS read for finished jobs (object GETs per pass, {args.live} live): {last['gcs_reads']}")
    print(f"  controller RSS <= 300 MB: {last['rss_mb']:.0f} MB")
    flat = [f["median_s"] for _, _, f in rows]
    print(
        f"  pass time flat as history grows ({' -> '.join(str(r[1]) for r in rows)} finished): "
        f"{' -> '.join(f'{t:.3f}' for t in flat)} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
