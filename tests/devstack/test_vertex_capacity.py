"""A stockout that leaves room for fewer replicas (`VertexEmulator.set_capacity`): a gang larger
than the free replicas waits (QUEUED, or PENDING: *unknown* which) or fails with the documented
stockout text, while a gang that fits runs. Driven through the real JobServiceClient."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1 import JobState

from devstack.vertex import start_vertex
from devstack.vertex.behaviour import VertexBehaviour
from devstack.vertex.testing import command_job, job_service_client

PROJECT = "relaunch-dev"
REGION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
NO_SUCH_COMMAND = ["/nonexistent/devstack-simulated-only"]
GPU = "a2-highgpu-1g"


@pytest.fixture
def vertex(tmp_path):
    emulator = start_vertex(
        project=PROJECT,
        region=REGION,
        workdir=str(tmp_path / "vertex"),
        provisioning_seconds=0.01,
        kill_grace_seconds=1.0,
        behaviour=VertexBehaviour(failed_error_delay_seconds=0.0),
    )
    yield emulator
    emulator.stop()


@pytest.fixture
def client(vertex):
    return job_service_client(vertex.host_port)


def gang(name: str, replicas: int, machine_type: str = GPU):
    """A simulated job of a chief and replicas - 1 workers that runs until cancelled."""
    pools = [(1, NO_SUCH_COMMAND)] + ([(replicas - 1, NO_SUCH_COMMAND)] if replicas > 1 else [])
    job = command_job(name, pools, env={"DEVSTACK_SIMULATED_RUN_SECONDS": "forever"})
    for pool in job.job_spec.worker_pool_specs:
        pool.machine_spec.machine_type = machine_type
    return job


def state_of(client, name: str) -> JobState:
    return client.get_custom_job(name=name).state


def test_a_gang_larger_than_the_free_replicas_stays_queued_while_one_that_fits_runs(vertex, client):
    vertex.set_capacity(2, GPU)
    big = client.create_custom_job(parent=PARENT, custom_job=gang("big", 4))
    small = client.create_custom_job(parent=PARENT, custom_job=gang("small", 2))

    vertex.wait_for_state(small.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    assert state_of(client, big.name) == JobState.JOB_STATE_QUEUED  # created first, still waiting

    # The small gang ends: 2 replicas free, the big one still does not fit.
    client.cancel_custom_job(name=small.name)
    vertex.wait_for_state(small.name, DONE, timeout=30)
    other = client.create_custom_job(parent=PARENT, custom_job=gang("other", 2))
    vertex.wait_for_state(other.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    assert state_of(client, big.name) == JobState.JOB_STATE_QUEUED

    # Capacity comes back: the big gang runs.
    vertex.set_capacity(6, GPU)
    vertex.wait_for_state(big.name, {JobState.JOB_STATE_RUNNING}, timeout=30)


def test_the_wait_can_show_pending_instead(vertex, client):
    vertex.configure(capacity_wait_state="PENDING")
    vertex.set_capacity(2)
    big = client.create_custom_job(parent=PARENT, custom_job=gang("big", 4))
    small = client.create_custom_job(parent=PARENT, custom_job=gang("small", 2))
    vertex.wait_for_state(small.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    vertex.wait_for_state(big.name, {JobState.JOB_STATE_PENDING}, timeout=30)
    assert state_of(client, big.name) == JobState.JOB_STATE_PENDING

    vertex.set_capacity(None)
    vertex.wait_for_state(big.name, {JobState.JOB_STATE_RUNNING}, timeout=30)


def test_in_fail_mode_a_gang_that_does_not_fit_ends_with_the_stockout_error(vertex, client):
    vertex.set_capacity(2, GPU, mode="fail")
    big = client.create_custom_job(parent=PARENT, custom_job=gang("big", 4))
    small = client.create_custom_job(parent=PARENT, custom_job=gang("small", 2))

    ended = vertex.wait_for_error(big.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8
    assert ended.error.message.startswith("Resources are insufficient in region: us-central1.")
    assert "start_time" not in ended or not ended.start_time  # it never ran
    vertex.wait_for_state(small.name, {JobState.JOB_STATE_RUNNING}, timeout=30)


def test_other_machine_types_are_not_limited(vertex, client):
    vertex.set_capacity(0, GPU)
    cpu = client.create_custom_job(parent=PARENT, custom_job=gang("cpu", 4, machine_type="n1-standard-4"))
    vertex.wait_for_state(cpu.name, {JobState.JOB_STATE_RUNNING}, timeout=30)


def test_a_bad_knob_value_is_refused(vertex):
    with pytest.raises(ValueError):
        vertex.set_capacity(2, mode="sometimes")
    with pytest.raises(ValueError):
        vertex.configure(capacity_wait_state="RUNNING")
