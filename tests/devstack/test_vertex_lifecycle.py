"""Job lifecycle of the Vertex stand-in: real replica processes, gang endings, fault injection,
and Vertex's documented behaviour (devstack.vertex.behaviour) with shorter durations."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from datetime import datetime
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.api_core.gapic_v1.method import DEFAULT as gapic_default
from google.cloud.aiplatform_v1 import JobState

from devstack.vertex import start_vertex
from devstack.vertex.behaviour import VertexBehaviour
from devstack.vertex.testing import command_job, job_service_client, process_alive, wait_until

PROJECT = "relaunch-dev"
REGION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
RUNNING = {JobState.JOB_STATE_RUNNING}


class EventLog:
    """Collects the emulator's LogEntry dicts; tests wait on it with a deadline."""

    def __init__(self) -> None:
        self._entries: list[dict] = []
        self._changed = threading.Condition()

    def __call__(self, entry: dict) -> None:
        with self._changed:
            self._entries.append(entry)
            self._changed.notify_all()

    def for_job(self, job_id: str) -> list[dict]:
        with self._changed:
            return [e for e in self._entries if e["resource"]["labels"]["job_id"] == job_id]

    def wait_for(self, job_id: str, text: str, timeout: float) -> list[dict]:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(e["textPayload"] == text for e in self.for_job(job_id)), timeout
            )
        assert found, f"no {text!r} event for job {job_id}: {self.for_job(job_id)}"
        return self.for_job(job_id)


@pytest.fixture(scope="module")
def events():
    return EventLog()


@pytest.fixture(scope="module")
def vertex(tmp_path_factory, events):
    emulator = start_vertex(
        project=PROJECT,
        region=REGION,
        workdir=str(tmp_path_factory.mktemp("vertex-lifecycle")),
        event_sink=events,
        provisioning_seconds=0.05,
        kill_grace_seconds=1.0,
        behaviour=VertexBehaviour(reclaim_grace_seconds=5.0, failed_error_delay_seconds=0.3),
    )
    yield emulator
    pids = [pid for job in emulator.jobs() for pid in emulator.replica_pids(job.name).values()]
    emulator.stop()
    assert not [pid for pid in pids if process_alive(pid)], "replicas outlived stop()"


@pytest.fixture(scope="module")
def client(vertex):
    return job_service_client(vertex.host_port)


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """Write a tiny replica program and return the container command that runs it."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return ["python", str(path)]


def create(client, display_name: str, pools, *, retry=gapic_default, **kwargs):
    job = command_job(display_name, pools, **kwargs)
    return client.create_custom_job(parent=PARENT, custom_job=job, retry=retry)


def job_id(job) -> str:
    return job.name.rsplit("/", 1)[1]


def test_job_goes_queued_running_succeeded_with_times(vertex, client, tmp_path):
    go = tmp_path / "go"
    waits_for_go = script(
        tmp_path,
        "wait_for_go",
        f"""
        import os, time
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        """,
    )
    vertex.set_stockout(queue_seconds=600)  # holds the job in QUEUED until cleared
    try:
        job = create(client, "lifecycle", [(1, waits_for_go)])
        assert job.state == JobState.JOB_STATE_QUEUED
        assert client.get_custom_job(name=job.name).state == JobState.JOB_STATE_QUEUED
    finally:
        vertex.set_stockout()

    vertex.wait_for_state(job.name, RUNNING, timeout=30)
    running = client.get_custom_job(name=job.name)
    assert running.state == JobState.JOB_STATE_RUNNING
    assert running.start_time >= running.create_time
    assert "end_time" not in running

    go.touch()
    vertex.wait_for_state(job.name, DONE, timeout=30)
    done = client.get_custom_job(name=job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert done.create_time <= done.start_time <= done.end_time <= done.update_time
    assert "error" not in done


def test_replica_gets_vertex_environment_and_its_output_is_logged(vertex, client, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVSTACK_INHERITED_PROBE", "from-the-server")
    record = tmp_path / "env.json"
    dump_env = script(
        tmp_path,
        "dump_env",
        f"""
        import json, os, sys
        print("hello from the replica")
        json.dump({{"env": dict(os.environ), "python": sys.executable}}, open({str(record)!r}, "w"))
        """,
    )
    job = create(
        client,
        "env",
        [(1, dump_env)],
        env={"RELAUNCH_ATTEMPT": "2"},
        base_output_directory="gs://bucket/out",
    )
    assert vertex.wait_for_state(job.name, DONE, timeout=60).state == JobState.JOB_STATE_SUCCEEDED

    seen = json.loads(record.read_text())
    env = seen["env"]
    assert env["RELAUNCH_ATTEMPT"] == "2"
    assert env["DEVSTACK_INHERITED_PROBE"] == "from-the-server"
    assert env["CLOUD_ML_JOB_ID"] == job_id(job)
    assert env["AIP_CHECKPOINT_DIR"] == "gs://bucket/out/checkpoints/"
    assert env["AIP_MODEL_DIR"] == "gs://bucket/out/model/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == "gs://bucket/out/logs/"
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
    cluster = json.loads(env["CLUSTER_SPEC"])
    assert cluster["cluster"] == {"workerpool0": [f"127.0.0.1:{env['MASTER_PORT']}"]}
    assert cluster["task"] == {"type": "workerpool0", "index": 0, "trial": ""}
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert os.path.dirname(seen["python"]) == os.path.dirname(sys.executable)
    log_file = Path(vertex.workdir) / job_id(job) / "workerpool0-0.log"
    assert "hello from the replica" in log_file.read_text()


def sleeper(tmp_path: Path, name: str = "sleeper") -> list[str]:
    """A replica that starts a child process (to check whole trees die) and then sleeps."""
    return script(
        tmp_path,
        name,
        """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(600)
        """,
    )


def tree_pids(root_pid: int) -> list[int]:
    """The replica's process and everything in its process group."""
    group = os.getpgid(root_pid)
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group:
                    members.append(int(entry.name))
            except ProcessLookupError:
                pass
    return members


def test_cancel_ends_cancelled_with_code_1_and_kills_the_replica_tree(vertex, client, tmp_path):
    job = create(client, "to-cancel", [(1, sleeper(tmp_path))])
    vertex.wait_for_state(job.name, RUNNING, timeout=30)
    root = vertex.replica_pids(job.name)["workerpool0-0"]
    wait_until(lambda: len(tree_pids(root)) >= 2, 30, "the replica's child process")
    pids = tree_pids(root)

    client.cancel_custom_job(name=job.name)
    assert client.get_custom_job(name=job.name).state in {
        JobState.JOB_STATE_CANCELLING,
        JobState.JOB_STATE_CANCELLED,
    }
    ended = vertex.wait_for_state(job.name, DONE, timeout=30)

    assert ended.state == JobState.JOB_STATE_CANCELLED
    assert ended.error.code == 1
    assert not [pid for pid in pids if process_alive(pid)]


def test_delete_is_refused_while_the_job_runs(vertex, client, tmp_path):
    job = create(client, "busy", [(1, sleeper(tmp_path))])
    vertex.wait_for_state(job.name, RUNNING, timeout=30)

    with pytest.raises(exceptions.FailedPrecondition):
        client.delete_custom_job(name=job.name)

    client.cancel_custom_job(name=job.name)
    vertex.wait_for_state(job.name, DONE, timeout=30)
    client.delete_custom_job(name=job.name).result(timeout=10)
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=job.name)


def test_one_failing_replica_fails_the_gang_and_kills_the_rest(vertex, client, tmp_path):
    ready = tmp_path / "primary-ready"
    # The primary ignores SIGTERM, so only the SIGKILL after the grace period can end it.
    stubborn = script(
        tmp_path,
        "stubborn",
        f"""
        import pathlib, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(600)
        """,
    )
    fails = script(
        tmp_path,
        "fails",
        f"""
        import os, sys, time
        while not os.path.exists({str(ready)!r}):
            time.sleep(0.02)
        sys.exit(3)
        """,
    )
    job = create(client, "gang", [(1, stubborn), (1, fails)])
    vertex.wait_for_state(job.name, RUNNING, timeout=30)
    primary = vertex.replica_pids(job.name)["workerpool0-0"]

    vertex.wait_for_state(job.name, DONE, timeout=60)
    ended = vertex.wait_for_error(job.name, timeout=30)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 3
    assert ended.error.message == (
        "The replica workerpool1-0 exited with a non-zero status of 3. Termination reason: Error."
    )
    assert not process_alive(primary)


def spot_replica(tmp_path: Path, name: str = "spot") -> tuple[list[str], Path, Path]:
    """A replica that logs each start (with its RELAUNCH_RESUME_FROM) and each SIGTERM."""
    starts = tmp_path / f"{name}-starts"
    sigterms = tmp_path / f"{name}-sigterms"
    command = script(
        tmp_path,
        name,
        f"""
        import os, signal, sys, time
        def on_sigterm(signum, frame):
            with open({str(sigterms)!r}, "a") as f:
                f.write("saved\\n")
            sys.exit(75)
        signal.signal(signal.SIGTERM, on_sigterm)
        with open({str(starts)!r}, "a") as f:
            f.write(os.environ.get("RELAUNCH_RESUME_FROM", "") + "\\n")
        time.sleep(600)
        """,
    )
    return command, starts, sigterms


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_reclaim_sigterms_then_restarts_the_job_in_place_with_the_same_environment(vertex, client, tmp_path):
    command, starts, sigterms = spot_replica(tmp_path)
    previous = vertex.configure(reclaim_restarts=2)
    try:
        job = create(
            client, "spot", [(1, command)], strategy="SPOT", env={"RELAUNCH_RESUME_FROM": "gs://b/s-4"}
        )
        wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
        for restart in (1, 2):
            assert vertex.preempt(job.name)
            wait_until(lambda n=restart: len(lines(starts)) == n + 1, 60, f"in-place restart {restart}")
            assert client.get_custom_job(name=job.name).state == JobState.JOB_STATE_RUNNING
        assert lines(sigterms) == ["saved", "saved"]  # each reclaim warned the replica first
        assert lines(starts) == ["gs://b/s-4"] * 3  # the environment is unchanged
        # No restart left: the third reclaim ends the job with the STOCKOUT-style error.
        assert vertex.preempt(job.name)
        failed = vertex.wait_for_state(job.name, DONE, timeout=60)
    finally:
        vertex.restore(previous)
    assert failed.state == JobState.JOB_STATE_FAILED
    assert "error" not in failed  # Vertex sets it only later
    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.error.code == 8
    assert ended.error.message == (
        f"Resources are insufficient in region: {REGION}. Try a different region or use a different accelerator."
    )
    assert not {"preempt", "spot"} & set(ended.error.message.lower().replace(".", " ").split())
    assert vertex.preempt(job.name) is False  # an ended job cannot be reclaimed again


def test_the_state_shown_during_an_in_place_restart_is_a_knob(vertex, client, events, tmp_path):
    command, starts, _ = spot_replica(tmp_path)
    previous = vertex.configure(pending_during_restart=True)
    try:
        job = create(client, "spot-pending", [(1, command)], strategy="SPOT")
        wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
        assert vertex.preempt(job.name, grace_seconds=1)
        wait_until(lambda: len(lines(starts)) == 2, 60, "the in-place restart")
    finally:
        vertex.restore(previous)

    def texts() -> list[str]:
        return [e["textPayload"] for e in events.for_job(job_id(job))]

    wait_until(lambda: texts().count("Job is running.") == 2, 30, "RUNNING again after the restart")
    after_first_run = texts()[texts().index("Job is running.") + 1 :]
    assert after_first_run.count("Waiting for job to be provisioned.") == 1  # PENDING in between
    client.cancel_custom_job(name=job.name)
    vertex.wait_for_state(job.name, DONE, timeout=60)


def test_disable_retries_stops_the_in_place_restarts_of_a_reclaim(vertex, client, tmp_path):
    command, starts, _ = spot_replica(tmp_path)
    job = create(client, "spot-no-retries", [(1, command)], strategy="SPOT", disable_retries=True)
    wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
    assert vertex.preempt(job.name)
    ended = vertex.wait_for_state(job.name, DONE, timeout=60)
    assert ended.state == JobState.JOB_STATE_FAILED and lines(starts) == [""]


def test_reclaim_with_no_grace_kills_without_any_sigterm_and_can_end_the_job_at_once(
    vertex, client, tmp_path
):
    command, starts, sigterms = spot_replica(tmp_path)
    job = create(client, "spot-hard", [(1, command)], strategy="SPOT")
    wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
    pid = vertex.replica_pids(job.name)["workerpool0-0"]
    assert vertex.preempt(job.name, grace_seconds=0, end_job=True)
    ended = vertex.wait_for_error(job.name, timeout=60)
    assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8
    assert not process_alive(pid) and lines(sigterms) == [] and lines(starts) == [""]


def test_reclaim_error_code_and_text_are_knobs(vertex, client, tmp_path):
    command, starts, _ = spot_replica(tmp_path)
    previous = vertex.configure(reclaim_error_code=14, reclaim_error_text="", reclaim_ends_job=True)
    try:
        job = create(client, "spot-14", [(1, command)], strategy="SPOT")
        wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
        assert vertex.preempt(job.name, grace_seconds=1)
        ended = vertex.wait_for_error(job.name, timeout=60)
    finally:
        vertex.restore(previous)
    assert (ended.error.code, ended.error.message) == (14, "")


@pytest.mark.parametrize(
    ("code", "text"), [(10, "Job was terminated by the system."), (14, "The VM was preempted.")]
)
def test_a_reclaim_can_end_with_any_code_and_text_chosen_per_call(vertex, client, tmp_path, code, text):
    command, starts, _ = spot_replica(tmp_path)
    job = create(client, f"spot-{code}", [(1, command)], strategy="SPOT")
    wait_until(lambda: len(lines(starts)) == 1, 30, "the first start")
    assert vertex.preempt(job.name, grace_seconds=0, end_job=True, error_code=code, error_text=text)
    ended = vertex.wait_for_error(job.name, timeout=60)
    assert (ended.state, ended.error.code, ended.error.message) == (JobState.JOB_STATE_FAILED, code, text)
    # The choice was this reclaim's only: the next one ends with the behaviour's error again.
    again = create(client, "spot-default", [(1, command)], strategy="SPOT")
    wait_until(lambda: len(lines(starts)) == 2, 30, "the second job's start")
    assert vertex.preempt(again.name, grace_seconds=0, end_job=True)
    assert vertex.wait_for_error(again.name, timeout=60).error.code == VertexBehaviour().reclaim_error_code


def test_out_of_memory_ends_the_whole_job_with_the_documented_text_and_no_restart(vertex, client, tmp_path):
    command, starts, _ = spot_replica(tmp_path, "big")
    job = create(client, "oom", [(1, command), (1, command)])
    wait_until(lambda: len(lines(starts)) == 2, 30, "both replicas started")
    primary = vertex.replica_pids(job.name)["workerpool0-0"]

    assert vertex.out_of_memory(job.name, "workerpool1-0")
    ended = vertex.wait_for_error(job.name, timeout=60)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.message == (
        "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137."
    )
    assert ended.error.code == VertexBehaviour().out_of_memory_error_code
    assert len(lines(starts)) == 2  # not restarted, although other crashes may be
    assert not process_alive(primary)
    assert vertex.out_of_memory(job.name, "workerpool1-0") is False  # nothing left to kill


def test_the_job_succeeds_when_the_primary_exits_0_and_the_rest_are_shut_down(vertex, client, tmp_path):
    ready = tmp_path / "worker-ready"
    worker = script(
        tmp_path,
        "hung_worker",
        f"""
        import pathlib, time
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(600)
        """,
    )
    primary = script(
        tmp_path,
        "primary_done",
        f"""
        import os, time
        while not os.path.exists({str(ready)!r}):
            time.sleep(0.02)
        """,
    )
    job = create(client, "primary-wins", [(1, primary), (1, worker)])
    ended = vertex.wait_for_state(job.name, DONE, timeout=60)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED
    assert not process_alive(vertex.replica_pids(job.name)["workerpool1-0"])


@pytest.mark.parametrize("disable_retries, starts_expected", [(False, 4), (None, 4), (True, 1)])
def test_sigabrt_is_retried_three_times_unless_retries_are_disabled(
    vertex, client, tmp_path, disable_retries, starts_expected
):
    starts = tmp_path / "starts"
    aborts = script(
        tmp_path,
        "aborts",
        f"""
        import os
        with open({str(starts)!r}, "a") as f:
            f.write("start\\n")
        os.abort()
        """,
    )
    job = create(client, "abort", [(1, aborts)], disable_retries=disable_retries)
    vertex.wait_for_state(job.name, DONE, timeout=60)
    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.error.code == 3
    assert ended.error.message == (
        "The replica workerpool0-0 exited with a non-zero status of 134. Termination reason: Error."
    )
    assert len(lines(starts)) == starts_expected


def test_a_failed_job_is_read_without_error_until_vertex_sets_it(vertex, client, tmp_path):
    previous = vertex.configure(failed_error_delay_seconds=600)
    try:
        job = create(client, "late-error", [(1, ["python", "-c", "raise SystemExit(1)"])])
        vertex.wait_for_state(job.name, DONE, timeout=60)
        read = client.get_custom_job(name=job.name)
        assert read.state == JobState.JOB_STATE_FAILED and "error" not in read and "end_time" in read
    finally:
        vertex.restore(previous)
    # Back to the short delay: the error follows within it.
    assert vertex.wait_for_error(job.name, timeout=30).error.code == 3


def test_stockout_is_retried_then_fails_with_the_documented_text_without_running(vertex, client, tmp_path):
    ran = tmp_path / "ran"
    marks = script(tmp_path, "marks", f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
    vertex.set_stockout(fail=True)
    try:
        job = create(client, "stocked-out", [(1, marks)])
        vertex.wait_for_state(job.name, DONE, timeout=30)
    finally:
        vertex.set_stockout()

    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 8
    assert ended.error.message == (
        f"Resources are insufficient in region: {REGION}. Try a different region or use a different accelerator."
    )
    assert "start_time" not in ended
    assert vertex.replica_pids(job.name) == {}
    assert not ran.exists()


def test_a_quota_shortfall_rejects_creates_with_429_or_keeps_jobs_queued(vertex, client):
    vertex.set_quota_shortfall("reject")
    try:
        with pytest.raises(
            exceptions.ResourceExhausted, match="The following quota metrics exceed quota limits"
        ):
            create(client, "over-quota", [(1, ["python", "-c", "pass"])], retry=None)
        vertex.set_quota_shortfall("queue")
        job = create(client, "waits-for-quota", [(1, ["python", "-c", "pass"])])
        with pytest.raises(TimeoutError):
            vertex.wait_for_state(
                job.name, {JobState.JOB_STATE_PENDING, JobState.JOB_STATE_RUNNING}, timeout=1
            )
    finally:
        vertex.set_quota_shortfall(None)
    assert vertex.wait_for_state(job.name, DONE, timeout=60).state == JobState.JOB_STATE_SUCCEEDED


def test_a_flex_start_job_gives_up_after_its_max_wait(vertex, client):
    vertex.set_stockout(queue_seconds=600)
    try:
        job = create(
            client, "flex", [(1, ["python", "-c", "pass"])], strategy="FLEX_START", max_wait_seconds=1
        )
        vertex.wait_for_state(job.name, DONE, timeout=30)
    finally:
        vertex.set_stockout()
    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8 and "start_time" not in ended


def test_a_create_can_be_served_and_its_reply_lost(vertex, client):
    vertex.lose_create_replies(1)
    with pytest.raises(exceptions.DeadlineExceeded):
        create(
            client, "lost-reply", [(1, ["python", "-c", "pass"])], labels={"probe": "lost-reply"}, retry=None
        )
    (job,) = client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.probe="lost-reply"'})
    assert vertex.wait_for_state(job.name, DONE, timeout=60).state == JobState.JOB_STATE_SUCCEEDED


def test_stockout_queue_holds_a_job_before_it_runs(vertex, client, tmp_path):
    vertex.set_stockout(queue_seconds=1.5)
    try:
        job = create(client, "queued", [(1, ["python", "-c", "pass"])])
        assert client.get_custom_job(name=job.name).state == JobState.JOB_STATE_QUEUED
        ended = vertex.wait_for_state(job.name, DONE, timeout=60)
    finally:
        vertex.set_stockout()

    assert ended.state == JobState.JOB_STATE_SUCCEEDED
    assert (ended.start_time - ended.create_time).total_seconds() >= 1.5


def test_scheduling_timeout_fails_the_job_with_code_4(vertex, client, tmp_path):
    job = create(client, "slow", [(1, sleeper(tmp_path))], timeout_seconds=1)

    vertex.wait_for_state(job.name, DONE, timeout=30)
    ended = vertex.wait_for_error(job.name, timeout=30)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 4
    assert ended.error.message == "Job exceeded its timeout of 1s."


def _parse_rfc3339(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00")


def test_event_sink_gets_one_log_entry_per_transition_in_order(vertex, client, events):
    job = create(client, "events", [(1, ["python", "-c", "pass"])])
    entries = events.wait_for(job_id(job), "Job completed successfully.", timeout=60)

    assert [e["textPayload"] for e in entries] == [
        "Job is queued.",
        "Waiting for job to be provisioned.",
        "Job is preparing.",
        "Job is running.",
        "Tearing down training program.",
        "Job completed successfully.",
    ]
    for entry in entries:
        assert entry["resource"] == {
            "type": "ml_job",
            "labels": {"job_id": job_id(job), "project_id": PROJECT, "task_name": "service"},
        }
        assert entry["logName"] == f"projects/{PROJECT}/logs/ml.googleapis.com%2F{job_id(job)}"
        assert entry["severity"] == "INFO"
    times = [_parse_rfc3339(e["timestamp"]) for e in entries]
    assert times == sorted(times)
    assert all(_parse_rfc3339(e["receiveTimestamp"]) >= _parse_rfc3339(e["timestamp"]) for e in entries)
    assert len({e["insertId"] for e in entries}) == len(entries)

    failing = create(client, "events-fail", [(1, ["python", "-c", "raise SystemExit(1)"])])
    failed = events.wait_for(job_id(failing), "Job failed.", timeout=60)
    assert failed[-1]["severity"] == "ERROR"


def test_transitions_nobody_documents_a_line_for_can_write_none(vertex, client, events):
    previous = vertex.configure(log_undocumented_transitions=False)
    try:
        job = create(client, "quiet", [(1, ["python", "-c", "raise SystemExit(1)"])])
        vertex.wait_for_state(job.name, DONE, timeout=60)
        entries = events.wait_for(job_id(job), "Tearing down training program.", timeout=30)
    finally:
        vertex.restore(previous)
    assert [e["textPayload"] for e in entries] == [
        "Waiting for job to be provisioned.",
        "Job is preparing.",
        "Job is running.",
        "Tearing down training program.",
    ]


def test_stop_kills_the_replicas_of_running_jobs(tmp_path):
    emulator = start_vertex(
        project=PROJECT, region=REGION, workdir=str(tmp_path / "work"), kill_grace_seconds=1.0
    )
    with emulator:
        job = create(job_service_client(emulator.host_port), "orphan?", [(1, sleeper(tmp_path))])
        emulator.wait_for_state(job.name, RUNNING, timeout=30)
        root = emulator.replica_pids(job.name)["workerpool0-0"]
        wait_until(lambda: len(tree_pids(root)) >= 2, 30, "the replica's child process")
        pids = tree_pids(root)

    assert not [pid for pid in pids if process_alive(pid)]


def test_a_failing_event_sink_does_not_disturb_jobs(tmp_path):
    def broken_sink(entry: dict) -> None:
        raise RuntimeError("sink down")

    with start_vertex(
        project=PROJECT, region=REGION, workdir=str(tmp_path / "work"), event_sink=broken_sink
    ) as emulator:
        job = create(job_service_client(emulator.host_port), "unheard", [(1, ["python", "-c", "pass"])])
        ended = emulator.wait_for_state(job.name, DONE, timeout=60)

    assert ended.state == JobState.JOB_STATE_SUCCEEDED


def test_cancelling_a_queued_job_ends_it_without_running_it(vertex, client, events, tmp_path):
    ran = tmp_path / "ran"
    marks = script(tmp_path, "marks", f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
    vertex.set_stockout(queue_seconds=600)
    try:
        job = create(client, "cancel-queued", [(1, marks)])
        client.cancel_custom_job(name=job.name)
        ended = vertex.wait_for_state(job.name, DONE, timeout=30)
    finally:
        vertex.set_stockout()

    assert ended.state == JobState.JOB_STATE_CANCELLED
    assert ended.error.code == 1
    assert not ran.exists()
    entries = events.wait_for(job_id(job), "Job was cancelled.", timeout=30)
    assert [e["textPayload"] for e in entries] == [
        "Job is queued.",
        "Job is being cancelled.",
        "Job was cancelled.",
    ]
