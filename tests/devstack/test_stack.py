"""The assembled devstack: the session fixture, its environment, the event wiring, the
control server, and `relaunch devstack` as a user runs it."""

from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1, storage
from google.cloud.aiplatform_v1 import JobState

from devstack.control import ControlClient, ControlError
from devstack.vertex.testing import command_job, job_service_client, wait_until

CONTRACT_ENV = {
    "PUBSUB_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "RELAUNCH_VERTEX_ENDPOINT",
    "RELAUNCH_DEVSTACK_CONTROL",
    "GOOGLE_CLOUD_PROJECT",
    "RELAUNCH_REGION",
}


def _parent() -> str:
    return f"projects/{os.environ['GOOGLE_CLOUD_PROJECT']}/locations/{os.environ['RELAUNCH_REGION']}"


def _pull_until(subscriber, subscription, predicate, timeout=60.0) -> list[dict]:
    """Pull JSON messages until one satisfies `predicate`; returns all seen, in order."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        if reply.received_messages:
            subscriber.acknowledge(
                subscription=subscription, ack_ids=[m.ack_id for m in reply.received_messages]
            )
        for received in reply.received_messages:
            seen.append(json.loads(received.message.data))
            if predicate(seen[-1]):
                return seen
    raise TimeoutError(f"no matching message in {timeout}s; saw {seen}")


def test_env_is_exactly_the_contract_and_is_set_for_the_session(devstack):
    env = devstack.env()
    assert set(env) == CONTRACT_ENV
    assert env["GOOGLE_CLOUD_PROJECT"] == "relaunch-dev"
    assert env["RELAUNCH_REGION"] == "us-central1"
    assert env["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
    assert env["RELAUNCH_DEVSTACK_CONTROL"].startswith("http://127.0.0.1:")
    assert env["PUBSUB_EMULATOR_HOST"].startswith("127.0.0.1:")
    assert env["RELAUNCH_VERTEX_ENDPOINT"].startswith("127.0.0.1:")
    assert {key: os.environ[key] for key in CONTRACT_ENV} == env


def test_bucket_and_publish_pull_with_nothing_but_the_printed_env(devstack):
    client = storage.Client()  # project and endpoint from the environment alone
    bucket = client.create_bucket(f"ckpt-{uuid.uuid4().hex[:8]}")
    bucket.blob("step-0000000010/COMMITTED.json").upload_from_string(b"{}", if_generation_match=0)
    assert [b.name for b in client.list_blobs(bucket)] == ["step-0000000010/COMMITTED.json"]

    project = os.environ["GOOGLE_CLOUD_PROJECT"]
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/requests-{uuid.uuid4().hex[:6]}").name
    subscription = subscriber.create_subscription(
        name=f"projects/{project}/subscriptions/intake-{uuid.uuid4().hex[:6]}", topic=topic
    ).name
    publisher.publish(topic, b'{"jobId": "demo"}', origin="test").result(timeout=30)
    seen = _pull_until(subscriber, subscription, lambda m: m.get("jobId") == "demo")
    assert seen == [{"jobId": "demo"}]


def test_job_transitions_are_published_as_log_entries(devstack):
    project = os.environ["GOOGLE_CLOUD_PROJECT"]
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.create_subscription(
        name=f"projects/{project}/subscriptions/hints-{uuid.uuid4().hex[:6]}",
        topic=f"projects/{project}/topics/vertex-job-events",
    ).name
    jobs = job_service_client(os.environ["RELAUNCH_VERTEX_ENDPOINT"])
    job = jobs.create_custom_job(
        parent=_parent(), custom_job=command_job("events", [(1, ["python", "-c", "print('done')"])])
    )
    job_id = job.name.rsplit("/", 1)[1]

    def is_end_of_this_job(entry):
        return (
            entry["resource"]["labels"]["job_id"] == job_id
            and entry["textPayload"] == "Job completed successfully."
        )

    entries = [
        e
        for e in _pull_until(subscriber, subscription, is_end_of_this_job)
        if e["resource"]["labels"]["job_id"] == job_id
    ]
    assert entries[-1]["logName"] == f"projects/{project}/logs/ml.googleapis.com%2F{job_id}"
    assert entries[-1]["resource"] == {
        "type": "ml_job",
        "labels": {"job_id": job_id, "project_id": project, "task_name": "service"},
    }
    assert len(entries) >= 2  # at least one transition before the end, delivered in order
    assert jobs.get_custom_job(name=job.name).state == JobState.JOB_STATE_SUCCEEDED


def test_control_server_preempts_and_injects_api_faults(devstack):
    control = ControlClient(os.environ["RELAUNCH_DEVSTACK_CONTROL"])
    jobs = job_service_client(os.environ["RELAUNCH_VERTEX_ENDPOINT"])
    job = jobs.create_custom_job(
        parent=_parent(),
        custom_job=command_job("spot", [(1, ["python", "-c", "import time; time.sleep(120)"])]),
    )
    devstack.vertex.wait_for_state(job.name, {JobState.JOB_STATE_RUNNING}, timeout=60)
    assert job.name in [j["name"] for j in control.status()["jobs"]]

    assert control.preempt(job.name, grace_seconds=1, end_job=True) is True
    devstack.vertex.wait_for_state(job.name, {JobState.JOB_STATE_FAILED}, timeout=60)
    ended = devstack.vertex.wait_for_error(job.name, timeout=60)
    assert ended.error.code == 8 and ended.error.message.startswith("Resources are insufficient in region")
    assert control.preempt(job.name) is False  # already over
    with pytest.raises(ControlError, match="unknown job"):
        control.preempt(f"{_parent()}/customJobs/999999")
    with pytest.raises(ControlError, match="not a google.rpc code name"):
        control.preempt(job.name, code="PREEMPTED")
    with pytest.raises(ControlError, match="unknown job"):
        control.out_of_memory(f"{_parent()}/customJobs/999999")

    control.quota_shortfall("reject")
    try:
        with pytest.raises(gexc.ResourceExhausted):
            jobs.create_custom_job(
                parent=_parent(), custom_job=command_job("over", [(1, ["python", "-c", "pass"])]), retry=None
            )
    finally:
        control.quota_shortfall(None)
    with pytest.raises(ControlError, match="unknown Vertex behaviour knob"):
        control.configure(no_such_knob=1)

    control.faults(1.0, ["UNAVAILABLE"], seed=1)
    try:
        with pytest.raises(gexc.ServiceUnavailable):
            jobs.get_custom_job(name=job.name, retry=None)
    finally:
        control.faults(0.0)
    assert jobs.get_custom_job(name=job.name, retry=None).state == JobState.JOB_STATE_FAILED

    control.stockout(fail=True)  # the control server's stockout used to pass a knob the emulator lacks
    try:
        starved = jobs.create_custom_job(
            parent=_parent(), custom_job=command_job("starved", [(1, ["python", "-c", "pass"])])
        )
        ended = devstack.vertex.wait_for_error(starved.name, timeout=120)
        assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8
        assert not ended.start_time  # it never ran
    finally:
        control.stockout()

    # The capacity knob over HTTP: a bad mode is refused with its reason, a good one takes effect.
    with pytest.raises(ControlError, match="capacity mode must be one of"):
        control.capacity(2, mode="sometimes")
    control.capacity(0, "control-test-machine", mode="fail")
    try:
        job = command_job("no-room", [(1, ["python", "-c", "pass"])])
        job.job_spec.worker_pool_specs[0].machine_spec.machine_type = "control-test-machine"
        starved = jobs.create_custom_job(parent=_parent(), custom_job=job)
        ended = devstack.vertex.wait_for_error(starved.name, timeout=120)
        assert ended.error.code == 8 and "Resources are insufficient" in ended.error.message
    finally:
        control.capacity(None)


def _exports(stdout: str) -> dict[str, str]:
    env = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        key, _, value = words[1].partition("=")
        env[key] = value
    return env


def _devstack_processes(state: Path) -> list[int]:
    """Live (non-zombie) processes whose command line names the state directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            state_letter = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(state) in cmdline and state_letter != "Z":
            found.append(int(proc.name))
    return found


def test_relaunch_devstack_up_env_down_in_the_background(tmp_path, relaunch, monkeypatch):
    state = tmp_path / "ds"
    up = relaunch("devstack", "up", "--dir", str(state))
    assert up.returncode == 0, up.stderr
    env = _exports(up.stdout)
    # The CLI adds where the devstack lives, so each shell finds its own config layer.
    assert set(env) == CONTRACT_ENV | {"RELAUNCH_DEVSTACK_DIR"}
    assert Path(env["RELAUNCH_DEVSTACK_DIR"]).resolve() == state.resolve()
    try:
        again = relaunch("devstack", "env", "--dir", str(state))
        assert again.returncode == 0 and _exports(again.stdout) == env
        assert relaunch("devstack", "up", "--dir", str(state)).stdout == up.stdout  # idempotent
        assert len(_devstack_processes(state)) == 1

        # The printed environment is all a client needs.
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        bucket = storage.Client().create_bucket("from-the-cli")
        bucket.blob("x").upload_from_string(b"x")
        assert bucket.blob("x").download_as_bytes() == b"x"

        missing = relaunch("devstack", "preempt", f"{_parent()}/customJobs/424242", "--dir", str(state))
        assert missing.returncode == 1 and "unknown job" in missing.stderr
        faults = relaunch("devstack", "faults", "--rate", "0", "--codes", "UNAVAILABLE", "--dir", str(state))
        assert faults.returncode == 0, faults.stderr
    finally:
        down = relaunch("devstack", "down", "--dir", str(state))
    assert down.returncode == 0, down.stderr
    wait_until(lambda: not _devstack_processes(state), timeout=30, what="devstack processes to exit")
    assert not (state / "env.json").exists() and not (state / "devstack.pid").exists()
    after = relaunch("devstack", "env", "--dir", str(state))
    assert after.returncode == 1 and "no devstack running" in after.stderr


@pytest.mark.parametrize(
    "verb", ["up", "env", "down", "status", "preempt", "oom", "stockout", "capacity", "faults"]
)
def test_every_devstack_verb_explains_itself_with_an_example(relaunch, verb):
    shown = relaunch("devstack", verb, "--help", timeout=60)
    assert shown.returncode == 0
    assert "example:" in shown.stdout and f"relaunch devstack {verb}" in shown.stdout


def test_control_server_seeds_history_simulates_replicas_and_counts_calls(devstack, tmp_path):
    control = ControlClient(os.environ["RELAUNCH_DEVSTACK_CONTROL"])
    jobs = job_service_client(os.environ["RELAUNCH_VERTEX_ENDPOINT"])
    tag = uuid.uuid4().hex[:8]
    history = [
        json.loads(type(job).to_json(job))
        for job in (command_job(f"old-{i}", [(1, ["/nonexistent"])], labels={"seed": tag}) for i in range(3))
    ]
    names = control.seed_finished(history, state="JOB_STATE_FAILED")
    assert [jobs.get_custom_job(name=n).state for n in names] == [JobState.JOB_STATE_FAILED] * 3

    control.simulate(run_seconds=0.0)
    try:
        job = jobs.create_custom_job(
            parent=_parent(), custom_job=command_job("sim", [(1, ["/nonexistent"])], labels={"seed": tag})
        )
    finally:
        control.simulate(enabled=False)
    assert devstack.vertex.wait_for_state(job.name, {JobState.JOB_STATE_SUCCEEDED}, timeout=60)

    control.calls(reset=True)
    listed = list(jobs.list_custom_jobs(request={"parent": _parent(), "filter": f"labels.seed={tag}"}))
    client = storage.Client()
    bucket = client.bucket(f"calls-{tag}")
    client.create_bucket(bucket)
    list(client.list_blobs(bucket, prefix="x/"))
    counts = control.calls()
    assert len(listed) == 4
    assert counts["vertex"] == {"ListCustomJobs": 1}
    assert counts["gcs"].get("GET list") == 1


def test_preempt_help_states_the_defaults_devstack_uses(relaunch):
    from google.rpc import code_pb2

    from devstack.vertex.behaviour import VertexBehaviour

    shown = relaunch("devstack", "preempt", "--help", timeout=60).stdout
    defaults = VertexBehaviour()
    assert f"default {defaults.reclaim_grace_seconds:g}," in shown
    assert f"code {defaults.reclaim_error_code} ({code_pb2.Code.Name(defaults.reclaim_error_code)})" in shown
    assert f"up to {defaults.reclaim_restarts} times" in shown
    # Relaunch's jobs set disableRetries; what devstack then does by default is said as it is.
    assert defaults.disable_retries_stops_reclaim_restarts
    assert "sets disableRetries, which devstack assumes stops those restarts" in shown
    assert f"({defaults.failed_error_delay_seconds:g} s)" in shown
