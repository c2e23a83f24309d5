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

Lines fit 100 columns (or the terminal's width): columns that matter least go first, long
cells are cut; --wide shows everything. The last line says when the controller was last seen
(its heartbeat in the state store). --phase keeps the jobs in the given phases; --watch prints
again whenever something changes, until every job shown has ended (Ctrl-C stops it sooner).
--json times are RFC 3339 (UTC).

Example:
  relaunch status
  relaunch status --phase running,backing_off
  relaunch status demo-gpt --watch
  relaunch status demo-gpt --json | jq .attempts
"""

PHASES = (
    "accepted",
    "submitting",
    "queued",
    "running",
    "backing_off",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
)
ENDED = ("succeeded", "failed", "cancelled")
WATCH_POLL_SECONDS = 2.0


def _phases(text: str) -> frozenset[str]:
    wanted = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(wanted - set(PHASES))
    if unknown:
        from controller.cli.suggest import closest

        hint = closest(unknown[0], list(PHASES))
        raise argparse.ArgumentTypeError(
            f"unknown phase {unknown[0]!r}"
            + (f"; did you mean {hint!r}?" if hint else "")
            + f" (phases: {', '.join(PHASES)})"
        )
    return wanted


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
    parser.add_argument("--wide", action="store_true", help="every column, however wide the lines get")
    parser.add_argument(
        "--phase",
        type=_phases,
        metavar="PHASE[,PHASE]",
        help="only jobs in these phases (e.g. running,failed)",
    )
    parser.add_argument(
        "--watch",
        "-w",
        action="store_true",
        help="print again on every change until the jobs shown have ended",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("read job state", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    import sys

    client = view.client()
    shown = None
    while True:
        text, jobs = _render(client, args)
        if text != shown:
            if shown is not None and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")  # a fresh screen, like `watch`
            elif shown is not None:
                print()
            print(text, flush=True)
            shown = text
        if not args.watch or all(job["phase"] in ENDED for job in jobs):
            return 0
        time.sleep(WATCH_POLL_SECONDS)  # polling the store: nothing tells the CLI of changes


def _render(client, args: argparse.Namespace) -> tuple[str, list[dict]]:
    """What one look at the store prints, and the jobs it showed."""
    now = time.time()
    width = view.columns(args.wide)
    if args.job_id:
        status = client.status(args.job_id, timeline=args.json)
        if args.json:
            return view.json_text(status), [status]
        return describe_job(status, now, width, controller=controller_line(client, now)), [status]
    jobs = [job for job in client.status() if not args.phase or job["phase"] in args.phase]
    if args.json:
        return view.json_text(jobs), jobs
    if not jobs:
        none = "no jobs" if not args.phase else f"no jobs in phase {', '.join(sorted(args.phase))}"
        return none + "\n" + controller_line(client, now), jobs
    rows = [_row(job, now) for job in jobs]
    headers = ["JOB", "PHASE", "ATTEMPT", "PREEMPTIONS", "FAILURES", "CHECKPOINT", "AGE", "GOODPUT"]
    return view.fitted_table(headers, rows, width) + "\n" + controller_line(client, now), jobs


def controller_line(client, now: float) -> str:
    """The controller's last sign of life: its heartbeat in the state store."""
    from controller.store.heartbeat import is_fresh

    beat = client.controller_heartbeat()
    if beat is None:
        return "controller: none has run against this state store (start one: relaunch controller)"
    seen = f"{view.age(beat['time'], now)} ago ({printable(beat.get('holder', '?'))})"
    if is_fresh(beat, now):
        return f"controller: running, last seen {seen}"
    return f"controller: NOT RUNNING, last seen {seen} (start one: relaunch controller)"


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


def describe_job(doc: dict, now: float, width: int | None = None, *, controller: str | None = None) -> str:
    """The one-job page: summary lines, then one row per attempt. Every string that came from
    the request or from Vertex goes through `printable`."""
    from controller.readmodel.goodput import compute
    from controller.readmodel.jobs import pending_note

    name = printable(doc["displayName"]) if doc["displayName"] else ""
    reason = printable(doc["terminalReason"]) if doc["terminalReason"] else pending_note(doc, now) or ""
    lines = [
        f"job:         {printable(doc['jobId'])}" + (f" ({name})" if name else ""),
        f"phase:       {doc['phase']}" + (f" ({reason})" if reason else ""),
        f"created:     {view.utc(doc['createdAt'])} UTC ({view.age(doc['createdAt'], now)} ago)",
        f"attempts:    {doc['attempt']} ({counted(doc['preemptions'], 'preemption')}, "
        f"{counted(doc['failures'], 'failure')})",
        f"checkpoint:  step {view.dash(doc['latestCheckpointStep'])} under {printable(doc['checkpointUri'])}",
        f"goodput:     {compute(doc, now).summary()}",
    ]
    if controller:
        lines.append(f"controller:  {controller.removeprefix('controller: ')}")
    if doc.get("elastic"):
        lines.append(f"size:        {_size_line(doc)}")
    if doc["nextAttemptAt"] and doc["phase"] == "backing_off":
        lines.append(f"next:        attempt at {view.utc(doc['nextAttemptAt'])} UTC")
    if not doc["attempts"]:
        return "\n".join(_wrapped(lines, width) + ["", "no attempts yet"])
    rows = [
        [
            str(a["number"]),
            view.dash(a["vertexJob"] and a["vertexJob"].rsplit("/", 1)[-1]),
            _when(a["startedAt"], width),
            _when(a["endedAt"], width),
            (f"{a['ending']} ({a['rule']})" + ("?" if a.get("provisional") else ""))
            if a["ending"]
            else (a["vertexState"] or "requested"),
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
    # Narrow terminals lose the columns that matter least first (the Vertex job is in --json).
    attempts = view.fitted_table(
        headers, rows, width, droppable=("VERTEX JOB",), when_empty=("CKPT EVERY", "REPLICAS")
    )
    return "\n".join(
        _wrapped(lines, width)
        + [
            "",
            attempts,
            *_wrapped(
                interval_lines(doc["attempts"])
                + placement_lines(doc["attempts"])
                + _evidence_lines(doc["attempts"]),
                width,
            ),
        ]
    )


def _evidence_lines(attempts: list[dict]) -> list[str]:
    """What failed, per attempt, from the trainer's records (with the logs command to open), and
    a note on endings decided before Vertex's error came ("?" in the table)."""
    lines = [f"attempt {a['number']}: {printable(a['evidence'])}" for a in attempts if a.get("evidence")]
    lines += [  # restarts of the attempt's CustomJob in place (Vertex's own), each counted
        f"attempt {a['number']}: restarted in place (run {r['run']}), counted as a "
        f"{'failure' if r['previousFailed'] else 'preemption'}: {printable(r['evidence'])}"
        for a in attempts
        for r in a.get("restarts") or []
    ]
    if any(a.get("provisional") for a in attempts):
        lines.append(
            "?: decided at the end from the evidence; Vertex's error, when it comes, confirms or corrects it"
        )
    return lines


def _when(seconds: float | None, width: int | None) -> str:
    """A UTC time; without its year when the page must fit a width (the year is on `created:`)."""
    text = view.utc(seconds)
    if width is not None and len(text) == 19 and text[:4].isdigit():
        return text[5:]
    return text


def _wrapped(lines: list[str], width: int | None) -> list[str]:
    """Long summary lines folded under their value's column (13), to fit `width`."""
    import textwrap

    if width is None:
        return lines
    out = []
    for line in lines:
        out.extend(textwrap.wrap(line, width, subsequent_indent=" " * 13) if len(line) > width else [line])
    return out


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


def placement_lines(attempts: list[dict[str, Any]]) -> list[str]:
    """One line per attempt of a job with placements: where it runs, and the figures compared."""
    lines = [
        f"attempt {a['number']} placed on {printable(str(a['placement']['chosen']))}: "
        f"{printable(str(a['placement']['reason']))}"
        for a in attempts
        if a.get("placement")
    ]
    return ["", *lines] if lines else []
