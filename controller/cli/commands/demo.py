"""`relaunch demo`: devstack + controller + a real 2-node training job that is preempted and recovers."""

from __future__ import annotations

import argparse
from pathlib import Path

EXAMPLE = """\
Starts the local stand-ins for Pub/Sub, Cloud Storage and Vertex AI, runs the controller as a
real process, publishes examples/demo.yaml (the trainer's built-in GPT example on 2 Spot nodes x
2 processes, DDP on CPU), preempts it mid-training like a Spot reclaim, and shows the controller
resubmitting it from the latest committed checkpoint. Then it runs the same request without any
preemption and compares the final losses: they must be identical. Cleans up after itself; exit
status 0 only if everything above held.

Examples:
  relaunch demo
  relaunch demo --steps 120 --keep --dir /tmp/relaunch-demo    # keep logs and checkpoints
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the local end-to-end demo (preemption and exact resume)",
        description=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--request", type=Path, default=None, help="job request to run (default: examples/demo.yaml)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="override the request's --steps (default: as in the file)"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="working directory for devstack data and logs (default: a temp dir)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the working directory afterwards")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="give up on a job after this many seconds (default 600)"
    )
    parser.set_defaults(handler=run)


def run(args) -> int:
    from controller.cli.demo import DemoOptions
    from controller.cli.demo import run as run_demo

    options = DemoOptions(
        steps=args.steps, workdir=args.dir, keep=args.keep or args.dir is not None, timeout=args.timeout
    )
    if args.request is not None:
        options.request_file = args.request
    if args.steps is not None and args.steps < 20:
        print("relaunch demo: --steps must be at least 20 (the job must live long enough to be preempted)")
        return 2
    return run_demo(options)
