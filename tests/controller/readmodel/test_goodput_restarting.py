"""Goodput tells restarting time honestly: the gap between a reclaimed attempt's end and its
replacement, the restarts of one CustomJob in place, the wait for a decision; and an attempt that
trained nothing is not productive. Pure: hand-built job documents, exact numbers."""

from __future__ import annotations

from dataclasses import replace

from controller.core.classify import Ending
from controller.core.model import JobState, Phase
from controller.core.restarts import InPlaceRestart
from controller.readmodel.goodput import compute
from controller.readmodel.jobs import pending_note, status_document, transition_entries
from controller.readmodel.picture import attempts_svg
from tests.controller.readmodel.test_goodput import attempt, stored


def test_goodput_of_a_job_with_one_reclaim_counts_the_gap_between_its_attempts_as_restarting():
    attempts = (
        # Ran 0-100 s, committed 100 steps, reclaimed at 100 s with nothing lost after the save.
        attempt(1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=100),
        # Vertex ended it at 100 s; its replacement was submitted 62 s later and started at once.
        attempt(
            2,
            requested=162,
            submitted=162,
            started=162,
            ended=262,
            ending=Ending.SUCCEEDED,
            resume=100,
            step_at_end=200,
        ),
    )
    result = compute(stored(Phase.SUCCEEDED, *attempts), now=10_000)
    assert result.total == 262
    assert result.restarting == 62  # the dead minute, not productive and not lost running
    assert result.productive == 200
    assert result.lost == 0 and result.waiting_for_capacity == 0


def test_restarts_in_place_are_restarting_time_not_running_time():
    gap_1 = InPlaceRestart(run=2, started_at=131, previous_ended_at=100)  # 31 s restarting
    gap_2 = InPlaceRestart(run=3, started_at=258, previous_ended_at=200)  # 58 s restarting
    one = replace(
        attempt(1, requested=0, submitted=0, started=0, ended=400, ending=Ending.SUCCEEDED, step_at_end=311),
        restarts=(gap_1, gap_2),
    )
    result = compute(stored(Phase.SUCCEEDED, one), now=10_000)
    assert result.total == 400
    assert result.restarting == 89
    assert result.productive == 311
    # While it still runs, too: not 100 % productive.
    live = replace(one, ended_at=None, ending=None)
    running = compute(stored(Phase.RUNNING, live), now=400)
    assert running.restarting == 89 and running.productive == 311


def test_an_attempt_that_trained_nothing_is_unproductive_even_when_it_succeeded():
    attempts = (
        attempt(1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=100),
        # Started from the final step's checkpoint, trained 0 steps for 78 s, and succeeded.
        attempt(
            2,
            requested=110,
            submitted=110,
            started=110,
            ended=188,
            ending=Ending.SUCCEEDED,
            resume=100,
            step_at_end=100,
        ),
    )
    result = compute(stored(Phase.SUCCEEDED, *attempts), now=10_000)
    assert result.productive == 100
    assert result.lost == 78


def test_between_an_end_and_its_decision_the_status_says_so_with_the_time_left():
    held = replace(
        attempt(1, requested=0, submitted=0, started=0),
        vertex_state="FAILED",
        failed_unexplained_at=100,
        vertex_ended_at=100,
        decision_due_at=190,
    )
    document = stored(Phase.RUNNING, held)
    view = status_document(document)
    assert pending_note(view, now=130) == (
        "attempt 1 ended FAILED; deciding how (Vertex's error awaited, at most 60s more)"
    )
    # The wait is restarting time, not running time.
    result = compute(document, now=130)
    assert result.productive == 100 and result.restarting == 30
    assert "ended; deciding how" in attempts_svg(view, [], result, 130)
    # Once decided, nothing is pending.
    decided = replace(held, ending=Ending.PREEMPTED, ended_at=100)
    assert pending_note(status_document(stored(Phase.BACKING_OFF, decided)), now=130) is None


def test_the_timeline_and_the_picture_show_each_restart_in_place():
    base = JobState.from_dict(stored(Phase.RUNNING, attempt(1, requested=0, submitted=0, started=0))["state"])
    restart = InPlaceRestart(run=2, started_at=131, previous_ended_at=100, evidence="workerpool0-0 preempted")
    after = replace(base, preemptions=1, attempts=(replace(base.attempts[0], restarts=(restart,)),))
    (line,) = transition_entries(base, after, None, (), 140)  # type: ignore[arg-type]
    assert line["time"] == 100 and line["countedAs"] == "preempted"
    assert "restarted in place by Vertex (run 2), counted as a preemption, 31.0s restarting" in line["what"]
    document = {
        "request": {"jobId": "gp", "checkpoint": {"uri": "gs://b/gp"}},
        "state": after.to_dict(),
        "timeline": [],
    }
    view = status_document(document)
    svg = attempts_svg(view, [], compute(view, 200), 200)
    assert "restarting in place: 31s (run 2)" in svg
