"""`relaunch controller` as a real process: Pub/Sub intake, crash safety, and the leader lease."""

from __future__ import annotations

import time

import pytest

from tests.support.daemon import publish as support_publish
from tests.support.daemon import vertex_jobs_for, wait_for
from tests.support.engine import PROJECT, request


def publish(body: bytes, topic: str = "relaunch-requests") -> None:
    support_publish(PROJECT, topic, body)


@pytest.mark.parametrize("crash_point", ["after-intent", "after-create"])
def test_a_controller_killed_mid_submission_leaves_exactly_one_vertex_job(
    devstack, bucket, tmp_path, settings, controllers, crash_point
):
    job_id = f"crash-{crash_point}"
    doomed = controllers(
        devstack.env(), tmp_path / "first.log", **settings, RELAUNCH_FAULT_CRASH_POINT=crash_point
    )
    doomed.wait_ready("leader")
    publish(request(job_id, bucket, args=["--steps", "3"]), settings["RELAUNCH_REQUESTS_TOPIC"])
    doomed.proc.wait(timeout=60)
    assert doomed.proc.returncode == -9, doomed.logs()[-2000:]
    doomed.stop()
    expected_before_restart = 0 if crash_point == "after-intent" else 1
    assert len(vertex_jobs_for(devstack, job_id)) == expected_before_restart

    survivor = controllers(devstack.env(), tmp_path / "second.log", **settings)
    survivor.wait_ready("leader")
    doc = wait_for(
        lambda: (d := survivor.job(job_id)) and d["phase"] == "succeeded" and d,
        what="job succeeded after restart",
    )
    assert doc["attempt"] == 1
    assert len(vertex_jobs_for(devstack, job_id, attempt=1)) == 1


def test_only_the_lease_holder_acts_and_the_standby_takes_over(
    devstack, bucket, tmp_path, settings, controllers
):
    settings = {
        **settings,
        "RELAUNCH_STATE_STORE": f"gs://{bucket}/controller-state",
        "RELAUNCH_LEASE_SECONDS": "3",
        "RELAUNCH_LEASE_RENEW_SECONDS": "0.5",
    }
    leader = controllers(devstack.env(), tmp_path / "a.log", **settings, RELAUNCH_CONTROLLER_ID="ctl-a")
    leader.wait_ready("leader")
    standby = controllers(devstack.env(), tmp_path / "b.log", **settings, RELAUNCH_CONTROLLER_ID="ctl-b")
    assert "standby" in standby.wait_ready("standby")
    publish(
        request("lease-1", bucket, args=["--steps", "600", "--step-seconds", "0.05"]),
        settings["RELAUNCH_REQUESTS_TOPIC"],
    )
    wait_for(lambda: vertex_jobs_for(devstack, "lease-1"), what="attempt 1 submitted")
    # The log line follows the create's reply: wait for it rather than race it.
    wait_for(lambda: "attempt submitted" in leader.logs(), what="the leader logged its submission")
    assert "attempt submitted" not in standby.logs()

    leader.kill()
    killed_at = time.monotonic()
    standby.wait_ready("leader", timeout=30)
    took_over_after = time.monotonic() - killed_at
    assert took_over_after < 3 + 1 + 2  # lease expiry + one reconcile period + slack

    # The new leader now owns the job: cancel it through Pub/Sub and watch it obey.
    publish(b'{"jobId": "lease-1", "action": "cancel"}', settings["RELAUNCH_REQUESTS_TOPIC"])
    wait_for(
        lambda: (d := standby.job("lease-1")) and d["phase"] == "cancelled" and d,
        what="cancelled by the new leader",
    )
    assert len(vertex_jobs_for(devstack, "lease-1")) == 1
