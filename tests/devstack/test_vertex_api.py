"""JobService RPC behaviour of the Vertex stand-in, through the real JobServiceClient."""

from __future__ import annotations

import uuid

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobState, ListCustomJobsRequest

from devstack.vertex import start_vertex
from devstack.vertex.testing import command_job, job_service_client

PROJECT = "relaunch-dev"
REGION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
QUICK = ["python", "-c", "pass"]
TERMINAL = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}


@pytest.fixture(scope="module")
def vertex(tmp_path_factory):
    emulator = start_vertex(
        project=PROJECT,
        region=REGION,
        workdir=str(tmp_path_factory.mktemp("vertex-api")),
        provisioning_seconds=0.05,
        kill_grace_seconds=1.0,
    )
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def client(vertex):
    return job_service_client(vertex.host_port)


@pytest.fixture
def held_in_queue(vertex):
    """Jobs created under this fixture stay QUEUED (no processes), and are cancelled after."""
    vertex.set_stockout(queue_seconds=600)
    yield
    vertex.set_stockout()


def _list_names(client, filter_text: str, page_size: int = 0) -> list[str]:
    request = ListCustomJobsRequest(parent=PARENT, filter=filter_text, page_size=page_size)
    return [job.name for job in client.list_custom_jobs(request=request)]


def test_create_assigns_name_and_queued_state_and_get_returns_it(vertex, client, held_in_queue):
    created = client.create_custom_job(parent=PARENT, custom_job=command_job("create-me", [(1, QUICK)]))

    assert created.name.startswith(f"{PARENT}/customJobs/")
    assert created.name.rsplit("/", 1)[1].isdigit()
    assert created.state == JobState.JOB_STATE_QUEUED
    assert created.create_time.year >= 2024
    fetched = client.get_custom_job(name=created.name)
    assert fetched.name == created.name
    assert fetched.display_name == "create-me"
    assert fetched.state == JobState.JOB_STATE_QUEUED
    assert list(fetched.job_spec.worker_pool_specs[0].container_spec.command) == QUICK
    client.cancel_custom_job(name=created.name)


def test_list_filters_on_labels_state_and_display_name_with_paging(vertex, client, held_in_queue):
    run = f"r{uuid.uuid4().hex[:10]}"
    teams = ["a", "a", "b", "a", "b"]
    names = [
        client.create_custom_job(
            parent=PARENT,
            custom_job=command_job(f"{run}-{i}", [(1, QUICK)], labels={"run": run, "team": team}),
        ).name
        for i, team in enumerate(teams)
    ]
    team_a = {name for name, team in zip(names, teams) if team == "a"}

    pages = list(
        client.list_custom_jobs(
            request=ListCustomJobsRequest(
                parent=PARENT, filter=f"labels.run={run} AND labels.team=a", page_size=2
            )
        ).pages
    )
    assert [len(page.custom_jobs) for page in pages] == [2, 1]
    assert {job.name for page in pages for job in page.custom_jobs} == team_a

    assert set(_list_names(client, f'labels.run="{run}" AND labels.team:*', page_size=1)) == set(names)
    # Quoted values (what the controller sends) select what bare ones do.
    assert set(_list_names(client, f'labels.run="{run}" AND labels.team="a"')) == team_a
    assert set(_list_names(client, f"labels.run={run} AND state=JOB_STATE_QUEUED")) == set(names)
    assert _list_names(client, f'labels.run={run} AND state="JOB_STATE_RUNNING"') == []
    assert _list_names(client, f'display_name="{run}-3"') == [names[3]]
    assert _list_names(client, f"labels.run={run} AND labels.nothere:*") == []

    for name in names:
        client.cancel_custom_job(name=name)
    cancelled = set(_list_names(client, f'labels.run={run} AND state="JOB_STATE_CANCELLED"'))
    cancelling = set(_list_names(client, f"labels.run={run} AND state=JOB_STATE_CANCELLING"))
    assert cancelled | cancelling == set(names)


@pytest.mark.parametrize(
    "bad_filter", ["labels.a=b OR labels.c=d", "color=red", "state=NOT_A_STATE", "labels.a="]
)
def test_list_rejects_a_filter_it_cannot_parse(client, bad_filter):
    with pytest.raises(exceptions.InvalidArgument):
        _list_names(client, bad_filter)


def test_create_rejects_a_job_without_a_primary_pool(client):
    job = command_job("no-pools", [])
    with pytest.raises(exceptions.InvalidArgument, match="worker_pool_specs"):
        client.create_custom_job(parent=PARENT, custom_job=job)

    two_primaries = command_job("two-primaries", [(2, QUICK)])
    with pytest.raises(exceptions.InvalidArgument, match="replica_count"):
        client.create_custom_job(parent=PARENT, custom_job=two_primaries)


def test_get_of_an_unknown_job_is_not_found(client):
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=f"{PARENT}/customJobs/12345")


def test_methods_outside_the_subset_are_unimplemented(client):
    with pytest.raises(exceptions.MethodNotImplemented):
        client.get_hyperparameter_tuning_job(name=f"{PARENT}/hyperparameterTuningJobs/1")


def test_delete_of_a_finished_job_returns_a_done_operation_and_removes_it(vertex, client):
    job = client.create_custom_job(parent=PARENT, custom_job=command_job("to-delete", [(1, QUICK)]))
    vertex.wait_for_state(job.name, TERMINAL, timeout=60)

    operation = client.delete_custom_job(name=job.name)
    operation.result(timeout=10)

    assert operation.done()
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=job.name)


def test_injected_faults_reach_the_client_as_api_core_exceptions(vertex, client):
    try:
        vertex.set_api_faults(1.0, ["UNAVAILABLE"])
        with pytest.raises(exceptions.ServiceUnavailable):
            client.list_custom_jobs(request=ListCustomJobsRequest(parent=PARENT))
        vertex.set_api_faults(1.0, ["DEADLINE_EXCEEDED"])
        with pytest.raises(exceptions.DeadlineExceeded):
            client.get_custom_job(name=f"{PARENT}/customJobs/1")

        vertex.set_api_faults(0.5, ["UNAVAILABLE"], seed=7)
        outcomes = []
        for _ in range(40):
            try:
                client.list_custom_jobs(request=ListCustomJobsRequest(parent=PARENT, page_size=1))
                outcomes.append("served")
            except exceptions.ServiceUnavailable:
                outcomes.append("fault")
        assert 5 < outcomes.count("fault") < 35
    finally:
        vertex.set_api_faults(0)
    client.list_custom_jobs(request=ListCustomJobsRequest(parent=PARENT, page_size=1))


def test_quota_answers_resource_exhausted_past_the_per_minute_limit(vertex, client, held_in_queue):
    try:
        vertex.set_quota(True, creates_per_minute=2, other_per_minute=3)
        created = [
            client.create_custom_job(parent=PARENT, custom_job=command_job(f"quota-{i}", [(1, QUICK)]))
            for i in range(2)
        ]
        with pytest.raises(exceptions.ResourceExhausted, match="Quota exceeded"):
            client.create_custom_job(parent=PARENT, custom_job=command_job("quota-2", [(1, QUICK)]))
        for _ in range(3):
            client.get_custom_job(name=created[0].name)
        with pytest.raises(exceptions.ResourceExhausted):
            client.get_custom_job(name=created[0].name)
    finally:
        vertex.set_quota(False)
    for job in created:
        client.cancel_custom_job(name=job.name)


def test_module_entry_point_serves_until_sigterm(tmp_path):
    import signal
    import subprocess
    import sys

    server = subprocess.Popen(
        [sys.executable, "-m", "devstack.vertex", "--port", "0", "--workdir", str(tmp_path)]
        + ["--project", PROJECT, "--region", REGION],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline().strip()  # blocks until the server prints its endpoint
        assert line.startswith("RELAUNCH_VERTEX_ENDPOINT=127.0.0.1:")
        cli_client = job_service_client(line.split("=", 1)[1])
        assert list(cli_client.list_custom_jobs(request=ListCustomJobsRequest(parent=PARENT))) == []
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
