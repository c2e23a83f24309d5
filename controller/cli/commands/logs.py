"""`relaunch logs JOB_ID [--attempt N] [--replica workerpool0-0] [--follow]`: an attempt's
training logs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from controller.cli import common as view
from controller.cli.log_lines import Record, as_json, human, interleave, parse, since_seconds
from controller.readmodel.printable import printable

EXAMPLE = """\
Prints what the replicas of one attempt wrote (the latest attempt unless --attempt), every
replica's lines interleaved by time, each with the replica's name: time, replica, severity,
message, then the record's other fields. --json prints the raw records instead (one JSON
object per line, with "replica"). --replica keeps one replica; --tail N the last N lines;
--since 10m the lines of the last ten minutes. Every string is made printable (control
characters and escapes are shown, never interpreted).

On devstack (the devstack_dir or devstack_control property is set, as `relaunch devstack up`
does), reads the replica log files devstack writes: DIR/vertex/<Vertex job id>/<replica>.log.
Otherwise reads Cloud Logging: resource.type="ml_job", resource.labels.job_id=<Vertex job id>
(and resource.labels.task_name=<replica> with --replica), in the project property; needs
roles/logging.viewer.

--follow keeps printing new lines until the attempt ends (Ctrl-C stops it at any time).

Example:
  relaunch logs demo-gpt
  relaunch logs demo-gpt --attempt 1 --replica workerpool1-0
  relaunch logs demo-gpt --tail 20 --since 5m
  relaunch logs demo-gpt --json | jq 'select(.severity == "WARNING")'
  relaunch logs demo-gpt --follow
"""

# How often --follow looks for new lines; Cloud Logging reads are quota-limited.
LOCAL_POLL_SECONDS = 0.5
CLOUD_POLL_SECONDS = 5.0
# Replica names are short (workerpool0-0); the column is this wide at least.
REPLICA_COLUMN = 13


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of lines (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {text})")
    return value


def _since(text: str) -> float:
    try:
        return since_seconds(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--since takes ")) from None


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
        "--replica", default=None, help="only this replica, e.g. workerpool0-0 (default: all)"
    )
    parser.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    parser.add_argument(
        "--since", type=_since, metavar="DURATION", help="only lines of the last 30s, 10m, 2h..."
    )
    parser.add_argument("--json", action="store_true", help="the raw records, one JSON object per line")
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
        folder = directory / "vertex" / vertex_id
        replicas = _local_replicas(folder, args.replica, f"attempt {attempt['number']} of {args.job_id}")
        batches = local_batches(folder, replicas, args.follow, ended)
    else:
        from controller import userconfig as config

        batches = cloud_batches(
            config.require("project"),
            vertex_id,
            args.replica,
            args.follow,
            ended,
            config.seconds("rpc_timeout_seconds"),
        )
    _print(batches, args)
    return view.EXIT_OK


def _print(batches: Iterator[list[Record]], args: argparse.Namespace) -> None:
    """The first batch is everything so far (--since and --tail apply to it); with --follow,
    each later batch is what was written since."""
    from collections import deque

    oldest = time.time() - args.since if args.since is not None else None
    first = True
    for batch in batches:
        if oldest is not None:
            batch = [r for r in batch if r.time is None or r.time >= oldest]
        if first and args.tail is not None:
            batch = list(deque(batch, maxlen=args.tail))
        first = False
        width = max([REPLICA_COLUMN, *(len(r.replica) for r in batch)])
        for record in batch:
            sys.stdout.write((as_json(record) if args.json else human(record, width)) + "\n")
        if args.follow:
            sys.stdout.flush()


def _local_replicas(folder: Path, wanted: str | None, what: str) -> list[str]:
    existing = sorted(path.stem for path in folder.glob("*.log")) if folder.is_dir() else []
    if wanted is None:
        if not existing:
            raise view.CommandError(f"{what} has written no logs yet (nothing in {folder})")
        return existing
    if wanted not in existing:
        from controller.cli.suggest import closest

        hint = closest(wanted, existing)
        listed = ", ".join(existing) or "none yet"
        raise view.CommandError(
            f"{what} has no replica {printable(wanted)!r}"
            + (f"; did you mean {hint!r}?" if hint else "")
            + f" (its replicas: {listed})"
        )
    return [wanted]


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


def local_batches(folder: Path, replicas: list[str], follow: bool, ended) -> Iterator[list[Record]]:
    """Each look at the replicas' files: the complete lines written since the last look, of
    every replica, interleaved by time."""
    readers = {name: _FileTail(folder / f"{name}.log") for name in replicas}
    while True:
        # Decide whether this is the last read before reading, so no line written in between
        # is lost: once the attempt has ended its replicas write nothing more.
        last = not follow or ended()
        yield interleave(
            {name: [parse(name, line) for line in tail.read(last)] for name, tail in readers.items()}
        )
        if last:
            return
        time.sleep(LOCAL_POLL_SECONDS)  # polling files another process appends to


class _FileTail:
    def __init__(self, path: Path):
        self.path = path
        self.position = 0

    def read(self, last: bool) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8", errors="replace") as handle:
            handle.seek(self.position)
            chunk = handle.read()
        # Hold back a partial last line until its newline arrives.
        complete = chunk if last else chunk[: chunk.rfind("\n") + 1]
        self.position += len(complete.encode("utf-8", errors="replace"))
        return complete.splitlines()


def cloud_batches(
    project: str, vertex_id: str, replica: str | None, follow: bool, ended, timeout: float
) -> Iterator[list[Record]]:
    """Records from Cloud Logging, oldest first; with `follow`, new ones until the attempt ends."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry, if_exception_type
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    client = LoggingServiceV2Client()
    retry = Retry(
        predicate=if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.ResourceExhausted),
        timeout=timeout * 3,
    )
    base = f'resource.type="ml_job" AND resource.labels.job_id="{vertex_id}"'
    if replica is not None:
        base += f' AND resource.labels.task_name="{replica}"'
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
        batch = []
        for entry in pager:
            if entry.insert_id in seen:
                continue
            seen.add(entry.insert_id)
            newest = entry.timestamp.isoformat() if entry.timestamp else newest
            name = entry.resource.labels.get("task_name", replica or "?")
            batch.append(parse(name, _entry_text(entry)))
        yield batch
        if last:
            return
        time.sleep(CLOUD_POLL_SECONDS)


def _entry_text(entry) -> str:
    if entry.text_payload:
        return entry.text_payload
    payload = entry.json_payload
    if payload:
        import json

        return json.dumps(dict(payload), default=str)
    return ""
