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


def test_cancel_publishes_a_cancel_request(finished_job, requests_topic, capsys):
    assert main(["cancel", finished_job, "--no-verdict"]) == 0
    assert f"cancel requested for {finished_job}" in capsys.readouterr().out
    assert json.loads(pull_one(requests_topic)) == {"jobId": finished_job, "action": "cancel"}


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
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("relaunch: error: cannot submit the request (")


def test_status_without_a_state_store_says_where_it_looked(devstack, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{tmp_path / 'nowhere.db'}")
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "no state store at" in err and len(err.splitlines()) == 1
