"""The job verbs (`submit`, `status`, `cancel`, `events`, `report`) through `controller.cli.main`,
against devstack's stand-ins and a state store an Engine really wrote."""

from __future__ import annotations

import json
import socket
import threading
import uuid

import pytest
from google.cloud import pubsub_v1

from controller.cli.main import main
from tests.support.engine import accept, drive, job_document, request, terminal


def pull_one(subscription: str) -> bytes:
    subscriber = pubsub_v1.SubscriberClient()
    response = subscriber.pull(subscription=subscription, max_messages=1, timeout=10)
    (received,) = response.received_messages
    subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
    return received.message.data


@pytest.fixture
def finished_job(devstack, bucket, make_engine, state_env):
    """A job the engine ran to success, with checkpoints along the way. Each test gets its own
    jobId: the Vertex stand-in lives for the whole package and adopts a job of the same name."""
    job_id = f"cli-ok-{uuid.uuid4().hex[:6]}"
    engine = make_engine()
    accept(engine, request(job_id, bucket, args=["--steps", "6", "--every", "3"]), {})
    drive(engine, job_id, terminal)
    return job_id


def test_status_lists_the_job_and_shows_its_attempts(finished_job, capsys):
    assert main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "JOB",
        "PHASE",
        "ATTEMPT",
        "PREEMPTIONS",
        "FAILURES",
        "CHECKPOINT",
        "AGE",
        "GOODPUT",
    ]
    row = out[1].split()
    assert row[:6] == [finished_job, "succeeded", "1", "0", "0", "6"] and row[7].endswith("%")

    assert main(["status", finished_job]) == 0
    page = capsys.readouterr().out
    assert "phase:       succeeded" in page and "goodput:     goodput " in page
    attempt_row = page.strip().splitlines()[-1].split()
    assert attempt_row[0] == "1" and "succeeded" in attempt_row

    assert main(["status", finished_job, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["jobId"] == finished_job and document["phase"] == "succeeded"
    assert document["attempts"][0]["ending"] == "succeeded"
    assert 0 < document["goodput"]["ratio"] <= 1
    assert any("request accepted" in e["what"] for e in document["timeline"])


def test_status_of_an_unknown_job_exits_1(finished_job, capsys):
    assert main(["status", "no-such-job"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("relaunch: error: no job 'no-such-job'") and len(err.splitlines()) == 1


def test_events_prints_the_timeline_in_order(finished_job, capsys):
    assert main(["events", finished_job]) == 0
    lines = capsys.readouterr().out.splitlines()
    whats = [line.split("  ", 2)[-1].strip() for line in lines]
    assert whats[0] == "request accepted"
    assert "checkpoint at step 6 committed" in whats
    assert any(w.startswith("attempt 1 ended: succeeded") for w in whats)
    assert whats[-1].startswith("job succeeded")
    assert all(line[:4].isdigit() and "attempt" in line for line in lines)


def test_report_writes_a_png_and_prints_the_goodput(finished_job, tmp_path, capsys):
    picture = tmp_path / "job.png"
    assert main(["report", finished_job, "--png", str(picture)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{finished_job}: goodput ") and "productive" in out
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_submit_rejects_an_invalid_file_with_the_field_error(devstack, tmp_path, requests_topic, capsys):
    bad = tmp_path / "bad.json"
    body = json.loads(request("Bad_Id", "bucket"))
    bad.write_text(json.dumps(body))
    assert main(["submit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: jobId: must be 1-63 characters" in err


def test_submit_publishes_the_canonical_request(devstack, tmp_path, requests_topic, capsys):
    good = tmp_path / "job.json"
    good.write_text(request("cli-sub", "bucket").decode())
    assert main(["submit", str(good), "--no-verdict"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("submitted cli-sub (message ")
    sent = json.loads(pull_one(requests_topic))
    assert sent["jobId"] == "cli-sub" and sent["checkpoint"] == {"uri": "gs://bucket/cli-sub"}
    assert sent["restartPolicy"]["backoff"]["maxSeconds"] == 0.5  # the canonical form, defaults written


def test_cancel_publishes_a_cancel_request(devstack, bucket, make_engine, state_env, requests_topic, capsys):
    job_id = f"cli-live-{uuid.uuid4().hex[:6]}"
    accept(make_engine(), request(job_id, bucket, args=["--steps", "6", "--every", "3"]), {})
    assert main(["cancel", job_id, "--no-verdict"]) == 0
    assert f"cancel requested for {job_id}" in capsys.readouterr().out
    assert json.loads(pull_one(requests_topic)) == {"jobId": job_id, "action": "cancel"}


def test_submit_wait_follows_the_job_to_success(
    devstack, bucket, make_engine, state_env, tmp_path, requests_topic, capsys
):
    """The engine takes the request off the topic as the daemon would; `--wait` prints progress
    from the state store and exits 0 when the job succeeds."""
    job_id = f"cli-wait-{uuid.uuid4().hex[:6]}"
    engine = make_engine()
    stop = threading.Event()

    def controller():
        body = pull_one(requests_topic)
        accept(engine, body)
        while not stop.is_set():
            engine.serve()
            engine.run_pass()
            if terminal(job_document(engine, job_id)):
                return
            engine.queue.wait_for_work(0.1)

    worker = threading.Thread(target=controller, daemon=True)
    worker.start()
    job = tmp_path / "wait.json"
    job.write_text(request(job_id, bucket, args=["--steps", "6", "--every", "3"]).decode())
    try:
        code = main(["submit", str(job), "--wait", "--timeout", "60", "--poll", "0.2"])
    finally:
        stop.set()
        worker.join(timeout=30)
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert any(f"{job_id}: running, attempt 1" in line for line in out)
    # The controller runs in this process: its log lines share stdout with the CLI's own.
    printed = [line for line in out if f"{job_id}: " in line]
    assert printed[-1].endswith(f"{job_id}: succeeded, attempt 1, checkpoint step 6")


def test_submit_wait_gives_up_with_124(devstack, tmp_path, requests_topic, state_env, make_engine, capsys):
    make_engine()  # creates the (empty) state store; no controller picks the request up
    job = tmp_path / "job.json"
    job.write_text(request("cli-never", "bucket").decode())
    assert main(["submit", str(job), "--wait", "--timeout", "0.3", "--poll", "0.1"]) == 124
    out = capsys.readouterr().out
    assert "waiting for the controller to accept cli-never" in out and "stopped waiting" in out


def test_unreachable_pubsub_is_one_line_and_exit_1(devstack, tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{closed}")
    monkeypatch.setenv("RELAUNCH_RPC_TIMEOUT_SECONDS", "1")
    job = tmp_path / "job.json"
    job.write_text(request("cli-down", "bucket").decode())
    assert main(["submit", str(job)]) == 1
    # No controller runs against this store: a note says so first; then the error, one line.
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("relaunch: note:")]
    assert len(err) == 1
    assert err[0].startswith("relaunch: error: cannot submit the request (")


def test_status_without_a_state_store_says_where_it_looked(devstack, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{tmp_path / 'nowhere.db'}")
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "no state store at" in err and len(err.splitlines()) == 1


# ---- a newcomer's second run, and the controller's sign of life --------------------------------


def test_submitting_a_finished_jobs_request_again_says_unchanged_and_how_to_rerun(
    finished_job, bucket, requests_topic, tmp_path, capsys
):
    job = tmp_path / "again.json"
    job.write_text(request(finished_job, bucket, args=["--steps", "6", "--every", "3"]).decode())
    assert main(["submit", str(job)]) == 0
    out = capsys.readouterr().out
    assert f"{finished_job} unchanged: this request already ran and succeeded" in out
    assert "new jobId" in out and "--fresh" in out
    # Nothing was published: the controller would only have said "accepted" to nobody.
    response = pubsub_v1.SubscriberClient().pull(subscription=requests_topic, max_messages=1, timeout=3)
    assert not response.received_messages


def test_cancel_of_an_ended_job_exits_1_saying_how_it_ended(finished_job, requests_topic, capsys):
    assert main(["cancel", finished_job]) == 1
    err = capsys.readouterr().err
    assert f"{finished_job} has already ended, succeeded" in err and "nothing to cancel" in err
    response = pubsub_v1.SubscriberClient().pull(subscription=requests_topic, max_messages=1, timeout=3)
    assert not response.received_messages


def test_json_has_rfc3339_times_and_every_event_a_kind(finished_job, capsys):
    from controller.readmodel.jobs import EVENT_KINDS

    assert main(["events", finished_job, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert all(e["kind"] in EVENT_KINDS and e["kind"] != "note" for e in entries), entries
    assert {
        "accepted",
        "attempt-requested",
        "attempt-running",
        "attempt-ended",
        "checkpoint",
        "job-ended",
    } <= {e["kind"] for e in entries}
    assert all(e["time"].endswith("Z") and e["time"][10] == "T" for e in entries)
    assert main(["status", finished_job, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["createdAt"].endswith("Z") and document["attempts"][0]["endedAt"].endswith("Z")


def test_status_filters_by_phase_and_watch_ends_with_the_jobs(finished_job, capsys):
    assert main(["status", "--phase", "running"]) == 0
    assert capsys.readouterr().out.startswith("no jobs in phase running")
    assert main(["status", "--phase", "succeeded,failed"]) == 0
    assert finished_job in capsys.readouterr().out
    assert main(["status", "--phase", "runing"]) == 2
    assert "did you mean 'running'?" in capsys.readouterr().err
    # Every job shown has ended: --watch prints once and returns.
    assert main(["status", finished_job, "--watch"]) == 0
    assert capsys.readouterr().out.count("phase:       succeeded") == 1


def test_status_fits_100_columns_unless_wide(finished_job, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["status", finished_job]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in narrow) <= 100, narrow
    assert main(["status", finished_job, "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "VERTEX JOB" in wide and "CKPT EVERY" in wide


def test_status_shows_the_controllers_last_sign_of_life(finished_job, tmp_path, capsys):
    import time

    from controller.store.heartbeat import Heartbeat
    from controller.store.sqlite import SqliteStateStore

    assert main(["status"]) == 0
    assert "controller: none has run against this state store" in capsys.readouterr().out
    store = SqliteStateStore(str(tmp_path / "state.db"))
    Heartbeat(store, "host-7", every_seconds=10).beat(time.time())
    assert main(["status", finished_job]) == 0
    assert "controller:  running, last seen 0s ago (host-7)" in capsys.readouterr().out
    Heartbeat(store, "host-7", every_seconds=10).beat(time.time() - 600)
    assert main(["status"]) == 0
    assert "controller: NOT RUNNING, last seen 10m00s ago (host-7)" in capsys.readouterr().out


def test_submit_says_at_once_that_no_controller_runs_and_stops_waiting(
    finished_job, bucket, requests_topic, tmp_path, capsys
):
    from controller.client import Client

    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    client = Client(
        state_store=f"sqlite://{tmp_path / 'state.db'}",
        requests_topic=requests_topic.replace("/subscriptions/", "/topics/").removesuffix("-read"),
        verdict_seconds=60,
        sleep=sleep,
        clock=lambda: clock[0],
    )
    assert not client.controller_alive()
    verdict = client.submit(request("nobody-home", bucket).decode())
    assert verdict.outcome == "no controller"
    assert clock[0] < 20  # not the whole minute of verdict_seconds
    # The CLI says so before it waits.
    job = tmp_path / "lonely.json"
    job.write_text(request("nobody-home-2", bucket).decode())
    assert main(["submit", str(job), "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("relaunch: note: no controller has run yet on ")


@pytest.fixture
def replica_logs(finished_job, tmp_path, monkeypatch):
    """Log files as devstack writes them for the finished job's attempt: two replicas, JSON
    lines from the trainer, one plain traceback line."""
    from datetime import UTC, datetime, timedelta

    from controller.client import Client

    vertex_job = Client.from_config().status(finished_job)["attempts"][-1]["vertexJob"]
    folder = tmp_path / "ds" / "vertex" / vertex_job.rsplit("/", 1)[-1]
    folder.mkdir(parents=True)
    now = datetime.now(UTC)

    def line(seconds_ago: float, message: str, **extra) -> str:
        when = (now - timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")
        return json.dumps({"message": message, "severity": "INFO", "time": when, **extra}) + "\n"

    (folder / "workerpool0-0.log").write_text(
        line(7200, "launching") + line(30, "step", step=10) + "Traceback (most recent call last):\n"
    )
    (folder / "workerpool1-0.log").write_text(line(40, "joined") + line(20, "step", step=11))
    monkeypatch.setenv("RELAUNCH_DEVSTACK_DIR", str(tmp_path / "ds"))
    return finished_job


def test_logs_interleave_every_replica_as_human_lines(replica_logs, capsys):
    assert main(["logs", replica_logs]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [(line.split()[1], line.split()[3]) for line in lines if line[:1].isdigit()]
    assert said == [
        ("workerpool0-0", "launching"),
        ("workerpool1-0", "joined"),
        ("workerpool0-0", "step"),
        ("workerpool1-0", "step"),
    ]
    assert "step=10" in lines[2] and lines[4].split()[2] == "INFO"
    # A line without a time stays after the line its replica wrote before it.
    assert lines[3].split() == ["workerpool0-0", "Traceback", "(most", "recent", "call", "last):"]
    assert not any(line.startswith("{") for line in lines)


def test_logs_json_tail_and_since(replica_logs, capsys):
    assert main(["logs", replica_logs, "--json", "--tail", "2"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["replica"], r["message"]) for r in records] == [
        ("workerpool0-0", "Traceback (most recent call last):"),
        ("workerpool1-0", "step"),
    ]
    assert main(["logs", replica_logs, "--since", "1m", "--replica", "workerpool0-0"]) == 0
    out = capsys.readouterr().out
    assert "launching" not in out and "step=10" in out and "workerpool1-0" not in out


def test_logs_of_a_replica_that_does_not_exist_lists_those_that_do(replica_logs, capsys):
    assert main(["logs", replica_logs, "--replica", "workerpool2-0"]) == 1
    err = capsys.readouterr().err
    assert "has no replica 'workerpool2-0'" in err
    assert "its replicas: workerpool0-0, workerpool1-0" in err


def test_wait_for_checkpoint_returns_at_the_first_commit_marker(
    devstack, bucket, make_engine, state_env, capsys
):
    """The controller records checkpoints only when it looks; `wait --for checkpoint` reads the
    commit markers itself, so it returns while the stored job still shows none."""
    from tests.support.daemon import cancel_vertex_jobs

    job_id = f"cli-ckpt-{uuid.uuid4().hex[:6]}"
    engine = make_engine()
    body = request(job_id, bucket, args=["--steps", "100000", "--every", "40", "--step-seconds", "0.05"])
    accept(engine, body, {})
    drive(engine, job_id, lambda doc: doc["phase"] == "running")
    try:
        assert main(["wait", job_id, "--for", "checkpoint", "--timeout", "60", "--poll", "0.2"]) == 0
        out = capsys.readouterr().out
        assert f"{job_id}: checkpoint step " in out and "committed" in out
        assert job_document(engine, job_id)["latestCheckpointStep"] is None
    finally:
        cancel_vertex_jobs(devstack, {job_id})


def test_cancel_wait_follows_the_job_until_it_is_cancelled(
    devstack, bucket, make_engine, state_env, requests_topic, capsys
):
    job_id = f"cli-cw-{uuid.uuid4().hex[:6]}"
    engine = make_engine()
    accept(engine, request(job_id, bucket, args=["--steps", "100000", "--step-seconds", "0.05"]), {})
    drive(engine, job_id, lambda doc: doc["phase"] == "running")
    stop = threading.Event()

    def controller():  # takes the cancel off the topic and runs the loop, as the daemon would
        accept(engine, pull_one(requests_topic))
        while not stop.is_set() and not terminal(job_document(engine, job_id)):
            engine.serve()
            engine.run_pass()
            engine.queue.wait_for_work(0.1)

    worker = threading.Thread(target=controller, daemon=True)
    worker.start()
    try:
        code = main(["cancel", job_id, "--wait", "--timeout", "60", "--poll", "0.2"])
    finally:
        stop.set()
        worker.join(timeout=30)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"cancel requested for {job_id}" in out
    assert f"{job_id}: cancelled" in out
    assert job_document(engine, job_id)["phase"] == "cancelled"
