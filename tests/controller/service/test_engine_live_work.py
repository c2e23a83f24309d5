"""A reconcile pass costs what the live work costs: finished jobs are not read (from the state
store or from GCS), yet a finished job's CustomJob that still runs is found; hints for Vertex jobs
that no live job recorded cost no Get. Calls are counted at devstack's side (devstack.calls)."""

from __future__ import annotations

import json
import random
import threading

from google.cloud import aiplatform_v1

from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.pubsub import TopicPublisher
from controller.adapters.vertex import VertexBackend, job_labels
from controller.request.labels import labels_for
from controller.service.alerts import AlertSink
from controller.service.reconciler import Dependencies
from controller.settings import Settings
from controller.store.gcs import GcsStateStore
from controller.store.keys import JOBS_PREFIX
from devstack.vertex.testing import command_job, job_service_client
from tests.support.engine import PROJECT, REGION, LocalController, accept, drive, request, terminal

PARENT = f"projects/{PROJECT}/locations/{REGION}"
LIVE = {aiplatform_v1.JobState.JOB_STATE_RUNNING}
ENDED = {
    aiplatform_v1.JobState.JOB_STATE_CANCELLED,
    aiplatform_v1.JobState.JOB_STATE_SUCCEEDED,
    aiplatform_v1.JobState.JOB_STATE_FAILED,
}


def gcs_store_engine(devstack, bucket: str, alerts_topic, **overrides) -> LocalController:
    """An engine whose state lives in GCS (devstack's), beside the jobs' checkpoints."""
    settings = Settings(
        vertex_endpoint=devstack.vertex.host_port,
        project=PROJECT,
        region=REGION,
        reconcile_seconds=1,
        submit_retry_seconds=0.5,
        error_recheck_seconds=0.5,
        **overrides,
    )
    deps = Dependencies(
        store=GcsStateStore(bucket, "state"),
        vertex=VertexBackend(settings, retry_max_wait=0.5),
        checkpoints=CheckpointProbe(),
        alerts=AlertSink(TopicPublisher(), alerts_topic[0], cooldown_seconds=0),
    )
    return LocalController(settings, deps, rng=random.Random(1))


def stray_custom_job(job_id: str, attempt: int) -> aiplatform_v1.CustomJob:
    """A CustomJob labelled as one of the job's attempts, as a crashed controller may leave one;
    its replicas are simulated (devstack.vertex.simulated) and run until cancelled."""
    env = {"DEVSTACK_SIMULATED_RUN_SECONDS": "forever"}
    return command_job("stray", [(1, ["/nonexistent"])], labels=labels_for(job_id, attempt), env=env)


def test_a_pass_reads_nothing_of_finished_jobs_and_lists_live_custom_jobs_only(
    devstack, bucket, alerts_topic
):
    engine = gcs_store_engine(devstack, bucket, alerts_topic)
    accept(engine, request("done-1", bucket, args=["--steps", "3"]), {})
    finished = drive(engine, "done-1", terminal)
    assert finished["phase"] == "succeeded"
    vertex_name = finished["attempts"][0]["vertexJob"]
    # Settle first: the job leaves the live index once the interval ledger has counted its
    # ending, which a pass does (on a loaded machine, possibly in a later one).
    for _ in range(20):
        engine.run_pass()
        if not [v for v in engine.store.list_live(JOBS_PREFIX) if v.key.endswith("done-1")]:
            break
    devstack.gcs.calls.reset()
    devstack.vertex.calls.reset()

    engine.run_pass()

    # CustomJobs other tests left running on the session's devstack carry Relaunch labels too:
    # the pass looks each one up in this store (and finds no such job); those reads are theirs.
    strangers = {job_id for job_id, _ in map(job_labels, devstack.vertex.jobs())} - {"done-1", None}
    calls = [
        (kind, path)
        for kind, path in devstack.gcs.calls.recent()
        if f"/b/{bucket}/" in path and not any(stranger in path for stranger in strangers)
    ]
    # One listing of the state prefix (its finished entries are skipped by their flag) and of
    # the cancel records; no document, checkpoint or exit record of the finished job is read.
    assert [p for _, p in calls if "done-1" in p] == [], calls
    assert all(kind == "GET list" for kind, _ in calls), calls
    vertex = devstack.vertex.calls.recent()
    assert ("GetCustomJob", vertex_name) not in vertex
    assert [kind for kind, _ in vertex].count("ListCustomJobs") == 1


def test_a_finished_jobs_custom_job_that_still_runs_is_found_and_cancelled(devstack, bucket, make_engine):
    engine = make_engine()
    accept(engine, request("done-2", bucket, args=["--steps", "3"]), {})
    assert drive(engine, "done-2", terminal)["phase"] == "succeeded"
    jobs = job_service_client(devstack.vertex.host_port)
    stray = jobs.create_custom_job(parent=PARENT, custom_job=stray_custom_job("done-2", 1))
    devstack.vertex.wait_for_state(stray.name, LIVE, timeout=30)

    engine.run_pass()  # the job is finished in the store: only Vertex's listing can find it

    assert devstack.vertex.wait_for_state(stray.name, ENDED, timeout=30).state == (
        aiplatform_v1.JobState.JOB_STATE_CANCELLED
    )


def test_hints_for_vertex_jobs_no_live_job_recorded_cost_no_get(devstack, bucket, make_engine):
    engine = make_engine()
    accept(engine, request("hinted", bucket, args=["--steps", "100000", "--step-seconds", "0.05"]), {})
    running = drive(engine, "hinted", lambda d: d["phase"] == "running")
    ours = running["attempts"][0]["vertexJob"]
    jobs = job_service_client(devstack.vertex.host_port)
    other = command_job("someone-else", [(1, ["/nonexistent"])], env={"DEVSTACK_SIMULATED_RUN_SECONDS": "0"})
    foreign = jobs.create_custom_job(parent=PARENT, custom_job=other)
    devstack.vertex.calls.reset()

    engine.on_hint(foreign.name.rsplit("/", 1)[-1])
    engine.on_hint(ours.rsplit("/", 1)[-1])

    gets = [name for kind, name in devstack.vertex.calls.recent() if kind == "GetCustomJob"]
    assert gets == [ours]
    engine.cancel("hinted")
    assert drive(engine, "hinted", terminal)["phase"] == "cancelled"


def simulated_request(job_id: str, bucket: str) -> bytes:
    """A job whose CustomJob runs simulated replicas until cancelled (no process at all)."""
    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "us-docker.pkg.dev/demo/trainer:1",
            "command": ["/nonexistent/simulated"],
            "env": [{"name": "DEVSTACK_SIMULATED_RUN_SECONDS", "value": "forever"}],
        },
    }
    body = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool], "scheduling": {"strategy": "SPOT"}},
        "checkpoint": {"uri": f"gs://{bucket}/{job_id}"},
    }
    return json.dumps(body).encode()


def test_hints_that_arrive_while_the_job_is_read_are_folded_into_one_more_read(devstack, bucket, make_engine):
    engine = make_engine()
    accept(engine, simulated_request("burst", bucket), {})
    ours = drive(engine, "burst", lambda d: d["phase"] == "running")["attempts"][0]["vertexJob"]
    entered, release = threading.Event(), threading.Event()
    real_get = engine.vertex.get

    def held_get(name, **options):  # our adapter's method, held open so that hints pile up meanwhile
        entered.set()
        release.wait(30)
        return real_get(name, **options)

    engine.vertex.get = held_get
    devstack.vertex.calls.reset()
    first = threading.Thread(target=engine.on_hint, args=(ours.rsplit("/", 1)[-1],))
    first.start()
    assert entered.wait(30)
    for _ in range(5):
        engine.on_hint(ours.rsplit("/", 1)[-1])  # returns at once: a read is under way
    release.set()
    first.join(30)

    gets = [name for kind, name in devstack.vertex.calls.recent() if kind == "GetCustomJob"]
    assert gets == [ours, ours]  # the read under way, and one more for the five that came meanwhile
    engine.cancel("burst")
    assert drive(engine, "burst", terminal)["phase"] == "cancelled"


def test_checkpoint_probes_are_capped_per_pass_and_staggered_over_running_jobs(devstack, bucket, make_engine):
    engine = make_engine(progress_probes_per_pass=1)
    for job_id in ("probe-a", "probe-b"):
        accept(engine, simulated_request(job_id, bucket), {})
    for job_id in ("probe-a", "probe-b"):
        drive(engine, job_id, lambda d: d["phase"] == "running")

    probed = []
    for _ in range(4):
        devstack.gcs.calls.reset()
        engine.run_pass()
        listings = [
            p for kind, p in devstack.gcs.calls.recent() if kind == "GET list" and f"/b/{bucket}/" in p
        ]
        probed.append([job for job in ("probe-a", "probe-b") if any(f"prefix={job}/" in p for p in listings)])

    assert all(len(jobs) == 1 for jobs in probed), probed  # one checkpoint root a pass
    assert {job for jobs in probed for job in jobs} == {"probe-a", "probe-b"}  # taking turns
    for job_id in ("probe-a", "probe-b"):
        engine.cancel(job_id)
        assert drive(engine, job_id, terminal)["phase"] == "cancelled"
