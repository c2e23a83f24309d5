"""`relaunch controller`: run the daemon in the foreground."""

from __future__ import annotations

import argparse
import gc
import os
import sys

EXAMPLE = """\
Runs the controller until SIGTERM/SIGINT: pulls job requests and Vertex job events from Pub/Sub,
submits and watches Vertex AI CustomJobs, resubmits from the latest checkpoint after preemptions,
and serves /healthz, /readyz, /metrics, /v1/jobs and the status page (/) on $PORT.

Settings come from RELAUNCH_* environment variables (README, "Configuration"), else from
`relaunch config` and the devstack layer. Run by hand it needs none: the state store defaults
to $XDG_STATE_HOME/relaunch/state.db (the same one `relaunch status` reads), and when pointed
at a Pub/Sub emulator (devstack) it creates missing topics and subscriptions.

Example (against devstack):
  eval "$(relaunch devstack up)"
  relaunch controller
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="run the controller daemon (what Cloud Run hosts)",
        description=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run)


def apply_defaults() -> None:
    """Fill in what a controller run by hand needs and an operator would not think to set."""
    from controller import userconfig as config

    if not os.environ.get("RELAUNCH_STATE_STORE"):
        os.environ["RELAUNCH_STATE_STORE"] = config.get("state_store") or config.default_state_store()
    store = os.environ["RELAUNCH_STATE_STORE"]
    if store.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(store[len("sqlite://") :]) or ".", exist_ok=True)
    if os.environ.get("PUBSUB_EMULATOR_HOST"):
        # An emulator starts empty: nothing is there unless someone creates it.
        os.environ.setdefault("RELAUNCH_CREATE_SUBSCRIPTIONS", "true")
        # Committed checkpoints are seen on reconcile passes; locally there is no API quota to
        # spare, and a person watching `relaunch wait --for checkpoint` should not wait a minute.
        os.environ.setdefault("RELAUNCH_RECONCILE_SECONDS", "5")


def run(args) -> int:
    from controller import logs
    from controller.settings import InvalidSetting, load

    apply_defaults()
    # Every line is JSON, the first included: Cloud Logging reads the stream as JSON lines.
    logs.configure("INFO")
    log = logs.get("relaunch.controller")
    try:
        settings = load()
    except InvalidSetting as invalid:
        log.error(f"cannot start: invalid setting {invalid}".replace("\n", "; "))
        return 2
    logs.configure(settings.log_level)
    log.info("starting", state_store=settings.state_store)
    from controller.service.daemon import Controller

    controller = Controller(settings)
    settle_interpreter()
    return controller.run()


def settle_interpreter() -> None:
    """Tune the interpreter for a process whose work is looks that must finish quickly.

    A look mostly waits on calls; coming back from one it waits for the interpreter lock up to
    the switch interval while another thread computes (a pass's listing): at CPython's default
    5 ms a look of a dozen calls could wait 60 ms of it, at 1 ms at most a dozen. And a full
    garbage collection walks every tracked object: with a thousand jobs' records and listings in
    memory one took 120-290 ms, stalling every look in flight (measured with gc.callbacks during
    bench/recovery_latency.py). Everything built at start-up (modules, clients) is moved out of
    the collector's reach, and a full collection comes after 100 younger ones instead of 10
    (job documents hold no cycles: reference counting frees them), so such a pause is rarer
    and shorter; the young generations, cheap to walk, are collected a little less often."""
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.freeze()
    gc.set_threshold(2_000, 10, 100)
