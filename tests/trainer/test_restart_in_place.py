"""The real trainer restarted in place by Vertex (the same CustomJob run again, as Google documents
for a reclaimed Spot job): its chief records each run, the second run keeps what the first run's
exit records said, and resumes from the emergency checkpoint."""

import pytest
from google.cloud.aiplatform_v1 import JobState

from controller.adapters.runs import restarts_of
from devstack.vertex.testing import job_service_client, wait_until
from tests.trainer.test_vertex_launch import DONE, submit, vertex  # noqa: F401 (the fixture)
from trainer import storage

pytestmark = pytest.mark.slow


def test_a_restart_in_place_is_recorded_by_the_trainer_and_resumes_from_the_emergency_save(vertex, tmp_path):  # noqa: F811
    client = job_service_client(vertex.host_port)
    root = f"file://{tmp_path}/ckpt"
    job = submit(client, 1, root, {"RELAUNCH_TEST_HOLD_AT_STEP": "4"})
    vertex.wait_for_state(job.name, {JobState.JOB_STATE_RUNNING}, timeout=60)
    chief_log = vertex.replica_log(job.name)
    wait_until(
        lambda: chief_log.exists() and "test hook: holding for SIGTERM" in chief_log.read_text(),
        timeout=180,
        what="the chief to reach step 4",
    )
    assert vertex.restart_in_place(job.name, grace_seconds=30)
    ended = vertex.wait_for_state(job.name, DONE, timeout=300)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED

    vertex_id = job.name.rsplit("/", 1)[-1]
    first, second = storage.read_run_records(root, 1, vertex_id)
    assert (first.run, second.run) == (1, 2) and second.resume_step == 4
    assert second.previous_chief is not None and second.previous_chief.reason == "preempted"
    assert {r.replica for r in second.previous_replicas} == {"workerpool0-0", "workerpool1-0"}
    (restart,) = restarts_of([first, second])
    assert restart.counted_as == "preempted" and restart.lost_no_work
    assert restart.previous_ended_at is not None and restart.restarting_seconds > 0
