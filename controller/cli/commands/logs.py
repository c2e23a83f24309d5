"""`relaunch logs JOB_ID [--attempt N] [--replica workerpool0-0] [--follow]`: an attempt's
training logs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from controller.cli import common as view
from controller.readmodel.printable import printable

EXAMPLE = """\
Prints what the replicas of one attempt wrote (the latest attempt unless --attempt), every
line made printable (control characters and escapes are shown, never interpreted).

On devstack (the devstack_dir or devstack_control property is set, as `relaunch devstack up`
does), reads the replica log files devstack writes: DIR/vertex/<Vertex job id>/<replica>.log.
Otherwise reads Cloud Logging: resource.type="ml_job", resource.labels.job_id=<Vertex job id>,
resource.labels.task_name=<replica>, in the project property; needs roles/logging.viewer.

--follow keeps printing new lines until the attempt ends (Ctrl-C stops it at any time).

Example:
  relaunch logs demo-gpt
  relaunch logs demo-gpt --attempt 1 --replica workerpool1-0
  relaunch logs demo-gpt --follow
"""

# How often --follow looks for new lines; Cloud Logging reads are quota-limited.
LOCAL_POLL_SECONDS = 0.5
CLOUD_POLL_SECONDS = 5.0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print the training logs of one attempt of a job",
        description="Print the training logs of a job's attempt (devstack files or Cloud Logging).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.add_argument("--attempt", type=int, metavar="N", help="attempt number (default: the latest)")
    parser.add_argument(
        "--replica", default="workerpool0-0", help="replica: workerpool<pool>-<index> (default workerpool0-0)"
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the attempt ends")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read the logs", lambda: _run(args))


def pick_attempt(status: dict, number: int | None) -> dict:
    attempts = status["attempts"]
    if not attempts:
        raise view.CommandError(f"{printable(status['jobId'])} has no attempt yet")
    if number is None:
        return attempts[-1]
    for attempt in attempts:
        if attempt["number"] == number:
            return attempt
    raise view.CommandError(
        f"{printable(status['jobId'])} has no attempt {number} (attempts 1 to {attempts[-1]['number']})"
    )


def _run(args: argparse.Namespace) -> int:
    client = view.client()
    status = client.status(args.job_id)
    attempt = pick_attempt(status, args.attempt)
    if not attempt["vertexJob"]:
        raise view.CommandError(f"attempt {attempt['number']} was not submitted to Vertex AI yet; no logs")
    vertex_id = attempt["vertexJob"].rsplit("/", 1)[-1]

    def ended() -> bool:
        return pick_attempt(client.status(args.job_id), attempt["number"])["endedAt"] is not None

    directory = devstack_dir()
    if directory is not None:
        lines = local_lines(directory / "vertex" / vertex_id / f"{args.replica}.log", args.follow, ended)
    else:
        from controller import userconfig as config

        lines = cloud_lines(
            config.require("project"),
            vertex_id,
            args.replica,
            args.follow,
            ended,
            float(config.get("rpc_timeout_seconds")),
        )
    for line in lines:
        sys.stdout.write(printable(line.rstrip("\n"), keep_tabs=True) + "\n")
        if args.follow:
            sys.stdout.flush()
    return view.EXIT_OK


def devstack_dir() -> Path | None:
    """devstack's state directory when the CLI is pointed at a devstack, else None."""
    from controller import userconfig as config

    named = config.get("devstack_dir")
    if named:
        return Path(named)
    control = config.get("devstack_control")
    if control:
        from devstack.control import ControlClient

        return Path(ControlClient(control, timeout=5).status()["dir"])
    return None


def local_lines(path: Path, follow: bool, ended) -> Iterator[str]:
    if not path.exists() and not follow:
        raise view.CommandError(
            f"no log file {path} (is --replica right? replicas: workerpool<pool>-<index>)"
        )
    position = 0
    while True:
        # Decide whether this is the last read before reading, so no line written in between
        # is lost: once the attempt has ended its replicas write nothing more.
        last = not follow or ended()
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as handle:
                handle.seek(position)
                chunk = handle.read()
                # Hold back a partial last line until its newline arrives.
                complete = chunk if last else chunk[: chunk.rfind("\n") + 1]
                position += len(complete.encode("utf-8", errors="replace"))
                yield from complete.splitlines()
        if last:
            return
        time.sleep(LOCAL_POLL_SECONDS)  # polling a file another process appends to


def cloud_lines(
    project: str, vertex_id: str, replica: str, follow: bool, ended, timeout: float
) -> Iterator[str]:
    """Lines from Cloud Logging, oldest first; with `follow`, new ones until the attempt ends."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry, if_exception_type
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    client = LoggingServiceV2Client()
    retry = Retry(
        predicate=if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.ResourceExhausted),
        timeout=timeout * 3,
    )
    base = (
        f'resource.type="ml_job" AND resource.labels.job_id="{vertex_id}" '
        f'AND resource.labels.task_name="{replica}"'
    )
    seen: set[str] = set()
    newest = None
    while True:
        last = not follow or ended()
        query = base if newest is None else f'{base} AND timestamp>="{newest}"'
        pager = client.list_log_entries(
            request={"resource_names": [f"projects/{project}"], "filter": query, "order_by": "timestamp asc"},
            retry=retry,
            timeout=timeout,
        )
        for entry in pager:
            if entry.insert_id in seen:
                continue
            seen.add(entry.insert_id)
            newest = entry.timestamp.isoformat() if entry.timestamp else newest
            yield _entry_text(entry)
        if last:
            return
        time.sleep(CLOUD_POLL_SECONDS)


def _entry_text(entry) -> str:
    if entry.text_payload:
        return entry.text_payload
    payload = entry.json_payload
    if payload:
        return str(payload.get("message") or dict(payload))
    return ""
