"""The promises under faults (issue 11), each with real controller processes against devstack.

One leader that really stops, one CustomJob per attempt, no lost cancel, outages survived, push
deliveries to a standby recorded.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter

import pytest
import requests
from google.cloud import pubsub_v1

from tests.support.daemon import cancel_vertex_jobs, publish, vertex_jobs_for, wait_for
from tests.support.engine import PROJECT, request

LONG = ["--steps", "100000", "--step-seconds", "0.05"]  # runs until cancelled


def gcs_settings(settings: dict, bucket: str, **extra: str) -> dict:
    return {
        **settings,
        "RELAUNCH_STATE_STORE": f"gs://{bucket}/controller-state",
        "RELAUNCH_LEASE_SECONDS": "3",
        "RELAUNCH_LEASE_RENEW_SECONDS": "0.5",
        **extra,
    }


def created_after(lines: list[dict], message: str) -> int:
    return sum(1 for line in lines if line.get("message") == message)


def test_create_quota_and_a_leader_paused_past_its_lease_never_make_a_second_custom_job(
    devstack, bucket, tmp_path, settings, controllers
):
    """Finding 1. With 2 creates a minute and 5 jobs, the leader used to wait for quota *between*
    its look-up and CreateCustomJob, not renewing its lease meanwhile: the standby took over and
    created the same attempts, and a minute later the old leader created them again. Here the
    leader is also frozen (SIGSTOP) past its lease while it waits, and thawed after the takeover:
    it must not make one more Vertex call."""
    config = gcs_settings(settings, bucket, RELAUNCH_CREATES_PER_MINUTE="2")
    # Ids of this run only: the session's devstack still lists CustomJobs that earlier tests
    # made for jobs of the same name (test_engine_devstack's "quota-1"), which the count below
    # would take for a second CustomJob of one attempt.
    run = uuid.uuid4().hex[:6]
    jobs = [f"quota-{run}-{i}" for i in range(5)]
    first = controllers(devstack.env(), tmp_path / "a.log", **config, RELAUNCH_CONTROLLER_ID="ctl-a")
    first.wait_ready("leader")
    second = controllers(devstack.env(), tmp_path / "b.log", **config, RELAUNCH_CONTROLLER_ID="ctl-b")
    second.wait_ready("standby")
    try:
        for job_id in jobs:
            publish(PROJECT, config["RELAUNCH_REQUESTS_TOPIC"], request(job_id, bucket, args=LONG))
        wait_for(
            lambda: sum(bool(vertex_jobs_for(devstack, j)) for j in jobs) >= 2,
            what="the leader's create quota used up",
        )
        first.pause()
        second.wait_ready("leader", timeout=60)
        lines_at_thaw = len(first.log_lines())
        first.resume()

        # The old leader's quota window turns over a minute after its first create; until then
        # it could not have created anything more. Wait until some CustomJob is that late.
        def ours():
            return [j for j in devstack.vertex.jobs() if j.labels.get("relaunch-job") in jobs]

        earliest = min(j.create_time.timestamp() for j in ours())
        wait_for(
            lambda: any(j.create_time.timestamp() >= earliest + 60 for j in ours()),
            timeout=150,
            what="a create after the first quota window",
        )
        per_attempt = Counter((j.labels["relaunch-job"], j.labels["relaunch-attempt"]) for j in ours())
        assert per_attempt and set(per_attempt.values()) == {1}, per_attempt
        late = [
            line for line in first.log_lines()[lines_at_thaw:] if line.get("message") == "vertex job created"
        ]
        assert late == [], "the deposed leader created a CustomJob after the takeover"
        # Nobody cancelled anything either: every job's one CustomJob still runs.
        assert all(not j.state.name.endswith(("CANCELLING", "CANCELLED")) for j in ours()), ours()
        first.wait_ready("standby", timeout=30)
    finally:
        cancel_vertex_jobs(devstack, set(jobs))


def test_a_cancel_that_arrives_before_its_request_is_honoured(
    devstack, bucket, tmp_path, settings, controllers
):
    """Finding 3: a cancel handled before its job's record existed was rejected and acked (lost)."""
    controller = controllers(devstack.env(), tmp_path / "c.log", **settings)
    controller.wait_ready("leader")
    topic = settings["RELAUNCH_REQUESTS_TOPIC"]
    publish(PROJECT, topic, b'{"jobId": "early-cancel", "action": "cancel"}')
    wait_for(
        lambda: any(
            line.get("message") == "request handled" and line.get("job_id") == "early-cancel"
            for line in controller.log_lines()
        ),
        what="the cancel handled",
    )
    publish(PROJECT, topic, request("early-cancel", bucket, args=["--steps", "3"]))
    doc = wait_for(lambda: (d := controller.job("early-cancel")) and d["phase"] != "accepted" and d)
    assert doc["phase"] == "cancelled", doc
    assert vertex_jobs_for(devstack, "early-cancel") == []


def test_cancels_racing_their_requests_are_all_honoured(devstack, bucket, tmp_path, settings, controllers):
    controller = controllers(devstack.env(), tmp_path / "c.log", **settings)
    controller.wait_ready("leader")
    topic = settings["RELAUNCH_REQUESTS_TOPIC"]
    jobs = [f"race-{i}" for i in range(4)]
    publisher = pubsub_v1.PublisherClient()
    futures = []
    for i, job_id in enumerate(jobs):  # half the cancels first, half the requests first
        cancel = json.dumps({"jobId": job_id, "action": "cancel"}).encode()
        bodies = [cancel, request(job_id, bucket, args=LONG)]
        for body in bodies if i % 2 else reversed(bodies):
            futures.append(publisher.publish(f"projects/{PROJECT}/topics/{topic}", body))
    for future in futures:
        future.result(timeout=30)
    try:
        for job_id in jobs:
            doc = wait_for(
                lambda job_id=job_id: (
                    (d := controller.job(job_id)) and d["phase"] in ("cancelled", "failed", "succeeded") and d
                ),
                what=f"{job_id} terminal",
            )
            assert doc["phase"] == "cancelled", doc
        wait_for(
            lambda: all(
                j.state.name.endswith(("CANCELLED", "FAILED", "SUCCEEDED"))
                for j in devstack.vertex.jobs()
                if j.labels.get("relaunch-job") in jobs
            ),
            what="every CustomJob of the cancelled jobs ended",
        )
    finally:
        cancel_vertex_jobs(devstack, set(jobs))


@pytest.fixture
def gcs_outage(devstack):
    """Turn devstack's GCS off (every request 503) and, whatever happens, on again."""
    yield lambda down: devstack.gcs_faults(outage=down)
    devstack.gcs_faults(outage=False)


def read_alert_states(subscriber, subscription: str) -> list[tuple[str, str]]:
    seen = []
    while True:
        response = subscriber.pull(subscription=subscription, max_messages=50, timeout=5)
        if not response.received_messages:
            return seen
        subscriber.acknowledge(
            subscription=subscription, ack_ids=[r.ack_id for r in response.received_messages]
        )
        for received in response.received_messages:
            alert = json.loads(received.message.data)
            seen.append((alert["kind"], alert["state"]))


def test_a_gcs_outage_leaves_every_controller_up_standing_by_and_degraded_once(
    devstack, bucket, tmp_path, settings, controllers, gcs_outage
):
    """Finding 4: lease errors escaped the loop and every controller exited 1 (a crash loop)."""
    config = gcs_settings(
        settings, bucket, RELAUNCH_LEASE_SECONDS="2", RELAUNCH_DEGRADED_AFTER_FAILED_PASSES="2"
    )
    a = controllers(devstack.env(), tmp_path / "a.log", **config, RELAUNCH_CONTROLLER_ID="ctl-a")
    a.wait_ready("leader")
    b = controllers(devstack.env(), tmp_path / "b.log", **config, RELAUNCH_CONTROLLER_ID="ctl-b")
    b.wait_ready("standby")
    subscriber = pubsub_v1.SubscriberClient()
    alerts = f"projects/{PROJECT}/subscriptions/alerts-{config['RELAUNCH_ALERTS_TOPIC']}-test"
    subscriber.create_subscription(
        name=alerts, topic=f"projects/{PROJECT}/topics/{config['RELAUNCH_ALERTS_TOPIC']}"
    )

    gcs_outage(True)
    for controller in (a, b):
        wait_for(
            lambda c=controller: c.proc.poll() is not None or "degraded" in c.ready()[1],
            timeout=180,  # the lease's own GCS retries run out first; slow on a loaded machine
            what="not ready while GCS is down",
        )

    # Several failed tries each, lease periods apart: the old code exited on the first.
    def tried_three_times(c):
        failures = sum(
            1 for line in c.log_lines() if line.get("message") == "cannot reach the leader lease; standing by"
        )
        return c.proc.poll() is not None or failures >= 3

    wait_for(
        lambda: all(tried_three_times(c) for c in (a, b)), timeout=180, what="three failed lease tries each"
    )
    assert a.proc.poll() is None and b.proc.poll() is None, "a controller exited during the outage"
    # A request published now cannot be recorded yet; it must not be lost either.
    publish(PROJECT, config["RELAUNCH_REQUESTS_TOPIC"], request("in-outage", bucket, args=["--steps", "3"]))
    gcs_outage(False)

    wait_for(lambda: any("leader" in c.ready()[1] for c in (a, b)), timeout=180, what="a leader again")
    for controller in (a, b):
        controller.wait_ready(timeout=180)
    assert a.proc.poll() is None and b.proc.poll() is None
    wait_for(
        lambda: any((d := c.job("in-outage")) and d["phase"] == "succeeded" for c in (a, b)),
        what="the request published during the outage ran",
    )
    states = read_alert_states(subscriber, alerts)
    degraded = [state for kind, state in states if kind == "controller_degraded"]
    # Each instance pages once and resolves once; nobody pages again for the same outage.
    assert degraded.count("firing") <= 2 and degraded.count("firing") >= 1, states
    assert degraded.count("resolved") == degraded.count("firing"), states


def test_a_push_delivery_to_a_standby_is_recorded(devstack, bucket, tmp_path, settings, controllers):
    """Finding 5: a push to a standby answered 500 (its intake needed the lease's fence) until
    Pub/Sub dead-lettered it: the request was lost."""
    audience = "https://relaunch-controller.example.run.app"
    pusher = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"
    config = gcs_settings(
        settings,
        bucket,
        RELAUNCH_PUSH_AUDIENCE=audience,
        RELAUNCH_PUSH_SERVICE_ACCOUNT=pusher,
        RELAUNCH_PUSH_CERTS_URL=devstack.pubsub.certs_url,
    )
    leader = controllers(devstack.env(), tmp_path / "a.log", **config, RELAUNCH_CONTROLLER_ID="ctl-a")
    leader.wait_ready("leader")
    standby = controllers(devstack.env(), tmp_path / "b.log", **config, RELAUNCH_CONTROLLER_ID="ctl-b")
    standby.wait_ready("standby")
    envelope = {
        "message": {
            "data": base64.b64encode(request("pushed", bucket, args=["--steps", "3"])).decode(),
            "attributes": {},
            "messageId": "41",
            "publishTime": "2026-11-23T12:00:00.000Z",
        },
        "subscription": f"projects/{PROJECT}/subscriptions/requests-push",
    }
    token = devstack.pubsub.mint_token(audience, pusher)
    reply = requests.post(
        f"http://127.0.0.1:{standby.port}/pubsub/push",
        data=json.dumps(envelope).encode(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert reply.status_code == 204, reply.text
    doc = wait_for(
        lambda: (d := leader.job("pushed")) and d["phase"] == "succeeded" and d, what="the leader ran it"
    )
    assert doc["attempt"] == 1
    assert len(vertex_jobs_for(devstack, "pushed")) == 1
