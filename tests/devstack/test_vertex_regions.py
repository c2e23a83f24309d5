"""devstack with several regions: one Vertex stand-in per region, each its own endpoint, jobs,
capacity per machine type, stockouts and reclaim rate; the controller's Vertex adapter (the real
JobServiceClient) creates where it is told, and lists, reads and cancels across every region."""

from __future__ import annotations

import pytest
from google.cloud.aiplatform_v1 import JobState

from controller.adapters.vertex import VertexBackend, region_of
from controller.settings import Settings
from devstack.stack import DevStack
from devstack.vertex.behaviour import VertexBehaviour
from devstack.vertex.testing import command_job

A, B = "us-central1", "europe-west4"
GPU, OTHER = "a2-highgpu-1g", "g2-standard-8"
NO_SUCH_COMMAND = ["/nonexistent/devstack-simulated-only"]
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = DevStack(
        str(tmp_path_factory.mktemp("regions")),
        region=A,
        regions=(B,),
        provisioning_seconds=0.01,
        kill_grace_seconds=1.0,
        behaviour=VertexBehaviour(failed_error_delay_seconds=0.0, reclaim_grace_seconds=0.5),
    ).start()
    yield stack
    stack.stop()


@pytest.fixture
def vertex(stack):
    env = stack.env()
    settings = Settings(
        project=stack.project,
        region=A,
        regions=env["RELAUNCH_REGIONS"],
        vertex_endpoints=env["RELAUNCH_VERTEX_ENDPOINTS"],
    )
    return VertexBackend(settings)


def gang(name: str, replicas: int = 2, machine_type: str = GPU, strategy: str = "SPOT", **labels: str):
    pools = [(1, NO_SUCH_COMMAND), (replicas - 1, NO_SUCH_COMMAND)]
    job = command_job(
        name,
        pools,
        env={"DEVSTACK_SIMULATED_RUN_SECONDS": "forever"},
        strategy=strategy,
        labels={"managed-by": "relaunch", **labels},
    )
    for pool in job.job_spec.worker_pool_specs:
        pool.machine_spec.machine_type = machine_type
    return job


def test_each_region_has_its_own_endpoint_and_the_adapter_creates_lists_and_cancels_in_each(stack, vertex):
    env = stack.env()
    assert env["RELAUNCH_REGIONS"] == B
    endpoints = dict(pair.split("=") for pair in env["RELAUNCH_VERTEX_ENDPOINTS"].split(","))
    assert set(endpoints) == {A, B} and endpoints[A] != endpoints[B]

    made = {}
    for region in (A, B):
        submission = vertex.ensure_attempt(
            f"job-{region}", 1, lambda r=region: gang(f"in {r}"), create=True, region=region
        )
        made[region] = submission.job.name
        assert region_of(submission.job.name) == region
    listed = {job.name for job in vertex.list_live_managed()}
    assert set(made.values()) <= listed  # one listing covers every region
    for region, name in made.items():
        assert stack.vertices[region].wait_for_state(name, {JobState.JOB_STATE_RUNNING}, timeout=30)
        assert vertex.get(name).name == name  # read from its own region's endpoint
        vertex.cancel(name)
        stack.vertices[region].wait_for_state(name, DONE, timeout=30)
    # Ids are unique across regions: an event, which names the id alone, finds one job.
    ids = [name.rsplit("/", 1)[1] for name in made.values()]
    assert len(set(ids)) == 2


def test_a_stockout_in_one_region_leaves_the_other_running(stack, vertex):
    stack.capacity(0, GPU, "fail", region=A)
    try:
        refused = vertex.ensure_attempt("so-a", 1, lambda: gang("so-a"), create=True, region=A).job
        taken = vertex.ensure_attempt("so-b", 1, lambda: gang("so-b"), create=True, region=B).job
        ended = stack.vertices[A].wait_for_state(refused.name, DONE, timeout=30)
        assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8
        assert "Resources are insufficient in region: us-central1" in ended.error.message
        stack.vertices[B].wait_for_state(taken.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
        vertex.cancel(taken.name)
    finally:
        stack.capacity(None, None, region=A)


def test_capacity_is_per_machine_type_within_a_region(stack, vertex):
    stack.capacity(0, GPU, "fail", region=B)
    try:
        other = vertex.ensure_attempt(
            "mt-1", 1, lambda: gang("other", machine_type=OTHER), create=True, region=B
        )
        gpu = vertex.ensure_attempt("mt-2", 1, lambda: gang("gpu"), create=True, region=B)
        stack.vertices[B].wait_for_state(other.job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
        assert (
            stack.vertices[B].wait_for_state(gpu.job.name, DONE, timeout=30).state
            == JobState.JOB_STATE_FAILED
        )
        vertex.cancel(other.job.name)
    finally:
        stack.capacity(None, None, region=B)


def test_a_reclaim_rate_takes_spot_jobs_and_never_flex_start_ones(stack, vertex):
    spot = vertex.ensure_attempt("rr-1", 1, lambda: gang("spot"), create=True, region=B).job
    flex = vertex.ensure_attempt(
        "rr-2", 1, lambda: gang("flex", strategy="FLEX_START"), create=True, region=B
    ).job
    region = stack.vertices[B]
    region.wait_for_state(spot.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    region.wait_for_state(flex.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    stack.reclaim_rate(3600.0 * 5, seed=1, region=B)  # about one per job every 0.2 s
    try:
        region.configure(reclaim_ends_job=True)
        assert region.wait_for_state(spot.name, DONE, timeout=30).state == JobState.JOB_STATE_FAILED
        assert vertex.get(flex.name).state == JobState.JOB_STATE_RUNNING
    finally:
        stack.reclaim_rate(0.0, region=B)
        region.configure(reclaim_ends_job=False)
    vertex.cancel(flex.name)


def test_the_control_api_picks_the_region_and_refuses_one_it_does_not_have(stack, vertex):
    from devstack.control import ControlClient, ControlError

    control = ControlClient(stack.control.url)
    control.capacity(0, GPU, "fail", region=B)
    try:
        job = vertex.ensure_attempt("ctl-1", 1, lambda: gang("ctl"), create=True, region=B).job
        assert stack.vertices[B].wait_for_state(job.name, DONE, timeout=30).state == JobState.JOB_STATE_FAILED
        other = vertex.ensure_attempt("ctl-2", 1, lambda: gang("ctl"), create=True, region=A).job
        stack.vertices[A].wait_for_state(other.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
        vertex.cancel(other.name)
    finally:
        control.capacity(None, None, region=B)
    with pytest.raises(ControlError, match="not one of this devstack's"):
        control.reclaim_rate(1.0, region="asia-east1")
