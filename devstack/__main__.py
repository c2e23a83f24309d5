"""Run the devstack in this process until SIGINT/SIGTERM.

    python -m devstack up --dir .devstack      # foreground; prints the export lines
    python -m devstack serve --dir .devstack   # what `relaunch devstack up` runs detached

Both write DIR/devstack.pid at once and DIR/env.json when every stand-in is up, and remove
them on the way out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from devstack.control import ENV_FILE, PID_FILE, export_lines, read_run_pid, write_run_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode",
        choices=["up", "serve"],
        help="up: foreground, prints the environment; serve: quiet, for `relaunch devstack up`",
    )
    parser.add_argument("--dir", default=".devstack", help="state directory (default: ./.devstack)")
    parser.add_argument("--project", default="relaunch-dev")
    parser.add_argument("--region", default="us-central1")
    parser.add_argument(
        "--regions",
        default="",
        help="further regions, comma-separated: one Vertex stand-in each (devstack.stack)",
    )
    parser.add_argument(
        "--simulated-replicas",
        metavar="RUN_SECONDS",
        help="every CustomJob gets simulated replicas (no processes) whose primary succeeds after "
        "RUN_SECONDS, or 'forever' (devstack.vertex.simulated)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    state = Path(args.dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())

    write_run_file(state / PID_FILE, f"{pid}\n")
    from devstack.stack import DevStack, settle_interpreter  # after the pid file: `down` finds a slow start

    settle_interpreter()

    options = {}
    if args.simulated_replicas is not None:
        from devstack.vertex.simulated import FOREVER, Simulation

        raw = args.simulated_replicas.strip().lower()
        options["simulation"] = Simulation(None if raw == FOREVER else float(raw))
    regions = tuple(r.strip() for r in args.regions.split(",") if r.strip())
    stack = DevStack(str(state), project=args.project, region=args.region, regions=regions, **options)
    try:
        stack.start()
        env = stack.env()
        # Replicas inherit this process's environment (as a container inherits its image's):
        # without the emulator hosts and the project, the trainer's Google clients would look
        # for real credentials and real buckets.
        os.environ.update(env)
        write_run_file(state / ENV_FILE, json.dumps({"pid": pid, "env": env}, indent=2))
        if args.mode == "up":
            sys.stdout.write(export_lines(env))
            print(f"# devstack running (pid {pid}, state in {state}); Ctrl-C stops it", file=sys.stderr)
            sys.stdout.flush()
        logging.getLogger("devstack").info("devstack up: %s", env)
        stop.wait()
    finally:
        stack.stop()
        if read_run_pid(state) == pid:  # leave a newer devstack's files alone
            for name in (ENV_FILE, PID_FILE):
                (state / name).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
