"""Run records: every run of one attempt's CustomJob is recorded as it begins, so a restart in
place (Vertex running the same CustomJob again) is visible; a restarted run keeps what the
previous run's exit records said, and only that run's. The controller turns them into counted
restarts (controller/adapters/runs.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from controller.adapters.runs import restarts_of
from trainer import layout, storage

JOB, ATTEMPT, VERTEX = "job-1", 2, "4455"


def _previous_run(store, when: str) -> None:
    record = layout.RunRecord(JOB, ATTEMPT, VERTEX, 1, resume_step=None, time=when)
    assert store.create_only(layout.run_record_key(ATTEMPT, VERTEX, 1), record.to_json().encode())


def test_the_first_run_is_run_1_and_a_run_again_of_the_same_customjob_is_a_restart(tmp_path):
    store = storage.open_storage(str(tmp_path))
    first = storage.record_run_start(store, JOB, ATTEMPT, VERTEX, None)
    assert first.run == 1 and first.previous_chief is None
    again = storage.record_run_start(store, JOB, ATTEMPT, VERTEX, 40)
    assert again.run == 2 and again.resume_step == 40
    # Another CustomJob of the same attempt (a duplicate) has runs of its own.
    assert storage.record_run_start(store, JOB, ATTEMPT, "9999", None).run == 1
    assert [r.run for r in storage.read_run_records(store, ATTEMPT, VERTEX)] == [1, 2]
    # The replica exit records' listing is not confused by the runs folder.
    assert storage.read_replica_exits(store, ATTEMPT, VERTEX) == []


def test_a_restarted_run_keeps_the_previous_runs_exit_records_and_only_those(tmp_path):
    store = storage.open_storage(str(tmp_path))
    _previous_run(store, "2020-01-01T00:00:00.000Z")
    storage.write_exit_record(
        store,
        layout.ExitRecord(
            JOB,
            ATTEMPT,
            "preempted",
            75,
            step=45,
            last_committed_step=44,
            checkpoint_saved=True,
            signal="SIGTERM",
            time="2020-01-01T00:05:00Z",
            vertex_job_id=VERTEX,
        ),
    )
    for replica, reason in (("workerpool0-0", "preempted"), ("workerpool1-0", "stopped_by_peer")):
        storage.write_replica_exit(
            store,
            layout.ReplicaExit(
                JOB,
                ATTEMPT,
                replica,
                0,
                reason,
                75,
                vertex_job_id=VERTEX,
                step=45,
                time="2020-01-01T00:05:00.250Z",
            ),
        )
    second = storage.record_run_start(store, JOB, ATTEMPT, VERTEX, 45)
    assert second.previous_chief is not None and second.previous_chief.reason == "preempted"
    assert {r.replica for r in second.previous_replicas} == {"workerpool0-0", "workerpool1-0"}
    # Run 2 is killed without warning: it leaves nothing, and run 3 must not blame run 1's records.
    third = storage.record_run_start(store, JOB, ATTEMPT, VERTEX, 45)
    assert third.run == 3 and third.previous_chief is None and third.previous_replicas == ()

    records = storage.read_run_records(store, ATTEMPT, VERTEX)
    assert layout.RunRecord.from_json(records[1].to_json()) == records[1]
    warned, killed = restarts_of(records)
    assert (warned.run, killed.run) == (2, 3)
    assert not warned.previous_failed and warned.previous_reason == "preempted"
    assert warned.previous_step == 45 and warned.lost_no_work  # resumed at the step it stopped at
    assert warned.previous_ended_at is not None and warned.restarting_seconds > 0
    assert killed.previous_ended_at is None and not killed.previous_failed


def test_a_restart_after_the_program_failed_reads_as_a_failure(tmp_path):
    store = storage.open_storage(str(tmp_path))
    _previous_run(store, "2020-01-01T00:00:00.000Z")
    storage.write_replica_exit(
        store,
        layout.ReplicaExit(
            JOB,
            ATTEMPT,
            "workerpool1-0",
            1,
            "runtime_error",
            70,
            vertex_job_id=VERTEX,
            step=25,
            detail="RuntimeError: boom\x1b[2J",
            time="2020-01-01T00:01:00.000Z",
        ),
    )
    storage.record_run_start(store, JOB, ATTEMPT, VERTEX, 20)
    (restart,) = restarts_of(storage.read_run_records(store, ATTEMPT, VERTEX))
    assert restart.previous_failed and restart.counted_as == "failure"
    assert "workerpool1-0 runtime_error exit 70 at step 25: RuntimeError: boom" in restart.evidence
    assert "\x1b" not in restart.evidence  # control characters escaped


def _run_record(store, run: int, when: str) -> None:
    record = layout.RunRecord(JOB, ATTEMPT, VERTEX, run, resume_step=None, time=when)
    assert store.create_only(layout.run_record_key(ATTEMPT, VERTEX, run), record.to_json().encode())


def test_a_run_begun_within_the_second_the_previous_chief_wrote_in_is_not_given_its_record(tmp_path):
    """Vertex (and devstack) can restart a run within the second in which the run before it
    wrote its exit record; if the next run then dies without a word, its restart must say so."""
    store = storage.open_storage(str(tmp_path))
    _run_record(store, 1, "2020-01-01T00:00:00.000Z")
    chief = layout.ExitRecord(JOB, ATTEMPT, "preempted", 75, signal="SIGTERM", vertex_job_id=VERTEX)
    storage.write_exit_record(store, chief)  # stamped now, as the trainer stamps it
    written = datetime.fromisoformat(chief.time)
    run_2_began = (written + timedelta(milliseconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert run_2_began[:19] == chief.time[:19] or written.microsecond >= 999_000  # the same second
    _run_record(store, 2, run_2_began)
    third = storage.record_run_start(store, JOB, ATTEMPT, VERTEX, None)
    assert third.run == 3 and third.previous_chief is None
    (_, killed) = restarts_of(storage.read_run_records(store, ATTEMPT, VERTEX))
    assert killed.previous_ended_at is None and "no exit record" in killed.evidence


def test_a_chief_record_that_names_its_run_speaks_for_that_run_only():
    run_2 = layout.RunRecord(JOB, ATTEMPT, VERTEX, 2, time="2020-01-01T00:05:00.000Z")
    late_clock = "2020-01-01T00:06:00.000Z"  # written after run 2 began, by run 1's own account
    of_run_1 = layout.ExitRecord(JOB, ATTEMPT, "preempted", 75, time=late_clock, vertex_job_id=VERTEX, run=1)
    of_run_2 = layout.ExitRecord(
        JOB, ATTEMPT, "runtime_error", 70, time=late_clock, vertex_job_id=VERTEX, run=2
    )
    assert layout.records_of_run(run_2, of_run_1, ())[0] is None
    assert layout.records_of_run(run_2, of_run_2, ())[0] == of_run_2
    assert layout.ExitRecord.from_json(of_run_2.to_json()).run == 2


def test_records_without_a_run_are_judged_by_when_they_were_written():
    run_2 = layout.RunRecord(JOB, ATTEMPT, VERTEX, 2, time="2020-01-01T00:05:00.500Z")

    def chief(when: str) -> layout.ExitRecord:
        return layout.ExitRecord(JOB, ATTEMPT, "preempted", 75, time=when, vertex_job_id=VERTEX)

    def replica(name: str, when: str) -> layout.ReplicaExit:
        return layout.ReplicaExit(JOB, ATTEMPT, name, 0, "preempted", 75, vertex_job_id=VERTEX, time=when)

    assert layout.records_of_run(run_2, chief("2020-01-01T00:05:00.499Z"), ())[0] is None
    assert layout.records_of_run(run_2, chief("2020-01-01T00:05:00.501Z"), ())[0] is not None
    # An older trainer stamped whole seconds: a record of run 2's own second is kept.
    assert layout.records_of_run(run_2, chief("2020-01-01T00:05:00Z"), ())[0] is not None
    assert layout.records_of_run(run_2, chief("2020-01-01T00:04:59Z"), ())[0] is None
    _, kept = layout.records_of_run(
        run_2,
        None,
        [
            replica("workerpool0-0", "2020-01-01T00:05:00.400Z"),
            replica("workerpool1-0", "2020-01-01T00:07:00.000Z"),
        ],
    )
    assert [r.replica for r in kept] == ["workerpool1-0"]
