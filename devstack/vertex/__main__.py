"""Run the Vertex JobService stand-in in the foreground: ``python -m devstack.vertex --port N``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from devstack.vertex import start_vertex


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.vertex", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--workdir", required=True, help="replica logs go to WORKDIR/<job id>/")
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "relaunch-dev"))
    parser.add_argument("--region", default=os.environ.get("RELAUNCH_REGION", "us-central1"))
    parser.add_argument("--python-bin-dir", default=None, help="put first on the replicas' PATH")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    emulator = start_vertex(
        args.host,
        args.port,
        project=args.project,
        region=args.region,
        workdir=args.workdir,
        python_bin_dir=args.python_bin_dir,
    )
    print(f"RELAUNCH_VERTEX_ENDPOINT={emulator.host_port}", flush=True)
    try:
        done.wait()
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
