"""Job lifecycle of the Vertex stand-in: real replica processes, gang endings, fault injection."""

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
from google.cloud.aiplatform_v1 import JobState

from devstack.vertex import start_vertex
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


def create(client, display_name: str, pools, **kwargs):
    return client.create_custom_job(parent=PARENT, custom_job=command_job(display_name, pools, **kwargs))


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

    ended = vertex.wait_for_state(job.name, DONE, timeout=60)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 3
    assert ended.error.message == (
        "The replica workerpool1-0 exited with a non-zero status of 3. Termination reason: Error."
    )
    assert not process_alive(primary)


def test_preemption_sigterms_replicas_and_fails_with_code_14(vertex, client, tmp_path):
    ready = tmp_path / "handler-installed"
    noticed = tmp_path / "sigterm-noticed"
    checkpoints_on_sigterm = script(
        tmp_path,
        "spot",
        f"""
        import pathlib, signal, sys, time
        def on_sigterm(signum, frame):
            pathlib.Path({str(noticed)!r}).write_text("checkpoint saved")
            sys.exit(75)
        signal.signal(signal.SIGTERM, on_sigterm)
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(600)
        """,
    )
    job = create(client, "spot", [(1, checkpoints_on_sigterm)])
    wait_until(ready.exists, 30, "the SIGTERM handler")

    assert vertex.preempt(job.name, grace_seconds=10.0)
    ended = vertex.wait_for_state(job.name, DONE, timeout=30)

    assert noticed.read_text() == "checkpoint saved"
    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 14
    assert ended.error.message == (
        "The replica workerpool0-0 was preempted: the Spot VM was reclaimed. Termination reason: Preempted."
    )
    assert vertex.preempt(job.name) is False  # an ended job cannot be preempted again


def test_stockout_failure_ends_failed_with_code_8_without_running(vertex, client, tmp_path):
    ran = tmp_path / "ran"
    marks = script(tmp_path, "marks", f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
    vertex.set_stockout(fail=True)
    try:
        job = create(client, "stocked-out", [(1, marks)])
    finally:
        vertex.set_stockout()

    ended = vertex.wait_for_state(job.name, DONE, timeout=30)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.code == 8
    assert ended.error.message == f"Resources are insufficient in region: {REGION}."
    assert "start_time" not in ended
    assert vertex.replica_pids(job.name) == {}
    assert not ran.exists()


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

    ended = vertex.wait_for_state(job.name, DONE, timeout=30)

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
        "Job is running.",
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
