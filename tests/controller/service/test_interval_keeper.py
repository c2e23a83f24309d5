"""What the interval keeper reads from the trainer, against devstack's GCS with the real clients:
an ending whose exit record was unreadable when a later attempt was counted is still counted,
with its true kind, once the record reads; one that stays unreadable is counted after a bounded
wait; exposure is the training time the trainer's timestamps show; emergency saves are left out
of C. (The keeper is driven directly, on hand-made attempts, to place each read exactly.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from controller.core.checkpoint_interval import CapacityClass
from controller.core.classify import Ending
from controller.core.model import Attempt, JobState, Phase
from controller.request import parse_request
from controller.service.interval import EXIT_RECORD_PATIENCE_SECONDS
from tests.support.engine import REGION, request
from trainer import layout, storage

CAPACITY = CapacityClass(REGION, "n1-standard-4", "", "SPOT")
T0 = 1_800_000_000.0  # Vertex's start of attempt 2 (whole seconds: trainer stamps have no fraction)


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def interval_request(job_id: str, bucket: str):
    body = json.loads(request(job_id, bucket))
    body["checkpoint"]["interval"] = "auto"
    return parse_request(body)


def reclaimed(number: int, started: float, ended: float, resume_step: int | None) -> Attempt:
    return Attempt(
        number=number,
        resume_from_step=resume_step,
        resume_from_uri=None,
        on_demand=False,
        intent_at=started,
        started_at=started,
        ended_at=ended,
        ending=Ending.PREEMPTED,
        rule="spot-reclaim",
    )


def exit_record(job_id: str, attempt: int, step: int, saved: bool, at: float) -> layout.ExitRecord:
    return layout.ExitRecord(
        job_id=job_id,
        attempt=attempt,
        reason="preempted",
        exit_code=layout.EXIT_PREEMPTED_SAVED if saved else layout.EXIT_PREEMPTED_UNSAVED,
        step=step,
        last_committed_step=step if saved else 110,
        checkpoint_saved=saved,
        signal="SIGTERM",
        time=stamp(at),
    )


def commit(root: str, job_id: str, attempt: int, step: int, at: float, *, stall: float, emergency=False):
    """A commit marker as the trainer leaves it; `at` is when the save began (its step)."""
    marker = layout.CommitMarker(
        step=step,
        world_size=1,
        engine="ddp",
        job_id=job_id,
        attempt=attempt,
        wall_time=stamp(at + 4.0),
        blocking_seconds=stall,
        write_seconds=4.0,
        emergency=emergency,
    )
    store = storage.open_storage(root)
    assert store.create_only(layout.commit_marker_path(layout.step_dir_name(step)), marker.to_json().encode())


def test_an_ending_passed_over_while_its_exit_record_was_unreadable_is_counted_later_with_its_kind(
    devstack, bucket, make_engine
):
    job_id = "passed-over-1"
    engine = make_engine()
    keeper, job = engine.intervals, interval_request(job_id, bucket)
    root = job.checkpoint_uri
    first = reclaimed(1, T0 - 1000, T0 - 500, resume_step=None)
    second = reclaimed(2, T0, T0 + 300, resume_step=100)
    # Attempt 1 saved at step 100 on SIGTERM; attempt 2 resumed there, committed steps 110 and
    # 130 at T0+100 and T0+140 (2 s a step: its first step began at T0+80), and was reclaimed at
    # 140 without saving.
    storage.write_exit_record(root, exit_record(job_id, 1, 100, saved=True, at=T0 - 500))
    commit(root, job_id, 1, 100, T0 - 505, stall=0.01, emergency=True)
    commit(root, job_id, 2, 110, T0 + 100, stall=2.0)
    commit(root, job_id, 2, 130, T0 + 140, stall=3.0)
    storage.write_exit_record(root, exit_record(job_id, 2, 140, saved=False, at=T0 + 299))

    devstack.gcs_faults(bucket=bucket, status=403)
    try:
        keeper.on_ending(job_id, job, first, now=T0 - 500)
    finally:
        devstack.gcs_faults(bucket=bucket, status=None)
    assert not keeper.ledger().has_counted(job_id, 1)

    keeper.on_ending(job_id, job, second, now=T0 + 300)
    ledger = keeper.ledger()
    assert ledger.has_counted(job_id, 2) and not ledger.has_counted(job_id, 1)
    estimate = ledger.book.estimate(CAPACITY)
    # Training time: from the first step (T0+80) to the end (T0+300), not Vertex's 300 s.
    assert [(seconds, kind.value) for seconds, kind in estimate.lifetimes] == [(220.0, "reclaim_unsaved")]

    state = JobState(job_id, job.restart_policy, Phase.BACKING_OFF, attempts=(first, second))
    assert keeper.catch_up([state], lambda _: job, now=T0 + 310) == 1
    estimate = keeper.ledger().book.estimate(CAPACITY)
    # Attempt 1 counts as what its exit record says, a saved reclaim; no markers of its own were
    # dated twice (the emergency one only), so its exposure is Vertex's run time.
    assert [(s, k.value) for s, k in estimate.lifetimes] == [
        (220.0, "reclaim_unsaved"),
        (500.0, "reclaim_saved"),
    ]
    assert (estimate.endings, estimate.saved_reclaims) == (1, 1)
    assert keeper.catch_up([state], lambda _: job, now=T0 + 320) == 0

    # C: the median stall of the newest periodic saves; the emergency save's 0.01 s is left out.
    cost = keeper.cost(job)
    assert (cost.stall_seconds, cost.source) == (2.5, "commit markers (2)")


def test_an_exit_record_that_stays_unreadable_is_waited_for_then_counted_as_work_losing(
    devstack, bucket, make_engine
):
    job_id = "never-readable-1"
    keeper, job = make_engine().intervals, interval_request(job_id, bucket)
    storage.write_exit_record(job.checkpoint_uri, exit_record(job_id, 1, 100, saved=True, at=T0 + 300))
    only = reclaimed(1, T0, T0 + 300, resume_step=None)
    state = JobState(job_id, job.restart_policy, Phase.BACKING_OFF, attempts=(only,))

    devstack.gcs_faults(bucket=bucket, status=403)
    try:
        assert keeper.catch_up([state], lambda _: job, now=T0 + 300 + EXIT_RECORD_PATIENCE_SECONDS - 60) == 0
        assert not keeper.ledger().has_counted(job_id, 1)
        assert keeper.catch_up([state], lambda _: job, now=T0 + 300 + EXIT_RECORD_PATIENCE_SECONDS + 60) == 1
    finally:
        devstack.gcs_faults(bucket=bucket, status=None)
    estimate = keeper.ledger().book.estimate(CAPACITY)
    # Its record would have said "saved"; unread, the reclaim counts as one that lost work.
    assert [(s, k.value) for s, k in estimate.lifetimes] == [(300.0, "killed")]
    # Read later (by a controller that remembers nothing), the record changes nothing: the
    # ending was counted once.
    restarted = make_engine().intervals
    assert restarted.catch_up([state], lambda _: job, now=T0 + 2 * EXIT_RECORD_PATIENCE_SECONDS) == 0
    assert restarted.ledger().book.estimate(CAPACITY) == estimate


def test_when_keep_last_left_only_an_emergency_saves_marker_c_is_the_last_one_measured(
    devstack, bucket, make_engine
):
    job_id = "pruned-1"
    keeper, job = make_engine().intervals, interval_request(job_id, bucket)
    commit(job.checkpoint_uri, job_id, 3, 700, T0, stall=0.01, emergency=True)
    assert keeper.cost(job).source.startswith("default")
    # The decisions recorded on the job for its earlier attempts (`checkpointIntervals`).
    earlier = {
        "1": {"stallSeconds": 30.0, "writeSeconds": 120.0, "costSource": "default (no marker yet)"},
        "2": {"stallSeconds": 2.5, "writeSeconds": 4.0, "costSource": "commit markers (2)"},
        "3": {"stallSeconds": 2.5, "writeSeconds": 4.0, "costSource": "commit markers of attempt 2"},
    }
    cost = keeper.cost(job, earlier)
    assert (cost.stall_seconds, cost.write_seconds, cost.source) == (2.5, 4.0, "commit markers of attempt 2")
