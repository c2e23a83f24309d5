"""The controller's status page, looked at in a real headless Chromium: a job preempted after its
first checkpoint and resumed shows both attempts, the preemption and the resume step; text
from the request cannot inject markup or terminal/bidi tricks. Plus the page's pure rendering."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest
from google.cloud import pubsub_v1

from controller.service import status_page
from tests.support.browser import Browser
from tests.support.daemon import ControllerProcess, wait_for
from tests.support.engine import PROJECT, request

HOSTILE_NAME = "Evil \x1b[2J\nSUCCEEDED \u202egnp.exe <script>document.title='pwned'</script>"


class _App:
    """The two reads the page makes, over fixed status documents."""

    def __init__(self, documents: list[dict]):
        self.documents = {d["jobId"]: d for d in documents}

    def list_job_documents(self) -> list[dict]:
        return list(self.documents.values())

    def job_document(self, job_id: str) -> dict | None:
        return self.documents.get(job_id)


def _document(job_id: str, name: str) -> dict:
    attempt = {
        "number": 1,
        "vertexJob": "projects/p/locations/r/customJobs/7",
        "vertexState": "JOB_STATE_FAILED",
        "onDemand": False,
        "resumeFromStep": None,
        "requestedAt": 100.0,
        "submittedAt": 101.0,
        "startedAt": 102.0,
        "endedAt": 150.0,
        "ending": "preempted",
        "rule": "exit-record-preempted",
        "errorCode": 14,
        "errorMessage": "\x1b[31mreclaimed\x1b[0m",
        "checkpointStepAtEnd": 10,
    }
    return {
        "jobId": job_id,
        "displayName": name,
        "phase": "backing_off",
        "attempt": 1,
        "preemptions": 1,
        "failures": 0,
        "latestCheckpointStep": 10,
        "latestCheckpointUri": "gs://b/j/step-10",
        "nextAttemptAt": 160.0,
        "createdAt": 100.0,
        "updatedAt": 150.0,
        "terminalReason": None,
        "checkpointUri": "gs://b/j",
        "attempts": [attempt],
        "timeline": [{"time": 120.0, "attempt": 1, "what": "checkpoint at step 10 committed", "step": 10}],
    }


def test_page_escapes_markup_and_shows_control_characters_visibly():
    app = _App([_document("evil", HOSTILE_NAME)])
    for path in ("/", "/jobs/evil"):
        code, html = status_page.render(path, app, now=200.0)
        assert code == 200
        assert "<script>" not in html and "&lt;script&gt;" in html
        assert "\x1b" not in html and "\u202e" not in html and "\\x1b[2J\\nSUCCEEDED \\u202e" in html
    code, html = status_page.render("/jobs/evil", app, now=200.0)
    assert "\\x1b[31mreclaimed" in html and "<svg" in html and "preempted" in html


def test_the_page_shows_the_replicas_of_each_attempt_and_marks_a_shrunk_one():
    document = _document("el", "elastic")
    full = {**document["attempts"][0], "replicas": [1, 3], "shrunk": False}
    shrunk = {**full, "number": 2, "replicas": [1, 1], "shrunk": True, "ending": None, "endedAt": None}
    document = {**document, "attempts": [full, shrunk], "attempt": 2}
    code, html = status_page.render("/jobs/el", _App([document]), now=200.0)
    assert code == 200
    assert "spot, 4 replicas</td>" in html and "spot, 2 replicas <strong>(shrunk)</strong>" in html


def test_unknown_job_page_is_404():
    code, html = status_page.render("/jobs/%3Cnope%3E", _App([]), now=1.0)
    assert code == 404 and "&lt;nope&gt;" in html


@pytest.fixture
def settings(tmp_path):
    tag = uuid.uuid4().hex[:6]
    return {
        "RELAUNCH_STATE_STORE": f"sqlite:///{tmp_path}/state.db",
        "RELAUNCH_RECONCILE_SECONDS": "1",
        "RELAUNCH_REQUESTS_TOPIC": f"requests-{tag}",
        "RELAUNCH_REQUESTS_SUBSCRIPTION": f"requests-{tag}-ctl",
        "RELAUNCH_EVENTS_TOPIC": f"events-{tag}",
        "RELAUNCH_EVENTS_SUBSCRIPTION": f"events-{tag}-ctl",
        "RELAUNCH_ALERTS_TOPIC": f"alerts-{tag}",
        "RELAUNCH_DEAD_LETTER_TOPIC": f"dead-{tag}",
    }


@pytest.mark.slow
def test_status_page_in_chromium_shows_the_preemption_and_the_resumed_attempt(
    devstack, bucket, tmp_path, settings
):
    job_id = f"page-{uuid.uuid4().hex[:6]}"
    body = json.loads(
        request(job_id, bucket, args=["--steps", "60", "--every", "5", "--step-seconds", "0.1"])
    )
    body["displayName"] = HOSTILE_NAME
    controller = ControllerProcess(devstack.env(), tmp_path / "controller.log", **settings)
    try:
        controller.wait_ready("leader")
        topic = f"projects/{PROJECT}/topics/{settings['RELAUNCH_REQUESTS_TOPIC']}"
        pubsub_v1.PublisherClient().publish(topic, json.dumps(body).encode()).result(timeout=30)
        first = wait_for(
            lambda: (
                (d := controller.job(job_id)) and d["latestCheckpointStep"] and d["phase"] == "running" and d
            ),
            what="attempt 1 running with a checkpoint",
        )
        assert devstack.preempt(first["attempts"][0]["vertexJob"], grace_seconds=5)
        final = wait_for(
            lambda: (d := controller.job(job_id)) and d["phase"] == "succeeded" and d,
            timeout=120,
            what="job succeeded after the preemption",
        )
        assert final["attempt"] == 2 and final["preemptions"] == 1
        resumed_from = final["attempts"][1]["resumeFromStep"]

        base = f"http://127.0.0.1:{controller.port}"
        with Browser(tmp_path) as browser:
            browser.open(f"{base}/")
            table = browser.evaluate("document.getElementById('jobs').innerText")
            row = next(line for line in table.splitlines() if line.startswith(job_id))
            cells = row.split("\t")
            assert cells[2:6] == ["succeeded", "2", "1", "0"], cells  # phase, attempt, preemptions, failures
            assert cells[6] == "60" and cells[7].endswith("%")
            browser.open(f"{base}/jobs/{job_id}")
            lines = browser.evaluate("document.getElementById('attempts').innerText").splitlines()
            # One row per attempt ("N<tab>..."), each followed by the command that opens its logs.
            attempts = [line for line in lines if line.split("\t")[0].isdigit()]
            assert "preempted (" in attempts[0] and attempts[1].split("\t")[6] == str(resumed_from)
            assert "succeeded (" in attempts[1]
            assert f"relaunch logs {job_id} --attempt 2" in lines
            assert browser.evaluate("document.querySelectorAll('svg rect').length") >= 3
            timeline = browser.evaluate("document.getElementById('timeline').innerText")
            assert f"attempt 2 requested from checkpoint step {resumed_from}" in timeline
            # The hostile displayName is text, not markup: no script ran, no element was made.
            assert browser.evaluate("document.scripts.length") == 0
            assert browser.evaluate("document.title") == f"Job {job_id}"
            summary = browser.evaluate("document.getElementById('summary').innerText")
            assert "\\x1b[2J\\nSUCCEEDED \\u202egnp.exe <script>" in summary
            shot = browser.screenshot(tmp_path / "status-page.png")
        keep = os.environ.get("RELAUNCH_TEST_ARTIFACTS")
        if keep:  # where a person wants to look at the screenshot
            shutil.copy(shot, os.path.join(keep, "status-page.png"))
        assert shot.stat().st_size > 10_000
    finally:
        controller.stop()


def test_the_page_reloads_while_a_job_can_change_and_says_why_jobs_ended():
    live = _document("live", "live")
    ended = {
        **_document("ended", "ended"),
        "phase": "failed",
        "terminalReason": "user error: exit 1 (bad flag)",
    }
    app = _App([live, ended])
    _, index = status_page.render("/", app, now=200.0)
    assert "http-equiv='refresh'" in index
    assert "user error: exit 1 (bad flag)" in index  # the reason, in the list
    assert "attempt 1 preempted" in index  # and how the live job's last attempt ended
    _, live_page = status_page.render("/jobs/live", app, now=200.0)
    assert "http-equiv='refresh'" in live_page
    _, ended_page = status_page.render("/jobs/ended", _App([ended]), now=200.0)
    assert "http-equiv='refresh'" not in ended_page
    # What the page calls the job's duration is its duration, from request to end (or now).
    assert "job age" not in ended_page and "duration 50s (request to end)" in ended_page


def test_each_attempt_links_to_its_logs():
    _, html = status_page.render("/jobs/logs", _App([_document("logs", "n")]), now=200.0)
    assert "https://console.cloud.google.com/logs/query;query=" in html
    assert "customJobs" not in html.split("logs/query;query=")[1].split("'")[0]
    assert "resource.labels.job_id%3D%227%22" in html and "?project=p" in html
    assert "relaunch logs logs --attempt 1" in html
