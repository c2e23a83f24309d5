"""`relaunch status [JOB_ID] [--json]`: the jobs in the state store, or one job's attempts."""

from __future__ import annotations

import argparse
import json
import time

from controller.cli import common as view

EXAMPLE = """\
Reads the controller's state store (RELAUNCH_STATE_STORE, as the daemon does). Without a
JOB_ID: one line per job. With one: the job and every attempt it made, how each ended (and the
classifier rule that decided), the checkpoint step it resumed from and the one it left.

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
    from controller.readmodel.jobs import status_document

    store = view.open_job_store(view.settings())
    now = time.time()
    if args.job_id:
        document = view.require_document(store, args.job_id)
        if args.json:
            print(json.dumps(_with_goodput(document, now), indent=2, sort_keys=True))
        else:
            print(describe_job(document, now))
        return 0
    documents = view.all_documents(store)
    if args.json:
        print(
            json.dumps([_with_goodput(d, now, timeline=False) for d in documents], indent=2, sort_keys=True)
        )
        return 0
    if not documents:
        print("no jobs")
        return 0
    rows = [_row(status_document(d, with_timeline=False), d, now) for d in documents]
    print(
        view.table(
            ["JOB", "PHASE", "ATTEMPT", "PREEMPTIONS", "FAILURES", "CHECKPOINT", "AGE", "GOODPUT"], rows
        )
    )
    return 0


def _with_goodput(document: dict, now: float, *, timeline: bool = True) -> dict:
    from controller.readmodel.goodput import compute
    from controller.readmodel.jobs import status_document

    out = status_document(document, with_timeline=timeline)
    result = compute(document, now)
    out["goodput"] = {
        "ratio": result.ratio,
        "totalSeconds": result.total,
        "productiveSeconds": result.productive,
        "lostSeconds": result.lost,
        "waitingForCapacitySeconds": result.waiting_for_capacity,
        "restartingSeconds": result.restarting,
        "stepsPerSecond": result.step_rate,
    }
    return out


def _ratio(document: dict, now: float) -> str:
    from controller.readmodel.goodput import compute

    ratio = compute(document, now).ratio
    return "-" if ratio is None else f"{ratio:.0%}"


def _row(doc: dict, stored: dict, now: float) -> list[str]:
    return [
        doc["jobId"],
        doc["phase"],
        str(doc["attempt"]),
        str(doc["preemptions"]),
        str(doc["failures"]),
        view.dash(doc["latestCheckpointStep"]),
        view.age(doc["createdAt"], now),
        _ratio(stored, now),
    ]


def describe_job(document: dict, now: float) -> str:
    """The one-job page: summary lines, then one row per attempt."""
    from controller.readmodel.goodput import compute
    from controller.readmodel.jobs import status_document

    doc = status_document(document, with_timeline=False)
    lines = [
        f"job:         {doc['jobId']}" + (f" ({doc['displayName']})" if doc["displayName"] else ""),
        f"phase:       {doc['phase']}" + (f" ({doc['terminalReason']})" if doc["terminalReason"] else ""),
        f"created:     {view.utc(doc['createdAt'])} UTC ({view.age(doc['createdAt'], now)} ago)",
        f"attempts:    {doc['attempt']} ({doc['preemptions']} preemptions, {doc['failures']} failures)",
        f"checkpoint:  step {view.dash(doc['latestCheckpointStep'])} under {doc['checkpointUri']}",
        f"goodput:     {compute(document, now).summary()}",
    ]
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
            view.dash(a["checkpointStepAtEnd"]),
        ]
        for a in doc["attempts"]
    ]
    headers = ["#", "VERTEX JOB", "STARTED (UTC)", "ENDED (UTC)", "ENDING (RULE)", "FROM STEP", "STEP AT END"]
    return "\n".join(lines + ["", view.table(headers, rows)])
