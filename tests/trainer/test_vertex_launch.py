"""The trainer launched the way the controller launches it: a 2-pool CustomJob on the Vertex
stand-in (2 nodes x 2 processes), preempted, then resubmitted with RELAUNCH_RESUME_FROM."""

import pytest
from google.cloud.aiplatform_v1 import JobState

from devstack.vertex import start_vertex
from devstack.vertex.behaviour import VertexBehaviour
from devstack.vertex.testing import command_job, job_service_client, wait_until
from tests.support.gang import TINY
from trainer import layout, storage

pytestmark = pytest.mark.slow

PARENT = "projects/relaunch-dev/locations/us-central1"
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}


@pytest.fixture
def vertex(tmp_path):
    emulator = start_vertex(
        project="relaunch-dev",
        region="us-central1",
        workdir=str(tmp_path / "vertex"),
        provisioning_seconds=0.05,
        kill_grace_seconds=2.0,
        behaviour=VertexBehaviour(failed_error_delay_seconds=0.5),
    )
    yield emulator
    emulator.stop()


def submit(client, attempt: int, root: str, extra_env: dict):
    command = [
        "python",
        "-m",
        "trainer",
        "--steps",
        "8",
        "--checkpoint-every-steps",
        "3",
        "--nproc-per-node",
        "2",
        *TINY,
    ]
    env = {
        "RELAUNCH_JOB_ID": "vertex-gpt",
        "RELAUNCH_ATTEMPT": str(attempt),
        "RELAUNCH_CHECKPOINT_URI": root,
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        **extra_env,
    }
    job = command_job(
        f"vertex-gpt [attempt {attempt}]", [(1, command), (1, command)], env=env, timeout_seconds=300
    )
    return client.create_custom_job(parent=PARENT, custom_job=job)


def test_two_pool_job_is_preempted_then_resumes_from_its_emergency_checkpoint(vertex, tmp_path):
    client = job_service_client(vertex.host_port)
    root = f"file://{tmp_path}/ckpt"

    first = submit(client, 1, root, {"RELAUNCH_TEST_HOLD_AT_STEP": "4"})
    vertex.wait_for_state(first.name, {JobState.JOB_STATE_RUNNING}, timeout=60)
    chief_log = vertex.replica_log(first.name)
    wait_until(
        lambda: chief_log.exists() and "test hook: holding for SIGTERM" in chief_log.read_text(),
        timeout=180,
        what="the chief to reach step 4",
    )
    assert vertex.preempt(first.name, grace_seconds=30, end_job=True)  # no in-place restart here
    vertex.wait_for_state(first.name, DONE, timeout=120)
    ended = vertex.wait_for_error(first.name, timeout=60)
    assert ended.state == JobState.JOB_STATE_FAILED and ended.error.code == 8
    record = storage.read_exit_record(root, 1)
    assert (record.reason, record.exit_code, record.step, record.checkpoint_saved) == (
        "preempted",
        layout.EXIT_PREEMPTED_SAVED,
        4,
        True,
    )
    marker = storage.latest_committed(root)
    assert (marker.step, marker.world_size) == (4, 4)
    # Keyed by the CustomJob (CLOUD_ML_JOB_ID), and one record per replica, named as in CLUSTER_SPEC.
    vertex_id = first.name.rsplit("/", 1)[-1]
    assert storage.read_exit_record(root, 1, vertex_id) == record
    replicas = storage.read_replica_exits(root, 1, vertex_id)
    assert [(r.replica, r.reason, r.signal) for r in replicas] == [
        ("workerpool0-0", "preempted", "SIGTERM"),
        ("workerpool1-0", "preempted", "SIGTERM"),
    ]

    second = submit(client, 2, root, {"RELAUNCH_RESUME_FROM": layout.checkpoint_dir(root, marker.step)})
    ended = vertex.wait_for_state(second.name, DONE, timeout=300)
    chief_output = vertex.replica_log(second.name).read_text()
    assert ended.state == JobState.JOB_STATE_SUCCEEDED, chief_output[-3000:]
    assert '"message": "resumed"' in chief_output and '"from_step": 4' in chief_output
    done = storage.read_exit_record(root, 2)
    assert (done.reason, done.step, done.checkpoint_saved) == ("completed", 8, True)


def test_a_job_with_a_reduction_server_pool_trains_to_the_end(vertex, tmp_path):
    """Pool 2 runs a reduction server (here a stand-in process that serves until it is stopped):
    its hosts are in CLUSTER_SPEC but never run the trainer, so the gang is pools 0 and 1 only.
    Counting them as trainer nodes made such a job wait for ranks that never came (exit 69)."""
    client = job_service_client(vertex.host_port)
    root = f"file://{tmp_path}/ckpt"
    trainer = [
        "python",
        "-m",
        "trainer",
        "--steps",
        "4",
        "--nproc-per-node",
        "1",
        "--rendezvous-timeout",
        "60",
        *TINY,
    ]
    reduction_server = ["python", "-c", "import time\nwhile True: time.sleep(1)"]
    env = {
        "RELAUNCH_JOB_ID": "with-reduction-server",
        "RELAUNCH_CHECKPOINT_URI": root,
        "OMP_NUM_THREADS": "1",
    }
    job = command_job(
        "with-reduction-server",
        [(1, trainer), (1, trainer), (2, reduction_server)],
        env=env,
        timeout_seconds=300,
    )
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    ended = vertex.wait_for_state(created.name, DONE, timeout=300)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED, vertex.replica_log(created.name).read_text()[-3000:]
    done = storage.read_exit_record(root, 1)
    assert (done.reason, done.step, done.checkpoint_saved) == ("completed", 4, True)
    assert storage.latest_committed(root).world_size == 2  # two trainer nodes, one process each
