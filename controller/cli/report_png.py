"""Draw one job's life as a PNG: one horizontal bar per attempt on a shared time axis.

Each bar is the attempt's wait for capacity (submitted -> started, grey), then its running time
coloured by how it ended, with the part the goodput estimate counts as lost (recomputed by the
next attempt) hatched at its end. Checkpoint commits from the timeline are markers on the bar
of the attempt that was current when they were seen.
"""

from __future__ import annotations

from controller.readmodel.goodput import Goodput, job_end

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
    for attempt in attempts:
        y = attempt["number"]
        queued_from = attempt["submittedAt"] or attempt["requestedAt"]
        started, ended = attempt["startedAt"], attempt["endedAt"]
        wait_until = started or ended or now
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
        ax.scatter([x(e["time"]) for e in marks], rows, marker="v", color="black", s=28, zorder=3)
        for entry, row in list(zip(marks, rows))[-12:]:  # label the latest few; more would pile up
            ax.annotate(
                str(entry["step"]), (x(entry["time"]), row - 0.08), fontsize=7, ha="center", va="bottom"
            )

    ax.set_yticks([a["number"] for a in attempts] or [1])
    ax.set_yticklabels([f"attempt {a['number']}" for a in attempts] or ["no attempts"])
    ax.set_ylim(max(1, len(attempts)) + 0.5, 0.2)  # attempt 1 on top, room for checkpoint labels
    ax.set_xlim(0, max(x(end), 1e-9) * 1.02)
    ax.set_xlabel(f"{unit} since the job was accepted")
    ax.grid(axis="x", alpha=0.3)

    ratio = "n/a" if result.ratio is None else f"{result.ratio:.0%}"
    ax.set_title(
        f"{view['jobId']} ({view['phase']}): goodput {ratio}; {len(attempts)} attempts, "
        f"{view['preemptions']} preemptions, {view['failures']} failures"
    )

    handles = [Patch(facecolor=WAITING_COLOUR, edgecolor="grey", label="waiting for capacity")]
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
            Line2D([], [], marker="v", color="black", linestyle="none", label="checkpoint committed")
        )
    # Beside the bars, so it never covers one whatever the number of attempts.
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
