"""GcsStateStore against the GCS stand-in: the shared contract, plus what only GCS adds."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from controller.adapters.gcs import make_client
from controller.store import AlreadyExists, Fenced
from controller.store.base import StoreError
from controller.store.factory import open_store
from controller.store.gcs import GcsStateStore
from controller.store.sqlite import SqliteStateStore
from tests.support.gcs import FlakyProxy, gcs_client_with_bucket
from tests.support.store_contract import StateStoreContract

BUCKET = "relaunch-state"
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def gcs_client():
    with gcs_client_with_bucket(BUCKET) as client:
        yield client


@pytest.fixture
def store(gcs_client):
    return GcsStateStore(BUCKET, f"test-{next(_prefixes)}/state", client=gcs_client)


class TestGcsStateStore(StateStoreContract):
    pass


def test_document_is_one_json_object_carrying_version_and_fence(store, gcs_client):
    store.create("jobs/demo-gpt", {"phase": "running", "attempt": 2}, fence=3)
    store.put("jobs/demo-gpt", {"phase": "running", "attempt": 3}, expected_version=1, fence=3)
    blob = gcs_client.bucket(BUCKET).blob(f"{store._prefix}/jobs/demo-gpt.json")
    assert json.loads(blob.download_as_bytes()) == {
        "format": "relaunch-state/v1",
        "version": 2,
        "fence": 3,
        "document": {"phase": "running", "attempt": 3},
    }


def test_a_corrupt_object_is_an_error_not_a_missing_job(store, gcs_client):
    """Reading garbage as "no such job" could make the controller submit the job again."""
    gcs_client.bucket(BUCKET).blob(f"{store._prefix}/job-a.json").upload_from_string(b"{trunc")
    with pytest.raises(StoreError, match="not a state document"):
        store.get("job-a")


def test_fence_survives_across_store_instances(store, gcs_client):
    """A restarted old leader (new store object, same bucket) is still refused."""
    version = store.create("job-a", {"by": "new leader"}, fence=7)
    reopened = GcsStateStore(BUCKET, store._prefix, client=gcs_client)
    with pytest.raises(Fenced):
        reopened.put("job-a", {"by": "old leader"}, expected_version=version, fence=6)


def test_a_deposed_leader_that_remembers_the_generation_is_still_refused(store, gcs_client):
    """The old leader wrote the job last (so it skips reading it before its next put); a new
    leader raised the fence floor without touching the job. The old leader's put is refused."""
    version = store.create("jobs/a", {"by": "old leader"}, fence=5)
    new_leader = GcsStateStore(BUCKET, store._prefix, client=gcs_client)
    new_leader.raise_fence(6)
    with pytest.raises(Fenced):
        store.put("jobs/a", {"by": "old leader, after a pause"}, expected_version=version, fence=5)
    assert new_leader.get("jobs/a").document == {"by": "old leader"}


def test_a_remembered_generation_written_over_since_is_not_trusted(store, gcs_client):
    """Another writer wrote after this store last saw the object: the put is judged on what is
    there now (a higher fence refuses it; a moved version is a conflict), never lands on it."""
    from controller.store import VersionConflict

    version = store.create("jobs/b", {"by": "old leader"}, fence=5)
    new_leader = GcsStateStore(BUCKET, store._prefix, client=gcs_client)
    new_leader.put("jobs/b", {"by": "new leader"}, expected_version=version, fence=6)
    with pytest.raises(Fenced):
        store.put("jobs/b", {"by": "old leader"}, expected_version=version + 1, fence=5)
    with pytest.raises(VersionConflict):
        store.put("jobs/b", {"by": "old leader"}, expected_version=version, fence=6)
    assert new_leader.get("jobs/b").document == {"by": "new leader"}


def test_puts_in_a_row_from_remembered_generations_land(store, gcs_client):
    """Puts that use the generation just read or written land, and read back as written."""
    version = store.create("jobs/c", {"n": 1}, fence=2)
    assert store.get("jobs/c").version == version
    assert store.put("jobs/c", {"n": 2}, expected_version=version, fence=2) == version + 1
    assert store.put("jobs/c", {"n": 3}, expected_version=version + 1, fence=2) == version + 2
    reopened = GcsStateStore(BUCKET, store._prefix, client=gcs_client)
    assert reopened.get("jobs/c").document == {"n": 3}
    assert reopened.get("jobs/c").version == version + 2


def test_list_ignores_foreign_objects_and_orders_by_key(store, gcs_client):
    for key in ("jobs/a-b", "jobs/a", "jobs/a/c"):
        store.create(key, {"key": key})
    gcs_client.bucket(BUCKET).blob(f"{store._prefix}/jobs/notes.txt").upload_from_string(b"x")
    assert [v.key for v in store.list("jobs/")] == ["jobs/a", "jobs/a-b", "jobs/a/c"]


def test_open_store_understands_every_documented_url(gcs_client, tmp_path, monkeypatch):
    assert isinstance(open_store(f"sqlite:///{tmp_path}/abs.db"), SqliteStateStore)
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite://rel/state.db")
    relative.create("job", {"n": 1})
    assert (tmp_path / "rel" / "state.db").exists()

    gcs_store = open_store("gs://relaunch-state/factory/prefix", gcs_client=gcs_client)
    gcs_store.create("job", {"n": 1})
    assert gcs_client.bucket(BUCKET).get_blob("factory/prefix/job.json") is not None

    for bad in ("postgres://db/x", "gs:///no-bucket", "sqlite://", "/just/a/path"):
        with pytest.raises(ValueError, match="state store URL"):
            open_store(bad)


# ---- the retry policy, on the wire --------------------------------------------------------


@pytest.fixture
def flaky_store(gcs_client, monkeypatch):
    proxy = FlakyProxy(os.environ["STORAGE_EMULATOR_HOST"])
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    client = storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())
    yield GcsStateStore(BUCKET, f"flaky-{next(_prefixes)}", client=client), proxy
    proxy.stop()


def test_server_errors_are_retried_until_the_write_lands(flaky_store):
    store, proxy = flaky_store
    proxy.fail_next(2)
    assert store.create("job-a", {"n": 1}) == 1
    assert store.get("job-a").document == {"n": 1}
    assert [status for _, status in proxy.requests[:3]] == [503, 503, 200]


def test_a_write_whose_reply_was_lost_is_recognised_as_ours(flaky_store):
    """The create reached GCS but the client saw 503; its retry meets 412 and must not report
    AlreadyExists for the document it wrote itself."""
    store, proxy = flaky_store
    proxy.fail_next(1, after_forwarding=True)
    assert store.create("job-a", {"n": 1}) == 1
    assert proxy.requests[:3] == [("POST", 503), ("POST", 412), ("GET", 200)]
    version = store.put("job-a", {"n": 2}, expected_version=1)
    proxy.fail_next(1, after_forwarding=True)
    assert store.put("job-a", {"n": 3}, expected_version=version) == version + 1
    assert store.get("job-a").document == {"n": 3}


def test_a_precondition_failure_is_answered_once_not_retried(flaky_store):
    store, proxy = flaky_store
    store.create("job-a", {"n": 1})
    proxy.requests.clear()
    with pytest.raises(AlreadyExists):
        store.create("job-a", {"n": 2})
    assert proxy.requests == [("POST", 412)]


@pytest.fixture(scope="module")
def counted():
    """A GCS stand-in of its own, whose request counts (devstack.calls) the tests read."""
    from devstack.gcs import start_gcs

    with start_gcs() as emulator, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        storage.Client(project="relaunch-dev", credentials=AnonymousCredentials()).create_bucket(BUCKET)
        # The controller's own client, which has not met the bucket: a client that has (created
        # or fetched it) checks on the bucket in the background after every 404, and such a
        # check could land among the counted calls.
        yield emulator, make_client()


def _reads(emulator) -> list[str]:
    """Paths of the object reads (metadata GETs and downloads) served since the last reset."""
    return [path for kind, path in emulator.calls.recent() if kind in ("GET object", "GET download")]


def test_listing_pages_through_objects_list_without_a_get_per_object(counted):
    emulator, client = counted
    store = GcsStateStore(BUCKET, f"paged-{next(_prefixes)}", client=client)
    for i in range(1100):
        store.create(f"jobs/j{i:04d}", {"state": {"phase": "running"}, "i": i})
    emulator.calls.reset()

    listed = list(store.list("jobs/"))

    assert [v.document["i"] for v in listed] == list(range(1100))
    assert emulator.calls.counts() == {"GET list": 2}  # 1,000 a page, the documents in the listing


def test_a_live_listing_reads_nothing_of_finished_jobs(counted):
    emulator, client = counted
    store = GcsStateStore(BUCKET, f"hot-{next(_prefixes)}", client=client)
    big_timeline = [{"entry": "x" * 50} for _ in range(200)]  # too big to embed: read by GET
    store.create("jobs/live-big", {"state": {"phase": "running"}, "timeline": big_timeline})
    store.create("jobs/live-small", {"state": {"phase": "queued"}})
    for i in range(30):
        store.create(f"jobs/done-{i}", {"state": {"phase": "succeeded"}, "timeline": big_timeline})
    emulator.calls.reset()

    live = [v.key for v in store.list_live("jobs/")]

    assert live == ["jobs/live-big", "jobs/live-small"]
    assert emulator.calls.counts().get("GET list") == 1
    assert [p for p in _reads(emulator) if "/done-" in p] == []
    assert len(_reads(emulator)) == 1  # the one live document too big for its metadata


def test_objects_written_before_the_live_flag_are_classified_on_read(counted):
    emulator, client = counted
    store = GcsStateStore(BUCKET, f"old-{next(_prefixes)}", client=client)
    bucket = client.bucket(BUCKET)
    for job_id, phase in (("old-live", "running"), ("old-done", "failed")):
        envelope = {
            "format": "relaunch-state/v1",
            "version": 1,
            "fence": 0,
            "document": {"state": {"phase": phase}},
        }
        bucket.blob(f"{store._prefix}/jobs/{job_id}.json").upload_from_string(json.dumps(envelope))

    assert [v.key for v in store.list_live("jobs/")] == ["jobs/old-live"]
    assert [v.key for v in store.list("jobs/")] == ["jobs/old-done", "jobs/old-live"]


class _Clock:
    """One host's monotonic clock, moved by hand (no sleeping for a lease to run out)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _leader(client, name: str, holder: str, clock: _Clock):
    """A controller's lease and its own store instance, wired as the daemon wires them."""
    from controller.adapters.lease import Lease

    lease = Lease(BUCKET, f"{name}/lease", holder, 30.0, client=client, clock=clock)
    store = GcsStateStore(BUCKET, f"{name}/state", client=client)
    _try_to_lead(lease, store)
    return lease, store


def _try_to_lead(lease, store) -> None:
    if lease.try_acquire():
        store.raise_fence(lease.fence)
        store.trust_lease(lease.fence, lease.is_held)


def test_a_leaders_writes_are_one_round_trip_each_and_a_deposed_leaders_are_refused(counted):
    emulator, client = counted
    name = f"leased-{next(_prefixes)}"
    clock_a, clock_b = _Clock(), _Clock()
    lease_a, store_a = _leader(client, name, "a", clock_a)
    assert lease_a.is_held()
    version = store_a.create("jobs/x", {"by": "a"}, fence=lease_a.fence)

    emulator.calls.reset()
    version = store_a.put("jobs/x", {"by": "a", "n": 2}, expected_version=version, fence=lease_a.fence)
    store_a.create("jobs/y", {"by": "a"}, fence=lease_a.fence)
    assert emulator.calls.counts() == {"POST upload": 2}  # no floor read, no read for the generation

    lease_b, store_b = _leader(client, name, "b", clock_b)
    assert not lease_b.is_held()  # a holds it; b starts counting
    clock_a.now += 31  # a stalls past its lease ...
    clock_b.now += 31  # ... and b takes over, raising the floor before it acts
    _try_to_lead(lease_b, store_b)
    assert lease_b.is_held() and lease_b.fence > lease_a.fence

    # a wakes up still remembering the generation of what it wrote: refused all the same.
    with pytest.raises(Fenced):
        store_a.put("jobs/x", {"by": "a, after the pause"}, expected_version=version, fence=lease_a.fence)
    with pytest.raises(Fenced):
        store_a.create("jobs/z", {"by": "a, after the pause"}, fence=lease_a.fence)
    assert store_b.get("jobs/x").document == {"by": "a", "n": 2}
    assert store_b.get("jobs/z") is None
    assert store_b.put("jobs/x", {"by": "b"}, expected_version=version, fence=lease_b.fence) == version + 1


def test_a_lease_vouches_only_for_its_own_fence(counted):
    """A write with another fence (the intake's 0, or a stale token) still reads the floor."""
    emulator, client = counted
    name = f"leased-{next(_prefixes)}"
    lease, store = _leader(client, name, "a", _Clock())
    version = store.create("jobs/x", {"n": 1}, fence=lease.fence)
    with pytest.raises(Fenced):
        store.put("jobs/x", {"n": 2}, expected_version=version, fence=lease.fence - 1)
    with pytest.raises(Fenced):
        store.put("jobs/x", {"n": 2}, expected_version=version, fence=0)
    assert store.get("jobs/x").document == {"n": 1}
