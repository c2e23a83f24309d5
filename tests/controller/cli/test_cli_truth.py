"""Verbs that tell the truth: the controller's verdict, exit codes, terminal-safe output, one
place to configure, quiet pipes, and read verbs that import no Google client they do not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from controller.cli.main import main
from tests.support.engine import accept, drive, request, terminal

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = "Evil \x1b[2J\x1b[31m\nSUCCEEDED job-x \u202etxt.exe\x07"


def _controller_thread(engine, subscription: str, stop: threading.Event) -> threading.Thread:
    """What the daemon does with the requests topic: pull, hand to the intake, ack."""

    def loop():
        subscriber = pubsub_v1.SubscriberClient()
        while not stop.is_set():
            response = subscriber.pull(subscription=subscription, max_messages=5, timeout=5)
            for received in response.received_messages:
                accept(engine, received.message.data)
                subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    return worker


@pytest.fixture
def controller(make_engine, requests_topic, state_env):
    engine = make_engine()
    stop = threading.Event()
    worker = _controller_thread(engine, requests_topic, stop)
    yield engine
    stop.set()
    worker.join(timeout=30)


def _local_request(tmp_path: Path, job_id: str) -> Path:
    """Valid for `--local`, but the controller (allow_local_checkpoints off) rejects it."""
    body = json.loads(request(job_id, "unused"))
    body["checkpoint"] = {"uri": f"file://{tmp_path}/ckpt"}
    path = tmp_path / "local.json"
    path.write_text(json.dumps(body))
    return path


def test_submit_prints_accepted_once_the_controller_recorded_the_job(controller, bucket, tmp_path, capsys):
    job = tmp_path / "job.json"
    job.write_text(request(f"cli-acc-{uuid.uuid4().hex[:6]}", bucket, args=["--steps", "3"]).decode())
    assert main(["submit", str(job)]) == 0
    # (the in-process engine logs to stdout too)
    assert any(line.startswith("accepted cli-acc-") for line in capsys.readouterr().out.splitlines())


def test_a_rejected_request_exits_1_with_the_controllers_reason(controller, tmp_path, capsys):
    path = _local_request(tmp_path, f"cli-rej-{uuid.uuid4().hex[:6]}")
    assert main(["submit", "--local", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the controller rejected cli-rej-" in err and "checkpoint" in err


def test_submit_wait_stops_at_once_on_rejection(controller, tmp_path, capsys):
    # A wait that ignored the rejection would run into --timeout and exit 124.
    path = _local_request(tmp_path, f"cli-rejw-{uuid.uuid4().hex[:6]}")
    assert main(["submit", "--local", str(path), "--wait", "--timeout", "120"]) == 1
    assert "the controller rejected" in capsys.readouterr().err


def test_a_second_different_request_for_a_jobid_is_rejected(controller, bucket, tmp_path, capsys):
    job_id = f"cli-dup-{uuid.uuid4().hex[:6]}"
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(request(job_id, bucket, args=["--steps", "3"]).decode())
    second.write_text(request(job_id, bucket, args=["--steps", "4"]).decode())
    assert main(["submit", str(first)]) == 0
    assert main(["submit", str(second)]) == 1
    assert "already exists with a different request" in capsys.readouterr().err


def test_cancel_of_an_unknown_job_exits_1(controller, capsys):
    assert main(["cancel", "no-such-job"]) == 1
    assert "no job 'no-such-job'" in capsys.readouterr().err


def test_cancel_of_a_running_job_is_recorded(controller, bucket, tmp_path, capsys):
    job_id = f"cli-can-{uuid.uuid4().hex[:6]}"
    job = tmp_path / "job.json"
    job.write_text(request(job_id, bucket, args=["--steps", "100000", "--step-seconds", "0.05"]).decode())
    assert main(["submit", str(job)]) == 0
    assert main(["cancel", job_id]) == 0
    assert f"cancel requested for {job_id}" in capsys.readouterr().out
    drive(controller, job_id, terminal)
    capsys.readouterr()  # the in-process engine's own log lines, not the CLI's output
    assert main(["status", job_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "cancelled"


def test_status_events_and_logs_show_hostile_text_visibly(
    devstack, make_engine, bucket, state_env, monkeypatch, capsys
):
    """A displayName with ANSI escapes, a newline and an RTL override, and a replica that prints
    escapes, reach the terminal as visible escapes: nothing a terminal would interpret."""
    job_id = f"cli-evil-{uuid.uuid4().hex[:6]}"
    body = json.loads(request(job_id, bucket))
    body["displayName"] = HOSTILE
    body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"] = [
        sys.executable,
        "-c",
        "print('loss 0.5 \\x1b[2J\\x1b]0;owned\\x07 done\\u202e')",
    ]
    engine = make_engine()
    assert accept(engine, json.dumps(body).encode()).status == "accepted"
    drive(engine, job_id, terminal)
    monkeypatch.setenv("RELAUNCH_DEVSTACK_DIR", str(devstack.dir))

    for argv in (["status"], ["status", job_id], ["events", job_id], ["logs", job_id]):
        assert main(argv) == 0, argv
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out, argv
        assert not any(line.startswith("SUCCEEDED") for line in out.splitlines()), argv
    assert main(["status", job_id]) == 0
    assert "\\x1b[2J\\x1b[31m\\nSUCCEEDED job-x \\u202etxt.exe\\x07" in capsys.readouterr().out
    assert main(["logs", job_id]) == 0
    assert "loss 0.5 \\x1b[2J\\x1b]0;owned\\x07 done\\u202e" in capsys.readouterr().out
    picture = Path(devstack.dir).parent / f"{job_id}.svg"
    assert main(["report", job_id, "--svg", str(picture)]) == 0
    assert f"wrote {picture}" in capsys.readouterr().out
    svg = picture.read_text()
    assert svg.startswith("<svg") and "attempt 1" in svg and "\x1b" not in svg and "<script" not in svg
    # JSON keeps the exact value, escaped by JSON itself.
    assert main(["status", job_id, "--json"]) == 0
    raw = capsys.readouterr().out
    assert "\x1b" not in raw and json.loads(raw)["displayName"] == HOSTILE


def test_a_missing_setting_is_named_with_how_to_set_it(monkeypatch, capsys):
    monkeypatch.delenv("RELAUNCH_STATE_STORE", raising=False)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "no state store at" in err and "relaunch config set state_store" in err


def test_config_set_is_what_the_next_commands_use(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RELAUNCH_STATE_STORE", raising=False)
    store = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert main(["config", "set", "state_store", store]) == 0
    assert main(["config", "get", "state_store"]) == 0
    assert capsys.readouterr().out.strip() == store
    assert main(["config", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["state_store"] == {"value": store, "source": "config"}
    assert main(["status"]) == 1
    assert str(tmp_path / "elsewhere.db") in capsys.readouterr().err  # status looked there
    monkeypatch.setenv("RELAUNCH_STATE_STORE", "sqlite:///from-env.db")
    assert main(["config", "get", "state_store"]) == 0
    assert capsys.readouterr().out.strip() == "sqlite:///from-env.db"  # the environment wins
    assert main(["config", "set", "no_such_key", "x"]) == 2


def test_usage_errors_exit_2_and_version_prints(capsys):
    assert main(["status", "--no-such-flag"]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("relaunch ")


def _run_cli(args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} -m controller.cli {args}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def many_jobs(tmp_path):
    """A state store with 300 accepted jobs (about half a megabyte of `status --json`)."""
    from controller.core.decide import new_job
    from controller.request import parse_request
    from controller.store.sqlite import SqliteStateStore

    store = SqliteStateStore(tmp_path / "many.db")
    for index in range(300):
        parsed = parse_request(request(f"many-{index}", "bucket"))
        state = new_job(parsed.job_id, parsed.restart_policy, time.time())
        document = {
            "request": parsed.to_json(),
            "fingerprint": parsed.fingerprint(),
            "state": state.to_dict(),
        }
        store.create(f"jobs/{parsed.job_id}", document)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAUNCH_STATE_STORE": f"sqlite:///{tmp_path / 'many.db'}"}
    return env


def test_status_into_a_closed_pipe_is_quiet(many_jobs):
    done = _run_cli("status --json | head -1", many_jobs)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "[\n"


def test_read_verbs_import_no_google_client_they_do_not_use(many_jobs):
    for verb in ("status", "status many-1", "events many-1", "report many-1"):
        done = _run_cli(f"{verb} > /dev/null", {**many_jobs, "PYTHONPROFILEIMPORTTIME": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
        heavy = {name for name in imported if name.startswith(("google", "grpc", "matplotlib", "pydantic"))}
        assert heavy == set(), (verb, sorted(heavy)[:10])
