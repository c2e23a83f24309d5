"""Goodput estimates on hand-built job documents, with exact numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.core.classify import Ending
from controller.core.model import Attempt, JobState, Phase
from controller.core.policy import RestartPolicy
from controller.readmodel.goodput import compute, duration


def attempt(
    number, *, requested, submitted=None, started=None, ended=None, ending=None, resume=None, step_at_end=None
):
    return Attempt(
        number=number,
        resume_from_step=resume,
        resume_from_uri=None,
        on_demand=False,
        intent_at=requested,
        submitted_at=submitted,
        started_at=started,
        ended_at=ended,
        ending=ending,
        checkpoint_step_at_end=step_at_end,
    )


def stored(phase, *attempts, created=0.0, updated=None):
    """A document in the form the engine stores it (request, state, timeline)."""
    state = JobState(
        job_id="gp",
        policy=RestartPolicy(),
        phase=phase,
        created_at=created,
        updated_at=updated if updated is not None else created,
        attempts=attempts,
    )
    return {
        "request": {"jobId": "gp", "checkpoint": {"uri": "gs://b/gp"}},
        "state": state.to_dict(),
        "timeline": [],
    }


PREEMPTED_THEN_SUCCEEDED = (
    # Queued 10 s, waited 20 s for capacity, ran 100 s but committed only 50 steps.
    attempt(1, requested=0, submitted=10, started=30, ended=130, ending=Ending.PREEMPTED, step_at_end=50),
    # Restarted 20 s later, waited 10 s, then 100 steps in 100 s: the job runs 1 step/s.
    attempt(
        2,
        requested=140,
        submitted=150,
        started=160,
        ended=260,
        ending=Ending.SUCCEEDED,
        resume=50,
        step_at_end=150,
    ),
)


def test_preempted_attempt_loses_the_work_after_its_last_checkpoint():
    result = compute(stored(Phase.SUCCEEDED, *PREEMPTED_THEN_SUCCEEDED), now=10_000)
    assert result.step_rate == 1.0
    assert result.total == 260  # first submission to the last attempt's end, not now
    assert result.productive == 150  # 50 committed steps at 1 step/s + 100 s that succeeded
    assert result.lost == 50  # attempt 1 ran 100 s for 50 kept steps
    assert result.waiting_for_capacity == 30  # 20 s + 10 s between submission and start
    assert result.restarting == 30  # 10 s before the first submission + 20 s between attempts
    assert result.ratio == pytest.approx(150 / 260)
    assert [(a.number, a.productive, a.lost) for a in result.attempts] == [(1, 50, 50), (2, 100, 0)]


def test_the_user_view_gives_the_same_numbers_as_the_stored_document():
    from controller.readmodel.jobs import status_document

    document = stored(Phase.SUCCEEDED, *PREEMPTED_THEN_SUCCEEDED)
    assert compute(status_document(document), now=0) == compute(document, now=0)


def test_stockout_counts_as_waiting_and_a_live_attempt_is_productive_up_to_now():
    document = stored(
        Phase.RUNNING,
        # Never started: 10 s waiting for capacity, no running time.
        attempt(1, requested=0, submitted=5, ended=15, ending=Ending.INFRASTRUCTURE),
        attempt(2, requested=20, submitted=25, started=40),
    )
    result = compute(document, now=100)
    assert result.total == 100
    assert result.productive == 60  # attempt 2 from 40 s to now; nothing lost yet
    assert result.lost == 0
    assert result.waiting_for_capacity == 25  # 10 s + 15 s
    assert result.restarting == 15
    assert result.step_rate is None  # no attempt committed a step
    assert result.ratio == pytest.approx(0.6)


def test_an_attempt_that_committed_nothing_lost_all_its_running_time():
    document = stored(
        Phase.FAILED,
        attempt(1, requested=0, submitted=0, started=0, ended=40, ending=Ending.USER_ERROR),
        attempt(
            2, requested=40, submitted=40, started=40, ended=100, ending=Ending.USER_ERROR, step_at_end=0
        ),
        updated=100,
    )
    result = compute(document, now=500)
    assert (result.total, result.productive, result.lost) == (100, 0, 100)
    assert result.ratio == 0


def test_the_fastest_attempt_sets_the_rate_for_the_others():
    document = stored(
        Phase.CANCELLED,
        attempt(
            1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=200
        ),  # 2 steps/s: nothing lost
        attempt(
            2,
            requested=100,
            submitted=100,
            started=100,
            ended=200,
            ending=Ending.CANCELLED,
            resume=200,
            step_at_end=300,
        ),  # 1 step/s apparent: 50 s lost
    )
    result = compute(document, now=1_000)
    assert result.step_rate == 2.0
    assert [(a.productive, a.lost) for a in result.attempts] == [(100, 0), (50, 50)]
    assert result.ratio == 0.75


def test_a_job_with_no_attempts_yet_is_all_waiting():
    result = compute(stored(Phase.ACCEPTED, created=1_000), now=1_030)
    assert (result.total, result.productive, result.restarting) == (30, 0, 30)
    assert result.ratio == 0
    assert compute(stored(Phase.ACCEPTED, created=5), now=5).ratio is None


def test_steps_committed_again_after_a_restart_from_scratch_are_not_progress():
    document = stored(
        Phase.SUCCEEDED,
        attempt(1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=100),
        # Started from scratch (its resume location was unusable): steps 0-100 were redone.
        attempt(
            2, requested=100, submitted=100, started=100, ended=150, ending=Ending.PREEMPTED, step_at_end=100
        ),
        attempt(
            3,
            requested=150,
            submitted=150,
            started=150,
            ended=250,
            ending=Ending.SUCCEEDED,
            resume=100,
            step_at_end=200,
        ),
    )
    result = compute(document, now=0)
    assert result.step_rate == 1.0
    assert [(a.productive, a.lost) for a in result.attempts] == [(100, 0), (0, 50), (100, 0)]


@pytest.mark.parametrize(
    "seconds, text", [(0, "0s"), (59.4, "59s"), (185, "3m05s"), (7620, "2h07m"), (273_600, "3d04h")]
)
def test_durations_read_like_a_person_would_write_them(seconds, text):
    assert duration(seconds) == text


def test_summary_names_every_part():
    text = compute(stored(Phase.SUCCEEDED, *PREEMPTED_THEN_SUCCEEDED), now=0).summary()
    assert text.startswith("goodput 57.7% of 4m20s: productive 2m30s, unproductive running 50s")
    assert (
        "waiting for capacity 30s, restarting 30s (step rate 1 steps/s; estimated from checkpoint steps)"
        in text
    )


def test_the_trainers_exit_record_figures_replace_the_estimate_where_present():
    """Attempt 1 trained 100 steps in 100 s but committed only 50: the estimate, which sees only
    committed steps, takes 0.5 steps/s for the rate and calls all of it productive; the trainer's
    figures show 1 step/s and 50 recomputed steps."""
    document = stored(
        Phase.CANCELLED,
        attempt(1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=50),
        attempt(
            2,
            requested=100,
            submitted=100,
            started=100,
            ended=200,
            ending=Ending.CANCELLED,
            resume=50,
            step_at_end=100,
        ),
    )
    estimated = compute(document, now=0)
    assert estimated.step_rate == 0.5
    assert [(a.productive, a.lost, a.source) for a in estimated.attempts] == [
        (100, 0, "estimate"),
        (100, 0, "estimate"),
    ]
    document["trainerFigures"] = {
        "1": {"stepAtEnd": 100, "lastCommittedStep": 50, "checkpointSaved": False, "stallSeconds": 4.0}
    }
    measured = compute(document, now=0)
    assert measured.step_rate == 1.0
    first, second = measured.attempts
    assert (first.productive, first.lost, first.source) == (50, 50, "trainer")
    assert (first.recomputed_steps, first.stall_seconds) == (50, 4.0)
    assert (second.productive, second.source, second.recomputed_steps) == (50, "estimate", None)
    assert "trainer's figures for 1 of 2 attempts, the rest estimated" in measured.summary()


def test_work_is_counted_at_the_size_actually_run():
    """A shrunk attempt on 2 of 4 replicas advancing at half the full gang's rate lost nothing:
    per node it worked as fast. Without the sizes it would be charged half its time as lost."""
    full = (1, 3)
    shrunk = (1, 1)
    attempts = (
        # Full size, 4 replicas: 100 steps in 100 s, then reclaimed right after a commit.
        replace(
            attempt(
                1, requested=0, submitted=0, started=0, ended=100, ending=Ending.PREEMPTED, step_at_end=100
            ),
            replicas=full,
        ),
        # Shrunk, 2 replicas: 50 steps in 100 s, reclaimed right after a commit.
        replace(
            attempt(
                2,
                requested=100,
                submitted=100,
                started=100,
                ended=200,
                ending=Ending.PREEMPTED,
                resume=100,
                step_at_end=150,
            ),
            replicas=shrunk,
        ),
    )
    document = stored(Phase.RUNNING, *attempts)
    document["request"]["jobSpec"] = {"workerPoolSpecs": [{"replicaCount": 1}, {"replicaCount": 3}]}
    result = compute(document, now=200.0)
    assert [row.nodes for row in result.attempts] == [4, 2]
    assert [row.productive for row in result.attempts] == pytest.approx([100.0, 100.0])
    assert result.node_seconds == pytest.approx(4 * 100 + 2 * 100)
    assert result.productive_node_seconds == pytest.approx(600.0)
    assert "ran on 2/4 replicas" in result.summary()
