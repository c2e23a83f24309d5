"""`relaunch controller`: run the daemon in the foreground."""

from __future__ import annotations

import argparse

EXAMPLE = """\
Runs the controller until SIGTERM/SIGINT: pulls job requests and Vertex job events from Pub/Sub,
submits and watches Vertex AI CustomJobs, resubmits from the latest checkpoint after preemptions,
and serves /healthz, /readyz, /metrics and /v1/jobs on $PORT.

All settings come from RELAUNCH_* environment variables (see README, "Configuration").

Example (against devstack):
  eval "$(relaunch devstack up)"
  RELAUNCH_CREATE_SUBSCRIPTIONS=true RELAUNCH_STATE_STORE=sqlite:///tmp/relaunch.db \\
      PORT=8080 relaunch controller
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="run the controller daemon (what Cloud Run hosts)",
        description=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run)


def run(args) -> int:
    from controller.service.daemon import main

    return main()
