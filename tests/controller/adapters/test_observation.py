"""An ending's evidence is read concurrently: the latest checkpoint, the chief's and the replicas'
exit records, the commit markers and the CustomJob's run records (restarts in place) are in
flight together, so a recovery waits for the slowest read, not their sum. The probe below is our own adapter's interface (no Google client class):
each read waits until all five have started, which only concurrent reads can satisfy."""

from __future__ import annotations

import threading

from google.cloud import aiplatform_v1

from controller.adapters.observation import Observer
from controller.core import events as ev

NAME = "projects/p/locations/us-central1/customJobs/123"


class EndedJob:
    """Vertex's answer to the Get: the attempt's CustomJob has failed."""

    def get(self, name: str) -> aiplatform_v1.CustomJob:
        return aiplatform_v1.CustomJob(name=name, state=aiplatform_v1.JobState.JOB_STATE_FAILED)


class AllAtOnce:
    """Each read returns only once all five reads of the ending are under way."""

    def __init__(self) -> None:
        self.started = threading.Barrier(5, timeout=10)
        self.threads: set[str] = set()

    def _read(self, value):
        self.threads.add(threading.current_thread().name)
        self.started.wait()  # BrokenBarrierError when the reads come one after another
        return value

    def latest(self, uri):
        return self._read(None)

    def exit_record(self, uri, attempt, *, vertex_job_id=None):
        return self._read(None)

    def replica_exits(self, uri, attempt, *, vertex_job_id=None):
        return self._read([])

    def recent_markers(self, uri):
        return self._read([])

    def runs(self, uri, attempt, *, vertex_job_id=None):
        return self._read([])


def test_an_endings_five_reads_are_in_flight_together():
    probe = AllAtOnce()
    observation = Observer(EndedJob(), probe).observe(NAME, 1, "gs://b/ckpt")
    assert observation.ended and isinstance(observation.vertex, ev.VertexObserved)
    assert len(probe.threads) == 5
    # What the interval keeper's figures need comes back with it (not read a second time).
    assert observation.markers == [] and observation.exit_record is None
