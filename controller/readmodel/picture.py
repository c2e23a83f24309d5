"""One job's life as an SVG picture: one horizontal bar per attempt on a shared time axis.

The same picture as `relaunch report --png`, without matplotlib: the controller's status page
inlines it and `relaunch report --svg` writes it. Each bar is the attempt's wait for capacity
(submitted -> started, grey), then its running time coloured by how it ended, with the part the
goodput estimate counts as lost hatched at its end; the restart gap between one attempt's end
and the next one's request (backoff) is a pale bar on the next attempt's row. Committed
checkpoints are diamonds. The time axis has ticks at round intervals (10s, 1m, 15m...).
Pure and stdlib only; every text is escaped.
"""

from __future__ import annotations

from html import escape

from controller.readmodel.goodput import Goodput, duration, job_end
from controller.readmodel.jobs import Json

ENDING_COLOURS = {
    "preempted": "#ff7f0e",
    "user_error": "#d62728",
    "infrastructure": "#9467bd",
    "timeout": "#8c564b",
    "succeeded": "#2ca02c",
    "cancelled": "#000000",
}
RUNNING_COLOUR = "#1f77b4"  # still running, or an ending not listed above
WAITING_COLOUR = "#d3d3d3"
RESTARTING_COLOUR = "#fde0b6"  # between an attempt's end and the next one's request (backoff)

_LEFT, _RIGHT, _TOP, _ROW, _BOTTOM = 90, 100, 30, 34, 40
_WIDTH = 900
_LEGEND_ROW = 20
# Round tick intervals, in seconds: the axis uses the smallest that gives at most _MAX_TICKS.
_TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_MAX_TICKS = 8


def tick_step(total: float) -> float:
    """A round interval that cuts `total` seconds into at most _MAX_TICKS parts."""
    for step in _TICK_STEPS:
        if total / step <= _MAX_TICKS:
            return float(step)
    days = 86400.0
    return days * max(1, int(total / days / _MAX_TICKS) + 1)


def ticks(total: float) -> list[float]:
    """Offsets from 0 at a round interval, none beyond `total`."""
    step = tick_step(total)
    return [i * step for i in range(int(total // step) + 1)]


def attempts_svg(view: Json, timeline: list[Json], result: Goodput, now: float) -> str:
    """The picture of `view` (a status document) as a standalone <svg> element."""
    attempts = view["attempts"]
    origin = float(view["createdAt"])
    end = max(job_end(view, now), origin + 1.0)
    plot = _WIDTH - _LEFT - _RIGHT
    legend = _legend_items(attempts, timeline)
    legend_rows = _legend_layout(legend)[-1][0] + 1 if legend else 1
    height = _TOP + _ROW * max(1, len(attempts)) + _BOTTOM + _LEGEND_ROW * legend_rows

    def x(t: float) -> float:
        return _LEFT + plot * (min(max(t, origin), end) - origin) / (end - origin)

    lost = {row.number: row.lost for row in result.attempts}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="attempts of {escape(str(view["jobId"]))}" '
        'font-family="sans-serif" font-size="12">',
        '<defs><pattern id="lost" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff" fill-opacity="0.3"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-width="2"/></pattern></defs>',
    ]
    for index, attempt in enumerate(attempts):
        y = _TOP + index * _ROW
        number = attempt["number"]
        parts.append(f'<text x="{_LEFT - 8}" y="{y + 20}" text-anchor="end">attempt {number}</text>')
        queued_from = attempt.get("submittedAt") or attempt.get("requestedAt")
        started, ended = attempt.get("startedAt"), attempt.get("endedAt")
        wait_until = started or ended or now
        previous_end = attempts[index - 1].get("endedAt") if index else None
        if previous_end and queued_from and queued_from > previous_end:
            gap = f"restarting: {duration(queued_from - previous_end)} between attempts {number - 1} and {number}"
            parts.append(_bar(x(previous_end), x(queued_from), y, RESTARTING_COLOUR, gap))
        if queued_from and wait_until > queued_from:
            parts.append(_bar(x(queued_from), x(wait_until), y, WAITING_COLOUR, "waiting for capacity"))
        if started is not None:
            stop = ended or attempt.get("vertexEndedAt") or now
            ending = attempt.get("ending")
            colour = ENDING_COLOURS.get(ending or "", RUNNING_COLOUR)
            label = f"attempt {number}: {ending or 'running'}, ran {duration(stop - started)}"
            parts.append(_bar(x(started), x(stop), y, colour, label))
            parts += [
                _bar(x(a), x(b), y, RESTARTING_COLOUR, f"restarting in place: {duration(b - a)} (run {run})")
                for a, b, run in _restart_gaps(attempt)
            ]
            if not ended and attempt.get("vertexEndedAt"):  # ended; its decision is awaited
                parts.append(_bar(x(stop), x(now), y, RESTARTING_COLOUR, "ended; deciding how"))
            wasted = lost.get(number, 0.0)
            if ended and wasted > 0:
                parts.append(
                    _bar(x(stop - wasted), x(stop), y, "url(#lost)", f"lost {duration(wasted)}", opacity=1.0)
                )
            text = ending or "running"
            parts.append(f'<text x="{x(stop) + 4:.1f}" y="{y + 20}" font-size="11">{escape(text)}</text>')
    for item in timeline:
        step = item.get("step")
        number = item.get("attempt")
        rows = [i for i, a in enumerate(attempts) if a["number"] == number]
        if step is None or not rows or item.get("time") is None:
            continue
        cx, cy = x(item["time"]), _TOP + rows[0] * _ROW + 16
        parts.append(f"{_diamond(cx, cy)}<title>checkpoint step {escape(str(step))}</title></path>")
    axis_y = _TOP + _ROW * max(1, len(attempts)) + 6
    parts.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_LEFT + plot}" y2="{axis_y}" stroke="#444"/>')
    for offset in ticks(end - origin):
        tx = _LEFT + plot * offset / (end - origin)
        label = duration(offset)
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" y2="{axis_y + 4}" stroke="#444"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">{label}</text>')
    ratio = "n/a" if result.ratio is None else f"{result.ratio:.0%}"
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP - 10}" font-weight="bold">time since the request '
        f"(goodput {ratio})</text>"
    )
    parts.append(_legend(axis_y + 40, legend))
    parts.append("</svg>")
    return "\n".join(parts)


def _restart_gaps(attempt: Json) -> list[tuple[float, float, int]]:
    """(previous run's end, restart's start, run) of each restart in place with a known end."""
    return [
        (float(r["previousEndedAt"]), float(r["startedAt"]), int(r["run"]))
        for r in attempt.get("restarts") or []
        if r.get("previousEndedAt") is not None and r["startedAt"] > r["previousEndedAt"]
    ]


def _bar(x0: float, x1: float, y: float, fill: str, title: str, opacity: float = 1.0) -> str:
    width = max(1.0, x1 - x0)
    return (
        f'<rect x="{x0:.1f}" y="{y + 6}" width="{width:.1f}" height="20" fill="{fill}" '
        f'fill-opacity="{opacity}"><title>{escape(title)}</title></rect>'
    )


def _diamond(cx: float, cy: float) -> str:
    """An open checkpoint diamond centred on (cx, cy); the caller closes the <path>."""
    return f'<path d="M{cx:.1f},{cy - 6} l5,6 l-5,6 l-5,-6 z" fill="#fff" stroke="#000">'


def _legend_items(attempts: list[Json], timeline: list[Json]) -> list[tuple[str, str]]:
    """(name, fill) of every mark the picture uses; fill "diamond" for the checkpoint mark."""
    seen: list[str] = []
    for attempt in attempts:
        ending = attempt.get("ending") or ("running" if attempt.get("startedAt") else None)
        if ending and ending not in seen:
            seen.append(ending)
    items = [("waiting", WAITING_COLOUR)] + [(e, ENDING_COLOURS.get(e, RUNNING_COLOUR)) for e in seen]
    if len(attempts) > 1:
        items.append(("restarting", RESTARTING_COLOUR))
    items.append(("lost work", "url(#lost)"))
    if any(item.get("step") is not None for item in timeline):
        items.append(("checkpoint committed", "diamond"))
    return items


def _legend_layout(items: list[tuple[str, str]]) -> list[tuple[int, float]]:
    """(row, x) of each legend item, wrapping before the right edge."""
    out, row, cursor = [], 0, float(_LEFT)
    for name, _ in items:
        advance = 24 + 7 * len(name)
        if cursor + advance > _WIDTH - 10 and cursor > _LEFT:
            row, cursor = row + 1, float(_LEFT)
        out.append((row, cursor))
        cursor += advance
    return out


def _legend(y: float, items: list[tuple[str, str]]) -> str:
    out = []
    for (name, fill), (row, cursor) in zip(items, _legend_layout(items)):
        top = y + row * _LEGEND_ROW
        if fill == "diamond":
            out.append(f"{_diamond(cursor + 6, top - 4)}</path>")
        else:
            out.append(
                f'<rect x="{cursor}" y="{top - 10}" width="12" height="12" fill="{fill}" stroke="#888"/>'
            )
        out.append(f'<text x="{cursor + 16}" y="{top}">{escape(name.replace("_", " "))}</text>')
    return "".join(out)
