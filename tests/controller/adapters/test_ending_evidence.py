"""An ending's evidence costs few round trips, in series, on the look's own thread: counted as
the requests devstack's GCS served, with the trainer's own writers and the real storage client."""

from __future__ import annotations

import json
import threading

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.cloud import storage as gcs

from controller.adapters.checkpoints import CheckpointProbe
from controller.adapters.observation import Observer
from controller.core import events as ev
from devstack.gcs import start_gcs
from trainer import layout
from trainer.storage import GcsStorage, record_run_start, write_exit_record, write_replica_exit

BUCKET = "relaunch-evidence"
VERTEX_ID = "4242"
NAME = f"projects/p/locations/us-central1/customJobs/{VERTEX_ID}"
ROOT = f"gs://{BUCKET}/jobs/demo/ckpt"


@pytest.fixture
def emulator():
    with start_gcs() as server, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", server.url)
        gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()).create_bucket(BUCKET)
        yield server


@pytest.fixture
def probe(emulator):
    return CheckpointProbe(client=gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()))


class EndedJob:
    """Vertex's answer to the Get (not a Google client: our adapter's interface)."""

    def get(self, name: str, *, urgent: bool = False) -> aiplatform_v1.CustomJob:
        return aiplatform_v1.CustomJob(name=name, state=aiplatform_v1.JobState.JOB_STATE_FAILED)


def _commit(store: GcsStorage, step: int, attempt: int) -> layout.CommitMarker:
    marker = layout.CommitMarker(step, 2, "ddp", "demo", attempt, blocking_seconds=1.5, write_seconds=3.0)
    store.write_bytes(f"{layout.step_dir_name(step)}/rank-00000.pt", b"shard")
    assert store.create_only(layout.commit_marker_path(layout.step_dir_name(step)), marker.to_json().encode())
    return marker


def _chief(attempt: int) -> layout.ExitRecord:
    return layout.ExitRecord(
        "demo", attempt, "preempted", 75, 130, 120, True, "SIGTERM", vertex_job_id=VERTEX_ID
    )


def _replica(attempt: int, name: str) -> layout.ReplicaExit:
    rank = int(name[len("workerpool")])
    return layout.ReplicaExit("demo", attempt, name, rank, "preempted", 75, VERTEX_ID, step=130)


def _two_replica_ending(store: GcsStorage) -> layout.ExitRecord:
    """What a 2-replica attempt 3 of this release leaves: one run, two checkpoints, the chief's
    exit record (returned: it carries the time it was made) and each replica's."""
    record_run_start(store, "demo", 3, VERTEX_ID, resume_step=None)
    _commit(store, 100, 3)
    _commit(store, 120, 3)
    chief = _chief(3)
    write_exit_record(store, chief)
    for replica in ("workerpool0-0", "workerpool1-0"):
        write_replica_exit(store, _replica(3, replica))
    return chief


def _calls(emulator) -> list[str]:
    return [kind for kind, path in emulator.calls.recent() if f"/b/{BUCKET}/" in path]


def test_a_two_replica_ending_costs_two_listings_and_the_newest_markers(emulator, probe):
    chief = _two_replica_ending(GcsStorage(ROOT))
    emulator.calls.reset()
    observation = Observer(EndedJob(), probe).observe(NAME, 3, ROOT)
    assert observation.checkpoint == ev.CheckpointObserved(120, f"{ROOT}/step-0000000120")
    assert observation.exit_record == chief
    assert isinstance(observation.vertex, ev.VertexObserved)
    assert {r.replica for r in observation.vertex.replica_exits} == {"workerpool0-0", "workerpool1-0"}
    assert [m.step for m in observation.markers or []] == [120, 100]
    # The attempt's exit folder and the step folders are listed once each; the records come in
    # the listing's metadata; each kept step costs its commit marker and its quarantine check.
    assert sorted(_calls(emulator)) == sorted(["GET list"] * 2 + ["GET download"] * 4)


def test_an_ending_without_records_or_checkpoints_costs_two_listings(emulator, probe):
    emulator.calls.reset()
    observation = Observer(EndedJob(), probe).observe(NAME, 1, ROOT)
    assert observation.ended and observation.exit_record is None and observation.checkpoint is None
    # No 404 read of the keyed name and then of the legacy one: the listing said neither exists.
    assert _calls(emulator) == ["GET list", "GET list"]


def test_a_last_run_killed_without_a_word_is_not_given_an_earlier_runs_records(emulator, probe):
    """Vertex restarted the CustomJob in place and then the run 2 it started was SIGKILLed: the
    records of run 1 still lie there, and they must not speak for the ending of run 2."""
    _two_replica_ending(GcsStorage(ROOT))
    record_run_start(GcsStorage(ROOT), "demo", 3, VERTEX_ID, resume_step=120)  # run 2, then nothing
    observation = Observer(EndedJob(), probe).observe(NAME, 3, ROOT)
    assert observation.exit_record is None
    assert isinstance(observation.vertex, ev.VertexObserved)
    assert observation.vertex.exit_reason is None and observation.vertex.replica_exits == ()
    (restart,) = observation.vertex.restarts  # run 1's records are run 2's restart evidence
    assert restart.previous_reason == "preempted"


def test_the_ending_is_read_on_the_looks_own_thread(emulator, probe):
    _two_replica_ending(GcsStorage(ROOT))
    seen: set[str] = set()

    class Watched(CheckpointProbe):
        def _open(self, checkpoint_uri):
            seen.add(threading.current_thread().name)
            return super()._open(checkpoint_uri)

    watched = Watched(client=probe._client)
    Observer(EndedJob(), watched).observe(NAME, 3, ROOT)
    assert seen == {threading.current_thread().name}


def test_records_written_by_an_older_trainer_without_metadata_are_still_read(emulator, probe):
    # An older release wrote plain objects: no custom metadata. Each is read whole.
    bucket = gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()).bucket(BUCKET)
    prefix = "jobs/demo/ckpt/"
    chief, replica = _chief(3), _replica(3, "workerpool1-0")
    bucket.blob(prefix + layout.exit_record_key(3, VERTEX_ID)).upload_from_string(chief.to_json())
    bucket.blob(prefix + layout.replica_exit_key(3, VERTEX_ID, "workerpool1-0")).upload_from_string(
        replica.to_json()
    )
    emulator.calls.reset()
    ending = probe.ending(ROOT, 3, vertex_job_id=VERTEX_ID)
    assert ending.exit_record == chief and ending.replicas == [replica]
    assert sorted(_calls(emulator)) == sorted(["GET list", "GET list", "GET download", "GET download"])


def test_a_legacy_record_is_read_only_when_the_listing_has_no_keyed_one(emulator, probe):
    # A trainer outside Vertex (no CustomJob id) writes only the legacy name.
    store = GcsStorage(ROOT)
    record = layout.ExitRecord("demo", 2, "preempted", 75, 50, 40, True, "SIGTERM")
    write_exit_record(store, record)
    # Another CustomJob's record under the legacy name does not speak for ours.
    foreign = layout.ExitRecord("demo", 5, "preempted", 75, 9, 0, False, "SIGTERM", vertex_job_id="999")
    store.write_bytes(layout.exit_record_key(5), foreign.to_json().encode())
    assert probe.ending(ROOT, 2, vertex_job_id=VERTEX_ID).exit_record == record
    assert probe.ending(ROOT, 5, vertex_job_id=VERTEX_ID).exit_record is None


def test_the_trainer_puts_each_small_record_in_its_metadata(emulator):
    store = GcsStorage(ROOT)
    _two_replica_ending(store)
    blobs = {
        b.name: b.metadata or {}
        for b in gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()).list_blobs(
            BUCKET, prefix="jobs/demo/ckpt/exits/"
        )
    }
    assert len(blobs) == 5  # keyed + legacy chief, two replicas, one run
    for name, metadata in blobs.items():
        body = GcsStorage(ROOT).read_bytes(name[len("jobs/demo/ckpt/") :])
        assert json.loads(metadata[layout.RECORD_METADATA_KEY]) == json.loads(body)


def test_a_record_too_large_for_metadata_goes_without_it():
    big = layout.ExitRecord("demo", 1, "runtime_error", 70, checkpoint_root="x" * 5000)
    assert layout.record_metadata(big.to_json().encode()) == {}
    small = _chief(1)
    assert (
        layout.ExitRecord.from_json(layout.record_metadata(small.to_json().encode())["relaunch-record"])
        == small
    )
