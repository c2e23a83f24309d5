"""Draw one job's life as a PNG: one horizontal bar per attempt on a shared time axis.

Each bar is the attempt's wait for capacity (submitted -> started, grey), then its running time
coloured by how it ended, with the part the goodput estimate counts as lost (recomputed by the
next attempt) hatched at its end, and the restart gap (backoff) before the next attempt a pale
bar on that attempt's row. Checkpoint commits from the timeline are diamonds above the bar of
the attempt that was current when they were seen; their step labels are thinned so that no two
overlap, however long the run.
"""

from __future__ import annotations

from controller.readmodel.goodput import Goodput, job_end
from controller.readmodel.printable import counted

ENDING_COLOURS = {
    "preempted": "tab:orange",
    "user_error": "tab:red",
    "infrastructure": "tab:purple",
    "timeout": "tab:brown",
    "succeeded": "tab:green",
    "cancelled": "black",
}
RUNNING_COLOUR = "tab:blue"  # still running, or ended in a way not listed above
WAITING_COLOUR = "lightgrey"
RESTARTING_COLOUR = "#fde0b6"
# Two checkpoint labels on one row are at least this fraction of the axis apart (a label of
# six digits at fontsize 7 is about 3% of the figure's width).
LABEL_GAP = 0.045


def labelled(positions: list[tuple[float, float]], span: float, gap: float = LABEL_GAP) -> list[int]:
    """Which of the (x, row) marks get a label: on each row, the latest, then every earlier one
    at least `gap` of `span` left of the last labelled one, so that labels never overlap."""
    chosen: list[int] = []
    last_x: dict[float, float] = {}
    for index in sorted(range(len(positions)), key=lambda i: positions[i][0], reverse=True):
        x, row = positions[index]
        if row not in last_x or last_x[row] - x >= gap * span:
            chosen.append(index)
            last_x[row] = x
    return sorted(chosen)


def title(view: dict, ratio: float | None) -> str:
    shown = "n/a" if ratio is None else f"{ratio:.0%}"
    return (
        f"{view['jobId']} ({view['phase']}): goodput {shown}; {counted(len(view['attempts']), 'attempt')}, "
        f"{counted(view['preemptions'], 'preemption')}, {counted(view['failures'], 'failure')}"
    )


def _unit(total: float) -> tuple[float, str]:
    if total >= 3 * 3600:
        return 3600.0, "hours"
    if total >= 3 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def draw(view: dict, timeline: list[dict], result: Goodput, path: str, now: float) -> None:
    """Write the picture of `view` (a status document) to `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    from matplotlib import pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    origin = view["createdAt"]
    end = job_end(view, now)
    scale, unit = _unit(end - origin)
    x = lambda t: (t - origin) / scale  # noqa: E731 - a one-line unit conversion

    attempts = view["attempts"]
    lost_by_number = {row.number: row.lost for row in result.attempts}
    fig, ax = plt.subplots(figsize=(11, 2.2 + 0.55 * max(1, len(attempts))), dpi=110)
    used_endings: list[str] = []
    restarted = False
    previous_end = None
    for attempt in attempts:
        y = attempt["number"]
        queued_from = attempt["submittedAt"] or attempt["requestedAt"]
        started, ended = attempt["startedAt"], attempt["endedAt"]
        wait_until = started or ended or now
        if previous_end and queued_from and queued_from > previous_end:
            restarted = True
            ax.barh(
                y,
                x(queued_from) - x(previous_end),
                left=x(previous_end),
                height=0.5,
                color=RESTARTING_COLOUR,
                edgecolor="tan",
                linewidth=0.5,
            )
        previous_end = ended
        if queued_from and wait_until > queued_from:
            ax.barh(
                y,
                x(wait_until) - x(queued_from),
                left=x(queued_from),
                height=0.5,
                color=WAITING_COLOUR,
                edgecolor="grey",
            )
        if started:
            ending = attempt["ending"]
            colour = ENDING_COLOURS.get(ending, RUNNING_COLOUR)
            if ending in ENDING_COLOURS and ending not in used_endings:
                used_endings.append(ending)
            stop = ended or now
            ax.barh(
                y,
                x(stop) - x(started),
                left=x(started),
                height=0.5,
                color=colour,
                edgecolor="black",
                linewidth=0.5,
            )
            lost = lost_by_number.get(y, 0.0)
            if lost > 0:
                ax.barh(
                    y,
                    lost / scale,
                    left=x(stop - lost),
                    height=0.5,
                    fill=False,
                    hatch="///",
                    edgecolor="white",
                    linewidth=0,
                )

    marks = [e for e in timeline if e.get("step") is not None and e.get("time")]
    if marks:
        # Just above the bar (attempt 1 is on top, so "above" is a smaller y), labelled above that.
        rows = [max(1, e.get("attempt", 1)) - 0.33 for e in marks]
        xs = [x(e["time"]) for e in marks]
        ax.scatter(xs, rows, marker="D", facecolor="white", edgecolor="black", s=22, zorder=3)
        for index in labelled(list(zip(xs, rows)), max(x(end), 1e-9)):
            ax.annotate(
                str(marks[index]["step"]),
                (xs[index], rows[index] - 0.1),
                fontsize=7,
                ha="center",
                va="bottom",
            )

    ax.set_yticks([a["number"] for a in attempts] or [1])
    ax.set_yticklabels([f"attempt {a['number']}" for a in attempts] or ["no attempts"])
    ax.set_ylim(max(1, len(attempts)) + 0.5, 0.2)  # attempt 1 on top, room for checkpoint labels
    ax.set_xlim(0, max(x(end), 1e-9) * 1.02)
    ax.set_xlabel(f"{unit} since the job was accepted")
    ax.grid(axis="x", alpha=0.3)

    ax.set_title(title(view, result.ratio))

    handles = [Patch(facecolor=WAITING_COLOUR, edgecolor="grey", label="waiting for capacity")]
    if restarted:
        handles.append(Patch(facecolor=RESTARTING_COLOUR, edgecolor="tan", label="restarting (backoff)"))
    handles += [Patch(facecolor=ENDING_COLOURS[e], label=e.replace("_", " ")) for e in used_endings]
    if any(a["startedAt"] and not a["ending"] for a in attempts):
        handles.append(Patch(facecolor=RUNNING_COLOUR, label="running"))
    if result.lost > 0:
        handles.append(
            Patch(
                facecolor="tab:grey",
                hatch="///",
                edgecolor="white",
                label="unproductive (start-up, recomputed steps)",
            )
        )
    if marks:
        handles.append(
            Line2D(
                [],
                [],
                marker="D",
                markerfacecolor="white",
                markeredgecolor="black",
                linestyle="none",
                label="checkpoint committed",
            )
        )
    # Beside the bars, so it never covers one whatever the number of attempts.
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
