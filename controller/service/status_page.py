"""The controller's read-only status page: server-rendered HTML, no script, no build step.

    GET /            every job: phase, attempt, preemptions, failures, latest checkpoint, goodput,
                     and why an ended job ended
    GET /jobs/JOB    one job: its attempts (each with where its logs are), the picture
                     `relaunch report --svg` draws, its timeline

Both reload themselves every REFRESH_SECONDS (a meta refresh: no script) while something on
them can still change.

Everything shown that came from a request or from Vertex AI goes through `printable` (control
and bidi characters shown as escapes) and then `html.escape`; the Content-Security-Policy
forbids scripts and outside resources, so even a mistake here cannot run code. Reads go through
the `ControllerApp` the HTTP server already has (status documents only).
"""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote, unquote

from controller.readmodel.goodput import compute, duration
from controller.readmodel.jobs import pending_note
from controller.readmodel.picture import ENDING_COLOURS, attempts_svg
from controller.readmodel.printable import counted, printable

JOB_PAGE_PREFIX = "/jobs/"
REFRESH_SECONDS = 10
ENDED = ("succeeded", "failed", "cancelled")
# Cloud Logging's Logs Explorer, filtered to one Vertex job's replicas (what `relaunch logs` reads).
LOGS_EXPLORER = "https://console.cloud.google.com/logs/query;query={query}?project={project}"
CONTENT_TYPE = "text/html; charset=utf-8"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
th,td{border-bottom:1px solid #ddd;padding:.3rem .7rem;text-align:left;font-size:.92rem}
th{background:#f4f4f4} td.num{text-align:right} code{font-size:.85rem}
.phase{font-weight:600} .succeeded{color:#2ca02c} .failed{color:#d62728}
.running{color:#1f77b4} .backing_off,.waiting{color:#ff7f0e} .cancelled{color:#555}
"""


def handles(path: str) -> bool:
    return path == "/" or path.startswith(JOB_PAGE_PREFIX)


def render(path: str, app, now: float | None = None) -> tuple[int, str]:
    """(HTTP status, HTML) for a GET of `path`; `app` is the server's ControllerApp."""
    now = time.time() if now is None else now
    if path == "/":
        documents = app.list_job_documents()
        live = any(doc["phase"] not in ENDED for doc in documents)
        return 200, _page("Relaunch jobs", _job_table(documents, now), refresh=live)
    job_id = unquote(path[len(JOB_PAGE_PREFIX) :])
    document = app.job_document(job_id) if job_id else None
    if document is None:
        body = f"<p>No job <code>{_text(job_id)}</code>. <a href='/'>All jobs</a></p>"
        return 404, _page("No such job", body)
    live = document["phase"] not in ENDED
    return 200, _page(f"Job {printable(job_id)}", _job_detail(document, now), refresh=live)


def _text(value) -> str:
    return escape(printable("" if value is None else value))


def _page(title: str, body: str, *, refresh: bool = False) -> str:
    reload = f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>" if refresh else ""
    every = f" Reloads every {REFRESH_SECONDS} s." if refresh else ""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{reload}"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{body}"
        f"<p><small>Relaunch controller status page, rendered {_utc(time.time())} UTC. "
        f"Read-only.{every}</small></p></body></html>"
    )


def _utc(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _ratio(document: dict, now: float) -> str:
    ratio = compute(document, now).ratio
    return "-" if ratio is None else f"{ratio:.0%}"


def _phase(phase: str) -> str:
    return f"<span class='phase {escape(phase)}'>{escape(phase)}</span>"


def _job_table(documents: list[dict], now: float) -> str:
    if not documents:
        return "<p>No jobs yet.</p>"
    rows = []
    for doc in sorted(documents, key=lambda d: d.get("createdAt") or 0, reverse=True):
        link = JOB_PAGE_PREFIX + quote(str(doc["jobId"]), safe="")
        step = doc["latestCheckpointStep"]
        rows.append(
            "<tr>"
            f"<td><a href='{escape(link)}'>{_text(doc['jobId'])}</a></td>"
            f"<td>{_text(doc.get('displayName') or '')}</td>"
            f"<td>{_phase(doc['phase'])}</td>"
            f"<td class='num'>{doc['attempt']}</td>"
            f"<td class='num'>{doc['preemptions']}</td>"
            f"<td class='num'>{doc['failures']}</td>"
            f"<td class='num'>{'-' if step is None else escape(str(step))}</td>"
            f"<td class='num'>{_ratio(doc, now)}</td>"
            f"<td>{_utc(doc['createdAt'])}</td>"
            f"<td class='reason'>{_why(doc)}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>Job</th><th>Name</th><th>Phase</th><th>Attempt</th><th>Preemptions</th>"
        "<th>Failures</th><th>Checkpoint</th><th>Goodput</th><th>Created (UTC)</th><th>Why</th></tr>"
    )
    return f"<table id='jobs'>{head}{''.join(rows)}</table>"


def _why(doc: dict) -> str:
    """Why an ended job ended, or how the last attempt ended while the job goes on."""
    if doc.get("terminalReason"):
        return _text(_shortened(str(doc["terminalReason"])))
    last = doc["attempts"][-1] if doc["attempts"] else None
    if last and last.get("ending"):
        return _text(f"attempt {last['number']} {last['ending']}")
    return ""


def _shortened(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _logs(job_id: str, attempt: dict) -> str:
    """Where an attempt's logs are: Logs Explorer for its Vertex job, and the CLI command."""
    command = f"relaunch logs {printable(job_id)} --attempt {attempt['number']}"
    name = attempt.get("vertexJob") or ""
    parts = name.split("/")
    if len(parts) != 6 or parts[0] != "projects":
        return f"<code>{escape(command)}</code>"
    query = quote(f'resource.type="ml_job"\nresource.labels.job_id="{parts[5]}"', safe="")
    url = LOGS_EXPLORER.format(query=query, project=quote(parts[1], safe=""))
    return f"<a href='{escape(url)}'>Logs Explorer</a><br><code>{escape(command)}</code>"


def _job_detail(doc: dict, now: float) -> str:
    result = compute(doc, now)
    note = doc.get("terminalReason") or pending_note(doc, now)
    reason = f" ({_text(note)})" if note else ""
    summary = (
        "<table id='summary'>"
        f"<tr><th>Name</th><td>{_text(doc.get('displayName') or '')}</td></tr>"
        f"<tr><th>Phase</th><td>{_phase(doc['phase'])}{reason}</td></tr>"
        f"<tr><th>Attempts</th><td>{doc['attempt']} ({counted(doc['preemptions'], 'preemption')}, "
        f"{counted(doc['failures'], 'failure')})</td></tr>"
        f"<tr><th>Latest checkpoint</th><td>step {_text(doc['latestCheckpointStep'] or '-')} "
        f"<code>{_text(doc.get('latestCheckpointUri') or doc['checkpointUri'])}</code></td></tr>"
        f"<tr><th>Goodput</th><td>{escape(result.summary())}</td></tr>"
        "</table>"
    )
    attempts = []
    for a in doc["attempts"]:
        ending = a["ending"]
        colour = ENDING_COLOURS.get(ending or "", "#1f77b4")
        how = f"{escape(ending)} ({_text(a['rule'])})" if ending else _text(a["vertexState"] or "requested")
        attempts.append(
            "<tr>"
            f"<td class='num'>{a['number']}</td>"
            f"<td><code>{_text((a['vertexJob'] or '-').rsplit('/', 1)[-1])}</code></td>"
            f"<td>{_vms(a)}{_replicas(a)}</td>"
            f"<td>{_utc(a['startedAt'])}</td><td>{_utc(a['endedAt'])}</td>"
            f"<td style='color:{colour}'>{how}</td>"
            f"<td class='num'>{_text(a['resumeFromStep'] if a['resumeFromStep'] is not None else '-')}</td>"
            f"<td class='num'>{_text(a['checkpointStepAtEnd'] if a['checkpointStepAtEnd'] is not None else '-')}</td>"
            f"<td>{_text(a['errorMessage'] or '')}</td>"
            f"<td>{_interval(a.get('checkpointInterval'))}</td>"
            f"<td>{_logs(doc['jobId'], a)}</td>"
            "</tr>"
        )
    attempt_table = (
        "<h2>Attempts</h2><table id='attempts'><tr><th>#</th><th>Vertex job</th><th>VMs</th>"
        "<th>Started (UTC)</th><th>Ended (UTC)</th><th>Ending (rule)</th><th>From step</th>"
        "<th>Step at end</th><th>Error</th><th>Checkpoint interval</th><th>Logs</th></tr>"
        + "".join(attempts)
        + "</table>"
        if attempts
        else "<p>No attempts yet.</p>"
    )
    timeline = doc.get("timeline", [])
    picture = f"<h2>Picture</h2>{attempts_svg(doc, timeline, result, now)}" if doc["attempts"] else ""
    entries = "".join(
        f"<tr><td>{_utc(e.get('time'))}</td><td class='num'>{escape(str(e.get('attempt', 0)))}</td>"
        f"<td>{_text(e.get('what', ''))}</td></tr>"
        for e in sorted(timeline, key=lambda e: e.get("time") or 0)
    )
    timeline_table = (
        "<h2>Timeline</h2><table id='timeline'><tr><th>Time (UTC)</th><th>Attempt</th>"
        f"<th>What happened</th></tr>{entries}</table>"
    )
    elapsed = duration(result.total)
    so_far = "" if doc["phase"] in ENDED else " so far"
    back = f"<p><a href='/'>All jobs</a> · duration {escape(elapsed)}{so_far} (request to end)</p>"
    return back + summary + attempt_table + picture + timeline_table


def _vms(attempt: dict) -> str:
    """spot / on-demand; for a job with placements the placement, the reason as a tooltip."""
    placed = attempt.get("placement")
    if not placed:
        return "on-demand" if attempt["onDemand"] else "spot"
    return f"<span title='{_text(placed.get('reason', ''))}'>{_text(placed.get('chosen', ''))}</span>"


def _replicas(attempt: dict) -> str:
    """', 2 replicas (shrunk)': the size the attempt asked for (an elastic job may run smaller)."""
    count = sum(attempt.get("replicas") or [])
    if not count:
        return ""
    return f", {count} replicas" + (" <strong>(shrunk)</strong>" if attempt.get("shrunk") else "")


def _interval(chosen: dict | None) -> str:
    """The attempt's checkpoint interval; for `auto`, the estimate behind it as a tooltip."""
    if not chosen:
        return "-"
    text = f"{chosen['seconds']:.1f} s ({_text(chosen.get('mode', ''))})"
    return f"<span title='{_text(chosen.get('explanation', ''))}'>{text}</span>"


def response(path: str, app) -> tuple[int, bytes, str, dict[str, str]]:
    """What the HTTP server sends: (status, body, content type, extra headers)."""
    status, html = render(path, app)
    return status, html.encode("utf-8"), CONTENT_TYPE, HEADERS
