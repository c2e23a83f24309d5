"""The job picture (SVG on the status page and `report --svg`; PNG from `report --png`): the
restart gap is drawn, every mark is in the legend, axis ticks fall at round intervals, the
title counts in the right number, and checkpoint labels never overlap in a long run."""

from __future__ import annotations

import re

from controller.readmodel.goodput import compute
from controller.readmodel.picture import attempts_svg


def _attempt(number: int, requested: float, ended: float, ending: str) -> dict:
    return {
        "number": number,
        "vertexJob": f"projects/p/locations/r/customJobs/{number}",
        "vertexState": "JOB_STATE_FAILED",
        "onDemand": False,
        "resumeFromStep": None,
        "requestedAt": requested,
        "submittedAt": requested,
        "startedAt": requested + 1,
        "endedAt": ended,
        "ending": ending,
        "rule": "r",
        "errorCode": None,
        "errorMessage": None,
        "checkpointStepAtEnd": 10,
        "replicas": [1],
        "shrunk": False,
    }


def _job(attempts: list[dict], end: float) -> dict:
    return {
        "jobId": "pic",
        "displayName": None,
        "phase": "succeeded",
        "attempt": len(attempts),
        "preemptions": len(attempts) - 1,
        "failures": 0,
        "latestCheckpointStep": 10,
        "latestCheckpointUri": "gs://b/pic/step-10",
        "nextAttemptAt": None,
        "createdAt": 0.0,
        "updatedAt": end,
        "terminalReason": "completed",
        "checkpointUri": "gs://b/pic",
        "requestedReplicas": [1],
        "elastic": None,
        "attempts": attempts,
    }


def _svg(job: dict, timeline: list[dict], now: float) -> str:
    return attempts_svg(job, timeline, compute(job, now), now)


def test_ticks_fall_at_round_intervals():
    from controller.readmodel.picture import ticks

    assert ticks(31) == [0, 5, 10, 15, 20, 25, 30]
    assert ticks(3600) == [i * 600.0 for i in range(7)]
    assert len(ticks(9 * 86400)) <= 9


def test_the_svg_draws_the_restart_gap_ticks_and_a_legend_with_the_diamond():
    job = _job([_attempt(1, 0, 12, "preempted"), _attempt(2, 16, 31, "succeeded")], 31)
    timeline = [{"time": 8.0, "attempt": 1, "what": "checkpoint at step 10 committed", "step": 10}]
    svg = _svg(job, timeline, 31)
    assert "<title>restarting: 4s between attempts 1 and 2</title>" in svg
    labels = re.findall(r'text-anchor="middle">([^<]+)</text>', svg)
    assert labels == ["0s", "5s", "10s", "15s", "20s", "25s", "30s"]
    legend = svg[svg.index(">waiting</text>") :]
    assert ">restarting</text>" in legend and ">checkpoint committed</text>" in legend
    assert 'fill="#fff" stroke="#000"></path>' in legend  # the diamond itself, beside its name


def test_a_long_runs_legend_stays_inside_the_picture():
    endings = ["preempted", "infrastructure", "user_error", "timeout"]
    attempts = [_attempt(i, 20.0 * (i - 1), 20.0 * (i - 1) + 15, endings[i % 4]) for i in range(1, 30)]
    attempts.append(_attempt(30, 600, 615, "succeeded"))
    timeline = [{"time": 20.0 * i + 5, "attempt": i + 1, "what": "c", "step": i} for i in range(30)]
    svg = _svg(_job(attempts, 615), timeline, 615)
    width = float(re.search(r'width="(\d+)"', svg).group(1))
    height = float(re.search(r'height="(\d+)"', svg).group(1))
    for x_text, y_text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)"', svg):
        assert float(x_text) < width and float(y_text) < height


def test_the_png_title_counts_in_the_right_number():
    from controller.cli.report_png import title

    job = _job([_attempt(1, 0, 12, "preempted"), _attempt(2, 16, 31, "succeeded")], 31)
    assert title(job, 0.5) == "pic (succeeded): goodput 50%; 2 attempts, 1 preemption, 0 failures"


def test_png_checkpoint_labels_never_overlap_however_many_checkpoints():
    from controller.cli.report_png import LABEL_GAP, labelled

    span = 1000.0
    marks = [(float(i), 1.0) for i in range(0, 1000, 3)] + [(float(i), 2.0) for i in range(500, 520)]
    chosen = labelled(marks, span)
    for row in (1.0, 2.0):
        xs = sorted(marks[i][0] for i in chosen if marks[i][1] == row)
        assert xs and all(b - a >= LABEL_GAP * span for a, b in zip(xs, xs[1:]))
    assert len(marks) - 1 in chosen  # the latest checkpoint always has its label
