"""Simulated replicas (devstack.vertex.simulated), bulk-seeded history, the non-terminal state
filter with a read_mask, and the stand-ins' call counts: what the scale benchmarks stand on."""

from __future__ import annotations

import threading

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobState, ListCustomJobsRequest
from google.protobuf import field_mask_pb2

from devstack.vertex import start_vertex
from devstack.vertex.behaviour import VertexBehaviour
from devstack.vertex.simulated import Simulation
from devstack.vertex.testing import command_job, job_service_client, wait_until

PROJECT = "relaunch-dev"
REGION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
LIVE_FILTER = " AND ".join(f'state!="{state.name}"' for state in sorted(DONE))
# A command that cannot run: a simulated job must never try to start it.
NO_SUCH_COMMAND = ["/nonexistent/devstack-simulated-only"]


class Texts:
    """The textPayload of every log entry, per Vertex job id; waited on with a deadline."""

    def __init__(self) -> None:
        self._by_job: dict[str, list[str]] = {}
        self._changed = threading.Condition()

    def __call__(self, entry: dict) -> None:
        with self._changed:
            job_id = entry["resource"]["labels"]["job_id"]
            self._by_job.setdefault(job_id, []).append(entry["textPayload"])
            self._changed.notify_all()

    def of(self, name: str) -> list[str]:
        with self._changed:
            return list(self._by_job.get(name.rsplit("/", 1)[1], []))

    def wait_for(self, name: str, text: str, timeout: float = 30) -> list[str]:
        """The job's texts once ``text`` is among them (the sink is fed on its own thread)."""
        with self._changed:
            self._changed.wait_for(lambda: text in self.of(name), timeout)
        return self.of(name)


@pytest.fixture
def texts():
    return Texts()


@pytest.fixture
def vertex(tmp_path, texts):
    emulator = start_vertex(
        project=PROJECT,
        region=REGION,
        workdir=str(tmp_path / "vertex"),
        event_sink=texts,
        provisioning_seconds=0.01,
        kill_grace_seconds=1.0,
        behaviour=VertexBehaviour(failed_error_delay_seconds=0.0),
    )
    yield emulator
    emulator.stop()


@pytest.fixture
def client(vertex):
    return job_service_client(vertex.host_port)


def simulated_job(name: str, run_seconds: str, replicas: int = 2, **labels: str):
    env = {"DEVSTACK_SIMULATED_RUN_SECONDS": run_seconds}
    return command_job(name, [(1, NO_SUCH_COMMAND), (replicas - 1, NO_SUCH_COMMAND)], env=env, labels=labels)


def test_a_simulated_job_succeeds_after_its_run_time_with_the_real_lifecycle(vertex, client, texts):
    job = client.create_custom_job(parent=PARENT, custom_job=simulated_job("sim", "0.2"))

    ended = vertex.wait_for_state(job.name, DONE, timeout=30)

    assert ended.state == JobState.JOB_STATE_SUCCEEDED  # the command was never run
    assert ended.create_time <= ended.start_time <= ended.end_time
    assert vertex.replica_pids(job.name) == {}  # no process at all
    seen = texts.wait_for(job.name, "Job completed successfully.")
    assert "Job is running." in seen and seen[-1] == "Job completed successfully."


def test_a_simulated_job_is_reclaimed_restarted_in_place_and_cancelled_like_a_real_one(vertex, client):
    job = client.create_custom_job(parent=PARENT, custom_job=simulated_job("sim", "forever"))
    vertex.wait_for_state(job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)

    assert vertex.preempt(job.name, grace_seconds=5.0)
    # The reclaim restarts the gang in place (documented): a second generation of replicas.
    log = vertex.replica_log(job.name)
    wait_until(lambda: log.read_text().count("simulated replica") == 2, 30, "the in-place restart")
    assert client.get_custom_job(name=job.name).state == JobState.JOB_STATE_RUNNING
    client.cancel_custom_job(name=job.name)
    ended = vertex.wait_for_state(job.name, DONE, timeout=30)
    assert ended.state == JobState.JOB_STATE_CANCELLED


def test_a_reclaim_that_ends_the_job_fails_it_with_the_stockout_error(vertex, client):
    job = client.create_custom_job(parent=PARENT, custom_job=simulated_job("sim", "forever"))
    vertex.wait_for_state(job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)

    vertex.preempt(job.name, grace_seconds=0.0, end_job=True)

    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_FAILED
    assert "Resources are insufficient" in ended.error.message


def test_a_simulated_replica_runs_out_of_memory_like_a_real_one(vertex, client):
    job = client.create_custom_job(parent=PARENT, custom_job=simulated_job("sim", "forever"))
    vertex.wait_for_state(job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    wait_until(lambda: vertex.out_of_memory(job.name, "workerpool1-0"), 30, "the replica to run")

    ended = vertex.wait_for_error(job.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_FAILED
    assert ended.error.message == (
        "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137."
    )


def test_the_stack_wide_simulation_and_a_failing_exit_code(vertex, client):
    vertex.simulate(Simulation(run_seconds=0.0, exit_code=3))
    job = client.create_custom_job(parent=PARENT, custom_job=command_job("all", [(1, NO_SUCH_COMMAND)]))

    ended = vertex.wait_for_error(job.name, timeout=30)

    assert ended.state == JobState.JOB_STATE_FAILED
    assert "non-zero status of 3" in ended.error.message


def test_a_malformed_simulation_variable_is_refused_at_create(client):
    with pytest.raises(exceptions.InvalidArgument):
        client.create_custom_job(parent=PARENT, custom_job=simulated_job("bad", "soon"))


def test_listing_live_jobs_only_with_a_read_mask_skips_seeded_history(vertex, client):
    history = vertex.seed_finished([command_job(f"old-{i}", [(1, NO_SUCH_COMMAND)]) for i in range(50)])
    live = client.create_custom_job(parent=PARENT, custom_job=simulated_job("live", "forever"))
    vertex.wait_for_state(live.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    assert client.get_custom_job(name=history[0]).state == JobState.JOB_STATE_SUCCEEDED

    request = ListCustomJobsRequest(
        parent=PARENT,
        filter=LIVE_FILTER,
        read_mask=field_mask_pb2.FieldMask(paths=["name", "state", "labels"]),
    )
    listed = list(client.list_custom_jobs(request=request))

    assert [job.name for job in listed] == [live.name]
    assert listed[0].state == JobState.JOB_STATE_RUNNING
    assert "job_spec" not in listed[0] and "create_time" not in listed[0]  # masked away
    everything = list(client.list_custom_jobs(parent=PARENT))
    assert len(everything) == 51


@pytest.mark.parametrize(
    "paths",
    [
        ["name", "state", "labels", "create_time", "start_time", "end_time", "update_time", "error"],
        ["display_name", "job_spec.worker_pool_specs", "labels"],
    ],
    ids=["top-level fields", "a nested path"],
)
def test_a_masked_listing_holds_exactly_what_the_field_mask_keeps(vertex, client, paths):
    # The reference is protobuf's own FieldMask.MergeMessage on the whole job that Get returns.
    job = command_job(
        "masked", [(1, NO_SUCH_COMMAND), (2, NO_SUCH_COMMAND)], labels={"relaunch-job-id": "masked"}
    )
    finished = vertex.seed_finished([job], JobState.JOB_STATE_FAILED)
    mask = field_mask_pb2.FieldMask(paths=paths)
    request = ListCustomJobsRequest(parent=PARENT, filter='display_name="masked"', read_mask=mask)

    (listed,) = list(client.list_custom_jobs(request=request))

    whole = type(listed).pb(client.get_custom_job(name=finished[0]))
    expected = type(whole)()
    mask.MergeMessage(whole, expected)
    assert type(listed).pb(listed) == expected
    assert dict(listed.labels) == {"relaunch-job-id": "masked"}  # kept by both masks
    assert ("job_spec" in listed) == any(path.startswith("job_spec") for path in paths)


def test_an_invalid_read_mask_is_refused(client):
    request = ListCustomJobsRequest(
        parent=PARENT, read_mask=field_mask_pb2.FieldMask(paths=["no_such_field"])
    )
    with pytest.raises(exceptions.InvalidArgument):
        list(client.list_custom_jobs(request=request))


def test_seeding_refuses_a_state_that_has_not_ended(vertex):
    with pytest.raises(ValueError):
        vertex.seed_finished([command_job("x", [(1, NO_SUCH_COMMAND)])], JobState.JOB_STATE_RUNNING)


def test_every_rpc_is_counted_by_method(vertex, client):
    vertex.calls.reset()
    names = vertex.seed_finished([command_job("x", [(1, NO_SUCH_COMMAND)])])
    client.get_custom_job(name=names[0])
    list(client.list_custom_jobs(parent=PARENT))

    assert vertex.calls.counts() == {"GetCustomJob": 1, "ListCustomJobs": 1}
    assert ("GetCustomJob", names[0]) in vertex.calls.recent()
