"""How fast does the controller replace a preempted attempt, with 10, 100 or 1,000 jobs active,
and where does the time go? (a benchmark script, not a test)

For each count N and each side (this tree; with `--old DIR`, also the code checked out in DIR,
e.g. a worktree of commit aea2d43, in the same run, the order alternating): devstack with
simulated replicas (no process; the same JobService lifecycle and Cloud Logging events), N jobs
brought to RUNNING by a set-up controller with the quotas lifted, then the measured controller
(default settings but the pass period, `--reconcile-seconds`, so that passes run during the
measurement) restarted on the same state once the set-up controller has served its backlog of
job events (no GetCustomJob for 10 s). Then K of the jobs, spread over the N, are reclaimed one at
a time, each once its predecessor's replacement exists and `--spacing` seconds have passed, and
the latency is the time from the reclaimed job's end (Vertex `end_time`) to its replacement's
CreateCustomJob (`create_time`), both stamped by the Vertex stand-in's clock.

The spacing keeps the reclaims within the controller's default Vertex read budget (300 calls a
minute; a recovery costs about four: the ended job's Get, and the new job's QUEUED, PENDING and
RUNNING events): faster, every read waits for the budget, which measures the budget.

Per-phase split (this tree only; older code logs no timings): from the controller's "vertex
event" line (the event's publish time; the line's own time is its delivery) and its "look
timings" line for the look that handled the ending:

    end -> published -> delivered (enqueued) -> taken from the queue -> facts read -> decision
    written -> create called -> created (Vertex's create_time)

A reclaimed simulated job ends FAILED with the stockout error set at once (devstack's documented
one-minute delay for `error` is set to 0: a simulated replica writes no exit record).

    .venv/bin/python bench/recovery_latency.py [--active 1000] [--preemptions 100] \\
        [--store sqlite|gcs] [--old /tmp/old-aea] [--pairs 1]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_stack import ROOT, Controller, jobs_by_attempt, publish_all, simulated_request, wait

GOAL_P99_MS = {"sqlite": 50.0, "gcs": 500.0}  # at 1,000 active jobs (issue 23)
PHASES = (
    "published",
    "delivered",
    "queued",
    "read",
    "  records",
    "  vertex get",
    "  evidence",
    "decided",
    "to_create",
    "create",
)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(active: int, preemptions: int, store: str, root: Path, args: argparse.Namespace) -> dict:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from controller.settings import Settings
    from devstack.stack import DevStack

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-latency-"))
    stack = DevStack(str(workdir / "devstack")).start()
    stack.configure(failed_error_delay_seconds=0.0)
    env = stack.env()
    os.environ.update(env)
    storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()).create_bucket(
        "bench"
    )
    common = {
        "RELAUNCH_STATE_STORE": f"sqlite:///{workdir}/state.db" if store == "sqlite" else "gs://bench/state",
        "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
    }
    lifted = {"RELAUNCH_CREATES_PER_MINUTE": "1000000", "RELAUNCH_READS_PER_MINUTE": "1000000"}
    measured = {**common, "RELAUNCH_RECONCILE_SECONDS": str(args.reconcile_seconds)}
    controller = Controller(workdir, {**common, **lifted}, "setup.log", root=root)
    try:
        controller.wait_leader()
        os.environ.update(common)
        job_ids = [f"lat-{i:05d}" for i in range(active)]
        publish_all(Settings(), [simulated_request(j) for j in job_ids])

        def all_running() -> bool:
            jobs = jobs_by_attempt(stack)
            return (
                sum(1 for (_, a), j in jobs.items() if a == 1 and j.state.name == "JOB_STATE_RUNNING")
                >= active
            )

        wait(all_running, 1800, "every job to run", every=2.0)
        # Every job's QUEUED, PENDING and RUNNING events are hints the controller reads with a
        # Get; the set-up controller (read budget lifted) serves them all before it stops, or the
        # measured one (300 reads/min) would spend minutes on that backlog first.
        wait(lambda: _quiet(stack, 10.0), 1800, "the set-up's event backlog to be served", every=1.0)
        controller.stop()
        gc.collect()
        gc.freeze()  # the stand-ins' thousand jobs: out of the collector's walks (unfrozen at the end)
        controller = Controller(workdir, measured, "controller.log", root=root)
        controller.wait_leader()
        step = max(1, active // preemptions)
        victims = [job_ids[(i * step) % active] for i in range(preemptions)]
        load_before = os.getloadavg()
        current = {job_id: max(a for (j, a) in jobs_by_attempt(stack) if j == job_id) for job_id in victims}
        samples = []
        for job_id in victims:
            attempt = current[job_id]
            old = jobs_by_attempt(stack)[(job_id, attempt)]
            creates = stack.vertex.calls.counts().get("CreateCustomJob", 0)
            stack.preempt(old.name, end_job=True)
            # Cheap polling (a call counter); the stand-in's job list is read once it changed, so
            # the bench does not hold the stand-in's lock while the controller calls it.
            wait(
                lambda creates=creates: stack.vertex.calls.counts().get("CreateCustomJob", 0) > creates,
                300,
                f"{job_id}'s replacement",
                every=0.02,
            )
            jobs = wait(
                lambda job_id=job_id, attempt=attempt: (
                    (found := jobs_by_attempt(stack)).get((job_id, attempt + 1)) and found
                ),
                300,
                f"{job_id}'s replacement",
                every=0.05,
            )
            ended, created = jobs[(job_id, attempt)], jobs[(job_id, attempt + 1)]
            samples.append(
                {
                    "job_id": job_id,
                    "end": ended.end_time.timestamp(),
                    "create": created.create_time.timestamp(),
                }
            )
            time.sleep(args.spacing)  # keeps within the read budget (see the docstring); not synchronisation
        load_after = os.getloadavg()
        (workdir / "samples.json").write_text(json.dumps(samples))  # for a second look at the log
        print(f"  ({root.name}: {workdir})", flush=True)
        time.sleep(1.0)  # the log lines of the last look reach the file
        return {
            "samples": samples,
            "split": split(samples, controller.log_path, GOAL_P99_MS[store]),
            "goal": GOAL_P99_MS[store],
            "load": (load_before[0], load_after[0]),
        }
    finally:
        controller.stop()
        stack.stop()
        gc.unfreeze()
        gc.collect()  # this side's garbage, before the next side's set-up, not in its measurement


def split(samples: list[dict], log_path: Path, goal_ms: float) -> dict[str, list[float]] | None:
    """Each recovery's phases in ms, from the controller's log (None: it logs no timings)."""
    events: dict[str, list[tuple[float, float]]] = {}  # job -> (published, delivered)
    looks: dict[str, list[dict]] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        if '"look timings"' not in line and '"vertex event"' not in line:
            continue
        try:
            entry = json.loads(line[line.index("{") :])
        except ValueError:
            continue
        if entry.get("message") == "vertex event":
            delivered = datetime.datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
            events.setdefault(entry["job_id"], []).append((entry["published_at"], delivered))
        elif entry.get("message") == "look timings":
            looks.setdefault(entry["job_id"], []).append(entry)
    if not looks:
        return None
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    phases["overtook pass keys"] = []
    phases["not one look"] = []
    for sample in samples:
        end, job_id = sample["end"], sample["job_id"]
        event = next((e for e in events.get(job_id, []) if e[0] >= end - 0.001), None)
        look = next((x for x in looks.get(job_id, []) if x["started_at"] >= end and x["ended"]), None)
        if event is None or look is None or "create_called_ms" not in look:
            phases["not one look"].append(1.0)
            continue
        start = look["started_at"]
        # A key the pass had queued before the event moved up when the event came: its wait
        # counts from the event's delivery (the queue's own figure counts from the pass).
        queued = max(0.0, min(look["queued_ms"] / 1000, start - event[1]))
        called = start + look["create_called_ms"] / 1000
        values = {
            "published": event[0] - end,
            "delivered": start - queued - event[0],
            "queued": queued,
            "read": look["read_ms"] / 1000,
            "  records": look.get("stored_ms", 0.0) / 1000,
            "  vertex get": (look.get("got_ms", 0.0) - look.get("stored_ms", 0.0)) / 1000,
            "  evidence": (look["read_ms"] - look.get("got_ms", look["read_ms"])) / 1000,
            "decided": (look["decided_ms"] - look["read_ms"]) / 1000,
            "to_create": (look["create_called_ms"] - look["decided_ms"]) / 1000,
            "create": sample["create"] - called,
        }
        for name, value in values.items():
            phases[name].append(value * 1000)
        if sample["create"] - end > goal_ms / 1000:  # over the goal: which phase took most
            top = max((n for n in values if not n.startswith(" ")), key=values.__getitem__)
            phases.setdefault("slow: " + top, []).append(1.0)
        phases["overtook pass keys"].append(1.0 if look["sweep_waiting"] else 0.0)
    return phases


_last_gets: dict[str, float] = {}


def _quiet(stack, seconds: float) -> bool:
    """True once the Vertex stand-in has received no GetCustomJob for `seconds`."""
    gets = stack.vertex.calls.counts().get("GetCustomJob", 0)
    now = time.monotonic()
    if _last_gets.get("count") != gets:
        _last_gets.update(count=gets, since=now)
        return False
    return now - _last_gets["since"] >= seconds


def report(label: str, active: int, result: dict) -> tuple:
    ms = [(s["create"] - s["end"]) * 1000 for s in result["samples"]]
    load = result["load"]
    row = (label, active, len(ms), statistics.median(ms), percentile(ms, 0.99), max(ms), load)
    print(
        f"{label}, {active} active jobs, {len(ms)} reclaims: p50 {row[3]:.0f} ms, p99 {row[4]:.0f} ms,"
        f" max {row[5]:.0f} ms (load 1 min {load[0]:.2f} -> {load[1]:.2f})",
        flush=True,
    )
    phases = result["split"]
    if phases is None:
        print("  (no per-phase split: this code logs no look timings)")
        return row
    counted = len(phases["queued"])
    print(
        f"  split over {counted} recoveries handled in one look"
        f" ({len(phases['not one look'])} not in one look, not split);"
        f" {sum(phases['overtook pass keys']):.0f} overtook keys of a pass:"
    )
    slow = {name[6:]: len(v) for name, v in phases.items() if name.startswith("slow: ")}
    print(f"  recoveries over {result['goal']:.0f} ms, by their longest phase: {slow or 'none'}")
    for name in PHASES:
        values = phases[name]
        if values:
            print(
                f"    {name:<12}: p50 {statistics.median(values):7.1f} ms"
                f"  p99 {percentile(values, 0.99):7.1f} ms  max {max(values):7.1f} ms"
            )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--active", type=int, nargs="+", default=[1000])
    parser.add_argument("--preemptions", type=int, default=100)
    parser.add_argument("--store", choices=["sqlite", "gcs"], default="sqlite")
    parser.add_argument("--old", type=Path, help="a checkout of older code to run beside this tree")
    parser.add_argument("--pairs", type=int, default=1, help="runs per side (alternating order)")
    parser.add_argument("--spacing", type=float, default=1.0, help="seconds between reclaims")
    parser.add_argument(
        "--reconcile-seconds", type=float, default=15.0, help="the measured controller's pass period"
    )
    args = parser.parse_args()
    from devstack.stack import settle_interpreter

    settle_interpreter()  # devstack runs in this process; both sides run against the same stand-ins
    sides = [("new", ROOT)] + ([("old", args.old.resolve())] if args.old else [])
    rows = []
    for active in args.active:
        for pair in range(args.pairs):
            for label, root in sides if pair % 2 == 0 else sides[::-1]:
                rows.append(report(label, active, measure(active, args.preemptions, args.store, root, args)))
    print(
        f"\n| side | active jobs | reclaims | p50 ms | p99 ms | max ms | load 1 min | goal p99 <= {GOAL_P99_MS[args.store]:.0f} ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, active, count, p50, p99, worst, load in rows:
        goal = ("met" if p99 <= GOAL_P99_MS[args.store] else "NOT met") if active >= 1000 else ""
        print(
            f"| {label} | {active} | {count} | {p50:.0f} | {p99:.0f} | {worst:.0f} |"
            f" {load[0]:.2f} -> {load[1]:.2f} | {goal} |"
        )
    print(
        f"({args.store} store, {os.cpu_count()} cores, passes every {args.reconcile_seconds:g} s,"
        f" reclaims {args.spacing:g} s apart; old = {args.old or '-'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
