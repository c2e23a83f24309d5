"""The conformance run says when it did not happen: an inner pytest session (pytester) with the
`pubsub_backend` plugin, where Google's emulator cannot or may not run, reports NOT RUN with the
reason, runs the devstack param only, and still refuses a devstack-only mark with no reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

INNER_TESTS = """
import pytest
from google.cloud import pubsub_v1


def test_publishes(pubsub_backend):
    topic = f"projects/{pubsub_backend.project}/topics/inner-topic"
    client = pubsub_v1.PublisherClient()
    client.create_topic(name=topic)
    assert client.publish(topic, b"x").result(timeout=10)


@pytest.mark.pubsub_devstack_only("a devstack-only feature")
def test_devstack_only(pubsub_backend):
    assert pubsub_backend.devstack is not None
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)

    def run(source: str = INNER_TESTS):
        pytester.makepyfile(test_inner=source)
        return pytester.runpytest_subprocess(
            "-p", "tests.support.pubsub_backends", "-v", "-p", "no:cacheprovider"
        )

    return run


def test_skip_variable_reports_not_run_and_runs_devstack_only(inner, monkeypatch):
    monkeypatch.setenv("RELAUNCH_SKIP_OFFICIAL_PUBSUB", "1")
    result = inner()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_publishes?devstack? PASSED*",
            "*test_devstack_only?devstack-only? PASSED*",
            "Pub/Sub conformance against Google's emulator: NOT RUN (RELAUNCH_SKIP_OFFICIAL_PUBSUB=1)",
        ]
    )
    assert "official" not in result.stdout.str()


def test_a_machine_without_gcloud_reports_not_run(inner, monkeypatch, tmp_path):
    no_gcloud = tmp_path / "bin"
    no_gcloud.mkdir()
    monkeypatch.setenv("PATH", str(no_gcloud))
    monkeypatch.delenv("RELAUNCH_SKIP_OFFICIAL_PUBSUB", raising=False)
    result = inner()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["Pub/Sub conformance against Google's emulator: NOT RUN (gcloud not found on PATH)"]
    )


def test_a_devstack_only_mark_without_a_reason_is_refused(inner, monkeypatch):
    monkeypatch.setenv("RELAUNCH_SKIP_OFFICIAL_PUBSUB", "1")
    result = inner(
        """
import pytest

@pytest.mark.pubsub_devstack_only()
def test_unexplained(pubsub_backend):
    pass
"""
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*pubsub_devstack_only needs a reason*"])
