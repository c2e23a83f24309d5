"""One job's life as an SVG picture: one horizontal bar per attempt on a shared time axis.

The same picture as `relaunch report --png`, without matplotlib: the controller's status page
inlines it and `relaunch report --svg` writes it. Each bar is the attempt's wait for capacity
(submitted -> started, grey), then its running time coloured by how it ended, with the part the
goodput estimate counts as lost hatched at its end. Committed checkpoints are diamonds.
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

_LEFT, _RIGHT, _TOP, _ROW, _BOTTOM = 90, 100, 30, 34, 60
_WIDTH = 900


def attempts_svg(view: Json, timeline: list[Json], result: Goodput, now: float) -> str:
    """The picture of `view` (a status document) as a standalone <svg> element."""
    attempts = view["attempts"]
    origin = float(view["createdAt"])
    end = max(job_end(view, now), origin + 1.0)
    plot = _WIDTH - _LEFT - _RIGHT
    height = _TOP + _ROW * max(1, len(attempts)) + _BOTTOM

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
        if queued_from and wait_until > queued_from:
            parts.append(_bar(x(queued_from), x(wait_until), y, WAITING_COLOUR, "waiting for capacity"))
        if started:
            stop = ended or now
            ending = attempt.get("ending")
            colour = ENDING_COLOURS.get(ending or "", RUNNING_COLOUR)
            label = f"attempt {number}: {ending or 'running'}, ran {duration(stop - started)}"
            parts.append(_bar(x(started), x(stop), y, colour, label))
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
        parts.append(
            f'<path d="M{cx:.1f},{cy - 6} l5,6 l-5,6 l-5,-6 z" fill="#fff" stroke="#000">'
            f"<title>checkpoint step {escape(str(step))}</title></path>"
        )
    axis_y = _TOP + _ROW * max(1, len(attempts)) + 6
    parts.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_LEFT + plot}" y2="{axis_y}" stroke="#444"/>')
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        tx = _LEFT + plot * fraction
        label = duration((end - origin) * fraction)
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" y2="{axis_y + 4}" stroke="#444"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">{label}</text>')
    ratio = "n/a" if result.ratio is None else f"{result.ratio:.0%}"
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP - 10}" font-weight="bold">time since the request '
        f"(goodput {ratio})</text>"
    )
    parts.append(_legend(axis_y + 36, attempts))
    parts.append("</svg>")
    return "\n".join(parts)


def _bar(x0: float, x1: float, y: float, fill: str, title: str, opacity: float = 1.0) -> str:
    width = max(1.0, x1 - x0)
    return (
        f'<rect x="{x0:.1f}" y="{y + 6}" width="{width:.1f}" height="20" fill="{fill}" '
        f'fill-opacity="{opacity}"><title>{escape(title)}</title></rect>'
    )


def _legend(y: float, attempts: list[Json]) -> str:
    seen = []
    for attempt in attempts:
        ending = attempt.get("ending") or ("running" if attempt.get("startedAt") else None)
        if ending and ending not in seen:
            seen.append(ending)
    items = [("waiting", WAITING_COLOUR)] + [(e, ENDING_COLOURS.get(e, RUNNING_COLOUR)) for e in seen]
    items.append(("lost work", "url(#lost)"))
    out, cursor = [], _LEFT
    for name, fill in items:
        out.append(f'<rect x="{cursor}" y="{y - 10}" width="12" height="12" fill="{fill}" stroke="#888"/>')
        out.append(f'<text x="{cursor + 16}" y="{y}">{escape(name)}</text>')
        cursor += 24 + 8 * len(name)
    return "".join(out)
