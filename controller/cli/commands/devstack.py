"""`relaunch devstack`: run the local stand-ins for Pub/Sub, GCS and Vertex AI in the
background and disturb them (preemption, stockout, API faults, quota).

devstack is imported only inside the handlers: every other verb pays nothing for it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.cli.common import CommandError
from controller.userconfig import DEFAULT_DEVSTACK_DIR, DEVSTACK_DIR_VARIABLE

DEFAULT_DIR = DEFAULT_DEVSTACK_DIR
# Everything `up` may export, so that `down` unsets it even when the devstack is gone.
DEVSTACK_VARIABLES = (
    "PUBSUB_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "RELAUNCH_VERTEX_ENDPOINT",
    "RELAUNCH_DEVSTACK_CONTROL",
    "GOOGLE_CLOUD_PROJECT",
    "RELAUNCH_REGION",
    "RELAUNCH_REGIONS",
    "RELAUNCH_VERTEX_ENDPOINTS",
)
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0

_HELP = {
    "up": (
        "start the devstack in the background and print its environment",
        "Starts Pub/Sub, GCS and Vertex AI stand-ins on free loopback ports as a detached\n"
        "process (state, pid and log under --dir), waits until they answer, and prints\n"
        "the export lines a shell needs. Running it again prints the same lines; --fresh\n"
        "first stops it and deletes everything under --dir (jobs, checkpoints, logs): the\n"
        "way to start over. If it cannot start, it prints `false`, so that the eval fails.\n\n"
        'example:\n  eval "$(relaunch devstack up)"\n  eval "$(relaunch devstack up --fresh)"\n'
        "  relaunch devstack up --dir /tmp/ds",
    ),
    "env": (
        "print the export lines of the running devstack again",
        'example:\n  eval "$(relaunch devstack env)"',
    ),
    "down": (
        "stop the background devstack and every replica process it started",
        "Prints the unset lines that undo `up`'s export lines in the shell that evaluated\n"
        "them; the devstack's directory (and the jobs' record in it) stays.\n\n"
        'example:\n  eval "$(relaunch devstack down)"\n  relaunch devstack down --dir /tmp/ds',
    ),
    "status": (
        "show the running devstack's endpoints and jobs (JSON)",
        "example:\n  relaunch devstack status",
    ),
    "preempt": (
        "reclaim a job's Spot VMs: SIGTERM to its replicas, SIGKILL after the grace",
        "Defaults: a grace of 15 s, then, as Vertex documents for Spot, the job is restarted\n"
        "in place (up to 6 times) if its scheduling allows retries; a job Relaunch submitted\n"
        "sets disableRetries, which devstack assumes stops those restarts (Google does not\n"
        "say), so it ends FAILED at once, as it does after the 6 restarts or with --end-job\n"
        "(to restart in place regardless: relaunch devstack restart). Google documents\n"
        "neither the code nor the text of that error: devstack uses\n"
        "code 8 (RESOURCE_EXHAUSTED) and the stockout text unless --code and --message\n"
        "pick others; Vertex sets it about a minute after the end (60 s). JOB is a\n"
        "Relaunch jobId (its current attempt) or a Vertex job name.\n\n"
        "example:\n  relaunch devstack preempt demo-gpt --grace 10\n"
        "  relaunch devstack preempt demo-gpt --grace 0 --end-job --code ABORTED \\\n"
        '      --message "Job was terminated by the system."\n'
        "  relaunch devstack preempt projects/relaunch-dev/locations/us-central1/customJobs/3",
    ),
    "restart": (
        "reclaim a job's Spot VMs and restart its replicas in place (the same CustomJob)",
        'As Vertex documents for Spot ("Compute Engine tries to restart the job up to six\n'
        'times"): SIGTERM to every replica, SIGKILL after the grace (default 15 s), then every\n'
        "replica runs again in the same CustomJob with its environment unchanged, whatever\n"
        "the job's disableRetries. After 6 restarts the job ends FAILED as `preempt` ends it.\n"
        "The trainer records each run (docs/contracts.md, run records); the controller counts\n"
        "each restart as a preemption, or a failure when the records say the program failed.\n\n"
        "example:\n  relaunch devstack restart demo-gpt --grace 5",
    ),
    "oom": (
        "kill one replica as its memory limit would: the job ends out of memory",
        "The replica gets SIGKILL (status 137) and the job ends FAILED with Vertex's\n"
        'documented text "The replica R ran out of memory and exited with a non-zero\n'
        'status of 137." and code 3 (assumed; Google documents no code). No restart.\n\n'
        "example:\n  relaunch devstack oom demo-gpt --replica workerpool1-0",
    ),
    "stockout": (
        "make new jobs wait for capacity, and optionally fail with a stockout",
        "New jobs stay QUEUED for --seconds; with --fail they then end FAILED with\n"
        'code 8 ("Resources are insufficient in region"). No options clears it.\n\n'
        "example:\n  relaunch devstack stockout --seconds 30 --fail\n"
        "  relaunch devstack stockout          # back to normal",
    ),
    "capacity": (
        "leave room for only N replicas (of one machine type): bigger gangs wait or fail",
        "A job whose gang needs more replicas than are free waits QUEUED until jobs end\n"
        "and free enough (--fail: ends FAILED code 8 with the stockout text instead).\n"
        "No --replicas lifts the limit.\n\n"
        "example:\n  relaunch devstack capacity --replicas 2 --machine-type g2-standard-8\n"
        "  relaunch devstack capacity          # back to normal\n"
        "  relaunch devstack capacity --replicas 0 --region us-central1 --fail   # a stockout there",
    ),
    "reclaim-rate": (
        "reclaim a region's running Spot jobs at random, N times per job-hour",
        "Each running Spot job is reclaimed (as `preempt` does) after a random time; FLEX_START\n"
        "and STANDARD jobs never are. 0 stops.\n\n"
        "example:\n  relaunch devstack reclaim-rate --per-hour 30 --region europe-west4\n"
        "  relaunch devstack reclaim-rate --per-hour 0",
    ),
    "faults": (
        "answer a fraction of Vertex API calls with gRPC errors",
        "example:\n  relaunch devstack faults --rate 0.3 --codes UNAVAILABLE,DEADLINE_EXCEEDED\n"
        "  relaunch devstack faults --rate 0   # back to normal",
    ),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "devstack",
        help="local stand-ins for Pub/Sub, GCS and Vertex AI (dev and tests)",
        description=__doc__.split("\n\n")[0],
        epilog='example:\n  eval "$(relaunch devstack up)"   # then run the controller against it\n'
        "  relaunch devstack down",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=lambda args: _usage(parser))
    verbs = parser.add_subparsers(title="sub-verbs", metavar="SUBVERB")

    def verb(name, handler):
        summary, details = _HELP[name]
        sub = verbs.add_parser(
            name,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}.",
            epilog=details,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument(
            "--dir", default=DEFAULT_DIR, help=f"the devstack's state directory (default: ./{DEFAULT_DIR})"
        )
        sub.set_defaults(handler=handler)
        return sub

    up = verb("up", _up)
    up.add_argument("--timeout", type=float, default=START_TIMEOUT, help="seconds to wait for it to be ready")
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start over: stop it and delete its state (jobs, checkpoints, logs) first",
    )
    up.add_argument(
        "--regions",
        default="",
        metavar="R1,R2",
        help="further Vertex regions, each its own stand-in and endpoint (multi-region placements)",
    )
    verb("env", _env)
    verb("down", _down)
    verb("status", _status)
    preempt = verb("preempt", _preempt)
    preempt.add_argument("job", metavar="JOB", help="a jobId (its current attempt) or a Vertex job name")
    preempt.add_argument(
        "--grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL; 0 = SIGKILL with no warning (default 15,"
        " as GKE gives a pod; Vertex documents no value)",
    )
    preempt.add_argument(
        "--end-job", action="store_true", help="end the job at once instead of restarting it in place"
    )
    preempt.add_argument(
        "--code", default=None, help="google.rpc code of the FAILED error, a number or a name (default 8)"
    )
    preempt.add_argument(
        "--message", default=None, help="text of the FAILED error (default: the stockout text)"
    )
    restart = verb("restart", _restart)
    restart.add_argument("job", metavar="JOB", help="a jobId (its current attempt) or a Vertex job name")
    restart.add_argument(
        "--grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL; 0 = SIGKILL with no warning (default 15)",
    )
    oom = verb("oom", _oom)
    oom.add_argument("job", metavar="JOB", help="a jobId (its current attempt) or a Vertex job name")
    oom.add_argument("--replica", default="workerpool0-0", help="which replica (default workerpool0-0)")
    stockout = verb("stockout", _stockout)
    stockout.add_argument("--seconds", type=float, default=0.0, help="how long new jobs queue")
    stockout.add_argument("--fail", action="store_true", help="then fail them with code 8")
    stockout.add_argument("--region", default=None, help="which region (default: the first)")
    capacity = verb("capacity", _capacity)
    capacity.add_argument("--replicas", type=int, default=None, help="replicas to be had (unset: no limit)")
    capacity.add_argument("--machine-type", default=None, help="the limited machine type (unset: every one)")
    capacity.add_argument("--fail", action="store_true", help="a gang that does not fit fails (code 8)")
    capacity.add_argument("--region", default=None, help="which region (default: the first)")
    reclaims = verb("reclaim-rate", _reclaim_rate)
    reclaims.add_argument("--per-hour", type=float, required=True, help="reclaims per running Spot job-hour")
    reclaims.add_argument("--seed", type=int, default=None, help="for a repeatable sequence")
    reclaims.add_argument("--region", default=None, help="which region (default: the first)")
    faults = verb("faults", _faults)
    faults.add_argument("--rate", type=float, required=True, help="fraction of calls, 0 to 1")
    faults.add_argument(
        "--codes", default="UNAVAILABLE", help="comma-separated gRPC codes (default UNAVAILABLE)"
    )
    faults.add_argument("--seed", type=int, default=None, help="for a repeatable sequence")


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _running(state: Path):
    """(pid, env) of the devstack serving `state`, or None."""
    from devstack.control import devstack_alive, read_run_env

    found = read_run_env(state)
    if found and devstack_alive(found[0]):
        return found
    return None


# What `up` prints on stdout when it fails: `eval "$(relaunch devstack up)"` then fails too.
FAILED_EVAL = "false\n"


def _up(args) -> int:
    status = _start(args)
    if status != 0:
        sys.stdout.write(FAILED_EVAL)
    return status


def _exports(state: Path, env: dict[str, str]) -> str:
    from devstack.control import export_lines

    return export_lines({**env, DEVSTACK_DIR_VARIABLE: str(state)})


def _start(args) -> int:
    from devstack.control import LOG_FILE

    state = Path(args.dir).resolve()
    if args.fresh and not _wipe(state):
        return 1
    state.mkdir(parents=True, exist_ok=True)
    running = _running(state)
    if running:
        _prepare(state, running[1])
        sys.stdout.write(_exports(state, running[1]))
        return 0
    with open(state / LOG_FILE, "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "devstack", "serve", "--dir", str(state)]
            + (["--regions", args.regions] if getattr(args, "regions", "") else []),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this shell command and its Ctrl-C
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        running = _running(state)
        if running and running[0] == child.pid:
            _prepare(state, running[1])
            sys.stdout.write(_exports(state, running[1]))
            print(f"# devstack up (pid {child.pid}); log: {state / LOG_FILE}", file=sys.stderr)
            return 0
        if child.poll() is not None:
            print(
                f"relaunch: devstack exited with status {child.returncode} while starting:\n"
                + _tail(state / LOG_FILE),
                file=sys.stderr,
            )
            return 1
        time.sleep(0.1)  # polling a file another process writes, bounded by the deadline
    print(
        f"relaunch: devstack not ready after {args.timeout:g}s; stopping it. Log:\n"
        + _tail(state / LOG_FILE),
        file=sys.stderr,
    )
    _stop(child.pid)
    return 1


# Files that only a devstack directory holds: --fresh deletes no folder without one of them.
DEVSTACK_MARKERS = ("devstack.log", "env.json", "devstack.pid", "cli-layer.json", "controller-state.db")


def _wipe(state: Path) -> bool:
    """Stop the devstack in `state` and delete the folder, if it is one (never another folder)."""
    import shutil

    if not state.exists():
        return True
    if any(state.iterdir()) and not any((state / name).exists() for name in DEVSTACK_MARKERS):
        print(f"relaunch: {state} does not look like a devstack directory; not deleting it", file=sys.stderr)
        return False
    running = _running(state)
    if running and not _stop(running[0]):
        print(f"relaunch: devstack (pid {running[0]}) did not stop", file=sys.stderr)
        return False
    shutil.rmtree(state)
    print(f"# devstack state in {state} deleted (--fresh)", file=sys.stderr)
    return True


# Buckets the files in examples/ name, created so that `relaunch submit examples/demo.yaml` runs.
EXAMPLE_BUCKETS = ("relaunch-demo",)
CONTROLLER_STATE = "controller-state.db"


def _prepare(state: Path, env: dict[str, str]) -> None:
    """Make the devstack ready for the README's flow: the examples' bucket, the controller's
    topics and subscriptions (so a request published before the controller starts is kept),
    and the CLI's devstack config layer (so the next commands, in any shell, use this devstack
    and a controller state store inside it)."""
    from controller import userconfig as config

    saved = dict(os.environ)
    os.environ.update(env)  # the Google clients below talk to the stand-ins
    try:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import pubsub_v1, storage

        from controller.adapters.pubsub import ensure_topology
        from controller.settings import Settings

        gcs = storage.Client(project=env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
        for bucket in EXAMPLE_BUCKETS:
            if gcs.lookup_bucket(bucket) is None:
                gcs.create_bucket(bucket)
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        try:
            ensure_topology(Settings(), publisher, subscriber)
        finally:
            publisher.stop()
            subscriber.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    layer = {key: value for name, value in env.items() if (key := config.key_for_env(name))}
    layer["devstack_dir"] = str(state)
    layer["state_store"] = f"sqlite://{state / CONTROLLER_STATE}"  # state is absolute
    layer["create_subscriptions"] = "true"
    path = config.write_devstack_layer(state, layer)
    print(f"# relaunch CLI configured for this devstack ({path})", file=sys.stderr)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _env(args) -> int:
    state = Path(args.dir).resolve()
    running = _running(state)
    if not running:
        print(
            f"relaunch: no devstack running in {args.dir} (start one: relaunch devstack up)", file=sys.stderr
        )
        sys.stdout.write(FAILED_EVAL)
        return 1
    sys.stdout.write(_exports(state, running[1]))
    return 0


def _unset_lines(env: dict[str, str] | None) -> str:
    """What undoes `up`'s export lines in the shell that evaluated them."""
    names = sorted({*(env or {}), DEVSTACK_DIR_VARIABLE, *DEVSTACK_VARIABLES})
    return f"unset {' '.join(names)}\n"


def _stop(pid: int) -> bool:
    """SIGTERM, then SIGKILL to its process group if it does not stop in time."""
    from devstack.control import devstack_alive

    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 10.0)):
        try:
            if sig == signal.SIGKILL:
                os.killpg(pid, sig)  # its own session: the group is the devstack alone
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not devstack_alive(pid):
                return True
            time.sleep(0.1)
    return not devstack_alive(pid)


def _down(args) -> int:
    from devstack.control import ENV_FILE, PID_FILE, devstack_alive, read_run_env, read_run_pid

    state = Path(args.dir).resolve()
    found = read_run_env(state)
    sys.stdout.write(_unset_lines(found[1] if found else None))
    pid = read_run_pid(state)
    if pid is None or not devstack_alive(pid):
        for name in (ENV_FILE, PID_FILE):
            (state / name).unlink(missing_ok=True)
        _forget(state)
        print(f"devstack: not running in {state}", file=sys.stderr)
        return 0
    if not _stop(pid):
        print(f"relaunch: devstack (pid {pid}) did not stop", file=sys.stderr)
        return 1
    for name in (ENV_FILE, PID_FILE):
        (state / name).unlink(missing_ok=True)
    _forget(state)
    print(f"devstack: stopped (pid {pid})", file=sys.stderr)
    return 0


def _forget(state: Path) -> None:
    """Remove this devstack's CLI layer (only its own: another checkout's stays)."""
    from controller import userconfig as config

    config.remove_devstack_layer(state)


def _control(args):
    """A client for the devstack in --dir, or else the one RELAUNCH_DEVSTACK_CONTROL names."""
    from devstack.control import ControlClient

    running = _running(Path(args.dir).resolve())
    url = running[1]["RELAUNCH_DEVSTACK_CONTROL"] if running else os.environ.get("RELAUNCH_DEVSTACK_CONTROL")
    if not url:
        raise CommandError(
            f'no devstack is running in {args.dir}; start one with: eval "$(relaunch devstack up)"'
        )
    return ControlClient(url)


def _status(args) -> int:
    import json

    print(json.dumps(_control(args).status(), indent=2))
    return 0


def _vertex_name(job: str) -> str:
    """A Vertex job name as given, or the current attempt's Vertex job of a Relaunch jobId."""
    if job.startswith("projects/"):
        return job
    from controller.cli.common import client

    status = client().status(job)
    if status["phase"] in ("succeeded", "failed", "cancelled"):
        raise CommandError(
            f"{job} has already ended ({status['phase']}); there is nothing to preempt. "
            'To run it again from the start: eval "$(relaunch devstack up --fresh)"'
        )
    attempts = status["attempts"]
    if not attempts or not attempts[-1]["vertexJob"]:
        raise CommandError(f"{job} has no attempt on Vertex AI yet; try again once it is running")
    return attempts[-1]["vertexJob"]


def _preempt(args) -> int:
    name = _vertex_name(args.job)
    if _control(args).preempt(
        name, args.grace, end_job=args.end_job or None, code=args.code, message=args.message
    ):
        grace = "devstack's default" if args.grace is None else f"{args.grace:g}s"
        print(f"preempting {name} (grace {grace})", file=sys.stderr)
        return 0
    print(f"relaunch: {name} is not running (already ended or cancelling)", file=sys.stderr)
    return 1


def _restart(args) -> int:
    name = _vertex_name(args.job)
    if _control(args).restart_in_place(name, args.grace):
        grace = "devstack's default" if args.grace is None else f"{args.grace:g}s"
        print(f"restarting {name} in place (grace {grace})", file=sys.stderr)
        return 0
    print(f"relaunch: {name} is not running (already ended or cancelling)", file=sys.stderr)
    return 1


def _oom(args) -> int:
    name = _vertex_name(args.job)
    if _control(args).out_of_memory(name, args.replica):
        print(f"killed {args.replica} of {name} (out of memory)", file=sys.stderr)
        return 0
    print(f"relaunch: {name} is not running replica {args.replica} now", file=sys.stderr)
    return 1


def _reclaim_rate(args) -> int:
    _control(args).reclaim_rate(args.per_hour, args.seed, region=args.region)
    where = f" in {args.region}" if args.region else ""
    print(f"reclaims{where}: {args.per_hour:g} per running Spot job-hour", file=sys.stderr)
    return 0


def _stockout(args) -> int:
    _control(args).stockout(args.seconds, args.fail, region=args.region)
    state = (
        "cleared"
        if args.seconds == 0 and not args.fail
        else (f"new jobs queue {args.seconds:g}s" + (" then fail (code 8)" if args.fail else ""))
    )
    print(f"stockout: {state}", file=sys.stderr)
    return 0


def _capacity(args) -> int:
    _control(args).capacity(
        args.replicas, args.machine_type, "fail" if args.fail else "queue", region=args.region
    )
    if args.replicas is None:
        print("capacity: no limit", file=sys.stderr)
    else:
        which = args.machine_type or "any machine type"
        then = "fail (code 8)" if args.fail else "wait"
        print(f"capacity: {args.replicas} replicas of {which}; bigger gangs {then}", file=sys.stderr)
    return 0


def _faults(args) -> int:
    codes = [code.strip().upper() for code in args.codes.split(",") if code.strip()]
    _control(args).faults(args.rate, codes, args.seed)
    print(f"faults: {args.rate:g} of Vertex calls answer {','.join(codes)}", file=sys.stderr)
    return 0
