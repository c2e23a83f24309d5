"""`relaunch status [JOB_ID] [--json]`: the jobs in the state store, or one job's attempts."""

from __future__ import annotations

import argparse
import time
from typing import Any

from controller.cli import common as view
from controller.readmodel.printable import counted, printable

EXAMPLE = """\
Reads the controller's state store (the state_store property: RELAUNCH_STATE_STORE or
`relaunch config set state_store URL`). Without a JOB_ID: one line per job. With one: the job and
every attempt it made, how each ended (and the classifier rule that decided), the checkpoint
step it resumed from and the one it left. Exit status 1 if there is no such job.

Example:
  relaunch status
  relaunch status demo-gpt
  relaunch status demo-gpt --json | jq .attempts
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status",
        help="list jobs, or show one job's attempt history",
        description="Show the jobs the controller manages, or one job in detail.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", nargs="?", metavar="JOB_ID", help="show this job in detail")
    parser.add_argument(
        "--json", action="store_true", help="print the JSON document (the one job, or a list of all jobs)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    client = view.client()
    now = time.time()
    if args.job_id:
        status = client.status(args.job_id, timeline=args.json)
        if args.json:
            view.print_json(status)
        else:
            print(describe_job(status, now))
        return 0
    jobs = client.status()
    if args.json:
        view.print_json(jobs)
        return 0
    if not jobs:
        print("no jobs")
        return 0
    rows = [_row(job, now) for job in jobs]
    print(
        view.table(
            ["JOB", "PHASE", "ATTEMPT", "PREEMPTIONS", "FAILURES", "CHECKPOINT", "AGE", "GOODPUT"], rows
        )
    )
    return 0


def _ratio(job: dict) -> str:
    ratio = job["goodput"]["ratio"]
    return "-" if ratio is None else f"{ratio:.0%}"


def _row(job: dict, now: float) -> list[str]:
    return [
        job["jobId"],
        job["phase"],
        str(job["attempt"]),
        str(job["preemptions"]),
        str(job["failures"]),
        view.dash(job["latestCheckpointStep"]),
        view.age(job["createdAt"], now),
        _ratio(job),
    ]


def describe_job(doc: dict, now: float) -> str:
    """The one-job page: summary lines, then one row per attempt. Every string that came from
    the request or from Vertex goes through `printable`."""
    from controller.readmodel.goodput import compute

    name = printable(doc["displayName"]) if doc["displayName"] else ""
    reason = printable(doc["terminalReason"]) if doc["terminalReason"] else ""
    lines = [
        f"job:         {printable(doc['jobId'])}" + (f" ({name})" if name else ""),
        f"phase:       {doc['phase']}" + (f" ({reason})" if reason else ""),
        f"created:     {view.utc(doc['createdAt'])} UTC ({view.age(doc['createdAt'], now)} ago)",
        f"attempts:    {doc['attempt']} ({counted(doc['preemptions'], 'preemption')}, "
        f"{counted(doc['failures'], 'failure')})",
        f"checkpoint:  step {view.dash(doc['latestCheckpointStep'])} under {printable(doc['checkpointUri'])}",
        f"goodput:     {compute(doc, now).summary()}",
    ]
    if doc.get("elastic"):
        lines.append(f"size:        {_size_line(doc)}")
    if doc["nextAttemptAt"] and doc["phase"] == "backing_off":
        lines.append(f"next:        attempt at {view.utc(doc['nextAttemptAt'])} UTC")
    if not doc["attempts"]:
        return "\n".join(lines + ["", "no attempts yet"])
    rows = [
        [
            str(a["number"]),
            view.dash(a["vertexJob"] and a["vertexJob"].rsplit("/", 1)[-1]),
            view.utc(a["startedAt"]),
            view.utc(a["endedAt"]),
            f"{a['ending']} ({a['rule']})" if a["ending"] else (a["vertexState"] or "requested"),
            view.dash(a["resumeFromStep"]),
            "unknown" if a.get("progressUnknown") else view.dash(a["checkpointStepAtEnd"]),
            interval_cell(a.get("checkpointInterval")),
            _replicas_cell(a),
        ]
        for a in doc["attempts"]
    ]
    headers = [
        "#",
        "VERTEX JOB",
        "STARTED (UTC)",
        "ENDED (UTC)",
        "ENDING (RULE)",
        "FROM STEP",
        "STEP AT END",
        "CKPT EVERY",
        "REPLICAS",
    ]
    return "\n".join(lines + ["", view.table(headers, rows), *interval_lines(doc["attempts"])])


def _replicas_cell(attempt: dict) -> str:
    """'2 (1+1) shrunk' or '4 (1+3)': the replicas per pool the attempt asked for."""
    replicas = [count for count in attempt.get("replicas") or [] if count]
    if not replicas:
        return "-"
    text = f"{sum(replicas)} ({'+'.join(map(str, replicas))})"
    return text + (" shrunk" if attempt.get("shrunk") else "")


def _size_line(doc: dict) -> str:
    elastic = doc["elastic"]
    requested, minimum = sum(doc["requestedReplicas"]), sum(elastic["minReplicas"])
    current = doc["attempts"][-1] if doc["attempts"] else None
    now = f"{sum(current['replicas'])} of " if current else ""
    grow = elastic["growBack"]
    if elastic.get("growBackAfterSeconds"):
        grow += f" {elastic['growBackAfterSeconds']:.0f}s"
    return (
        f"{now}{requested} replicas requested, at least {minimum} (shrink after "
        f"{elastic['shrinkAfterSeconds']:.0f}s waiting; grow back: {grow})"
    )


def interval_cell(chosen: dict[str, Any] | None) -> str:
    if not chosen:
        return "-"
    return f"{chosen['seconds']:.1f}s {chosen.get('mode', '')}".strip()


def interval_lines(attempts: list[dict[str, Any]]) -> list[str]:
    """One line per attempt of an `auto` job: the estimate behind its checkpoint interval."""
    lines = []
    for a in attempts:
        chosen = a.get("checkpointInterval")
        if chosen and chosen.get("mode") == "auto":
            lines.append(f"attempt {a['number']} interval: {printable(chosen.get('explanation', ''))}")
    return ["", *lines] if lines else []
