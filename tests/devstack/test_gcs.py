"""The GCS stand-in, driven only through google-cloud-storage (and, for the race on a
resumable session's last byte, the session URL the client library hands out)."""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
import time

import google_crc32c
import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from devstack.gcs import start_gcs


@pytest.fixture(scope="module")
def gcs():
    with start_gcs() as emulator:
        yield emulator


@pytest.fixture
def client(gcs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    return storage.Client(project="relaunch-test", credentials=AnonymousCredentials())


_bucket_count = iter(range(10**6))


@pytest.fixture
def bucket(client):
    return client.create_bucket(f"bucket-{next(_bucket_count)}")


def _crc32c(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


# ---- connections -------------------------------------------------------------------------


def test_calls_one_after_another_share_one_connection(gcs, monkeypatch):
    """As Cloud Storage keeps a client's connection open between requests, so does the stand-in:
    a run of calls (hits, misses, uploads, listings) costs no new connection per call."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    # Without the library's background bucket lookups, which open connections of their own.
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    client = storage.Client(project="relaunch-test", credentials=AnonymousCredentials())
    bucket = client.bucket("kept-open")
    bucket.create()

    def calls(index: int) -> None:
        bucket.blob(f"kept/{index}").upload_from_string(b"x")
        with pytest.raises(gexc.NotFound):
            bucket.blob(f"missing/{index}").download_as_bytes()
        assert bucket.blob(f"kept/{index}").download_as_bytes() == b"x"
        assert len(list(bucket.list_blobs(prefix="kept/"))) == index + 1

    calls(0)  # the pool opens what it needs once
    opened = gcs.connections_accepted
    for index in range(1, 6):
        calls(index)

    # Twenty calls, no new connection per call (the pool may replace one it found closed).
    assert gcs.connections_accepted - opened <= 1


def test_a_client_that_resets_its_kept_connection_is_no_error(gcs, capfd):
    """A controller killed with -9 resets its kept connections: routine for a server, so the
    stand-in prints no traceback for it (the fault suite's logs were full of them)."""
    host, port = gcs.url.removeprefix("http://").split(":")
    before = gcs.connections_open  # other tests' clients keep theirs open
    client = socket.create_connection((host, int(port)), timeout=10)
    client.sendall(b"GET /storage/v1/b?project=p HTTP/1.1\r\nHost: gcs\r\n\r\n")
    assert client.recv(12).startswith(b"HTTP/1.1 200")
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset, not a close: the stand-in's thread meets it reading the next request
    deadline = time.monotonic() + 10
    while gcs.connections_open > before and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the stand-in's own count, with a deadline
    assert gcs.connections_open == before
    assert "Traceback" not in capfd.readouterr().err


def test_a_stopped_stand_in_serves_no_open_connection(monkeypatch):
    """A connection kept open from before a stop is not served by the stopped stand-in: the next
    call fails to connect, as it would with nothing listening."""
    emulator = start_gcs()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    client = storage.Client(project="relaunch-test", credentials=AnonymousCredentials())
    client.create_bucket("stopping").blob("x").upload_from_string(b"x")

    emulator.stop()

    with pytest.raises(requests.exceptions.ConnectionError):
        client.bucket("stopping").blob("x").download_as_bytes(retry=None, timeout=5)


# ---- buckets ---------------------------------------------------------------------------


def test_bucket_create_get_list_delete(client):
    client.create_bucket("lifecycle")
    with pytest.raises(gexc.Conflict):
        client.create_bucket("lifecycle")
    assert client.get_bucket("lifecycle").name == "lifecycle"
    assert "lifecycle" in [b.name for b in client.list_buckets()]

    client.bucket("lifecycle").blob("x").upload_from_string(b"x")
    with pytest.raises(gexc.Conflict):
        client.bucket("lifecycle").delete()  # not empty
    client.bucket("lifecycle").blob("x").delete()
    client.bucket("lifecycle").delete()
    with pytest.raises(gexc.NotFound):
        client.get_bucket("lifecycle")


def test_upload_into_missing_bucket_is_404(client):
    with pytest.raises(gexc.NotFound):
        client.bucket("no-such-bucket").blob("x").upload_from_string(b"x")


# ---- objects and metadata ---------------------------------------------------------------


def test_object_metadata_checksums_and_generations(bucket):
    data = b"step 120 weights" * 1000
    blob = bucket.blob("ckpt/step-0000000120/rank-00000.pt")
    blob.metadata = {"step": "120"}
    blob.upload_from_string(data, content_type="application/x-torch")

    stored = bucket.get_blob(blob.name)
    assert stored.size == len(data)
    assert stored.content_type == "application/x-torch"
    assert stored.metadata == {"step": "120"}
    assert stored.crc32c == _crc32c(data)
    assert stored.md5_hash == _md5(data)
    assert stored.metageneration == 1
    first_generation = stored.generation

    stored.metadata = {"verified": "yes"}
    stored.patch()
    patched = bucket.get_blob(blob.name)
    assert patched.metadata == {"step": "120", "verified": "yes"}  # patch merges keys
    assert (patched.generation, patched.metageneration) == (first_generation, 2)

    bucket.blob(blob.name).upload_from_string(b"new")
    replaced = bucket.get_blob(blob.name)
    assert replaced.generation > first_generation
    assert replaced.metageneration == 1
    assert replaced.download_as_bytes() == b"new"


@pytest.mark.parametrize("field, digest", [("crc32c", _crc32c), ("md5_hash", _md5)])
def test_declared_checksum_that_does_not_match_the_data_is_rejected(bucket, field, digest):
    blob = bucket.blob("corrupt")
    setattr(blob, field, digest(b"something else"))  # sent in the upload's metadata
    with pytest.raises(gexc.BadRequest):
        blob.upload_from_string(b"the data", checksum=None)
    assert bucket.get_blob("corrupt") is None


def test_resumable_last_chunk_with_a_wrong_hash_is_rejected(bucket):
    url = bucket.blob("corrupt").create_resumable_upload_session()
    data = b"payload" * 1000
    reply = requests.put(
        url,
        data=data,
        timeout=30,
        headers={
            "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}",
            "X-Goog-Hash": f"crc32c={_crc32c(b'other payload')}",
        },
    )
    assert reply.status_code == 400
    assert bucket.get_blob("corrupt") is None


def test_resumable_upload_in_chunks_keeps_metadata_and_hashes(bucket):
    data = bytes(range(256)) * 5000  # 1.28 MB, 5 chunks of 256 KiB and a tail
    blob = bucket.blob("resumable.bin", chunk_size=256 * 1024)
    blob.metadata = {"kind": "shard"}
    blob.upload_from_string(data, content_type="application/octet-stream")
    stored = bucket.get_blob("resumable.bin")
    assert (stored.size, stored.crc32c, stored.md5_hash) == (len(data), _crc32c(data), _md5(data))
    assert stored.metadata == {"kind": "shard"}
    assert stored.download_as_bytes() == data


def test_delete_then_download_is_404(bucket):
    blob = bucket.blob("gone")
    blob.upload_from_string(b"x")
    blob.delete()
    with pytest.raises(gexc.NotFound):
        bucket.blob("gone").download_as_bytes()
    with pytest.raises(gexc.NotFound):
        bucket.blob("gone").delete()


def test_download_of_a_replaced_generation_is_404(bucket):
    old = bucket.blob("obj")
    old.upload_from_string(b"one")
    bucket.blob("obj").upload_from_string(b"two")
    with pytest.raises(gexc.NotFound):
        bucket.blob("obj", generation=old.generation).download_as_bytes()


# ---- ranges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start, end, expected",
    [
        (0, 9, slice(0, 10)),
        (1000, 1999, slice(1000, 2000)),
        (4090, None, slice(4090, None)),
        (4000, 999999, slice(4000, None)),
        (None, 4, slice(0, 5)),
        (-6, None, slice(-6, None)),
    ],
)
def test_range_download(bucket, start, end, expected):
    data = hashlib.sha256(b"seed").digest() * 128  # 4096 bytes
    bucket.blob("ranged").upload_from_string(data)
    assert bucket.blob("ranged").download_as_bytes(start=start, end=end) == data[expected]


def test_range_past_the_end_is_416(bucket):
    bucket.blob("short").upload_from_string(b"0123456789")
    with pytest.raises(gexc.RequestRangeNotSatisfiable):
        bucket.blob("short").download_as_bytes(start=10)


# ---- listing -----------------------------------------------------------------------------


def test_list_with_prefix_and_delimiter(client, bucket):
    names = [
        "ckpt/step-0000000010/rank-0.pt",
        "ckpt/step-0000000010/COMMITTED.json",
        "ckpt/step-0000000020/rank-0.pt",
        "ckpt/exits/attempt-0001.json",
        "ckpt/README",
        "other/file",
        "ckpt",
    ]  # "ckpt" is both an object and a prefix
    for name in names:
        bucket.blob(name).upload_from_string(name.encode())

    top = client.list_blobs(bucket, prefix="ckpt/", delimiter="/")
    assert [b.name for b in top] == ["ckpt/README"]
    assert top.prefixes == {"ckpt/step-0000000010/", "ckpt/step-0000000020/", "ckpt/exits/"}

    step = [b.name for b in client.list_blobs(bucket, prefix="ckpt/step-0000000010/")]
    assert step == ["ckpt/step-0000000010/COMMITTED.json", "ckpt/step-0000000010/rank-0.pt"]

    root = client.list_blobs(bucket, delimiter="/")
    assert [b.name for b in root] == ["ckpt"]
    assert root.prefixes == {"ckpt/", "other/"}
    assert len(list(client.list_blobs(bucket))) == len(names)


# ---- preconditions -----------------------------------------------------------------------

CONDITIONS = {
    # keyword: (value that fails, value that holds), as functions of (generation, metageneration)
    "if_generation_match": (lambda g, m: g + 1, lambda g, m: g),
    "if_generation_not_match": (lambda g, m: g, lambda g, m: g + 1),
    "if_metageneration_match": (lambda g, m: m + 1, lambda g, m: m),
    "if_metageneration_not_match": (lambda g, m: m, lambda g, m: m + 1),
}


def _upload(bucket, name, **cond):
    bucket.blob(name).upload_from_string(b"replacement", **cond)


def _resumable_upload(bucket, name, **cond):
    bucket.blob(name, chunk_size=256 * 1024).upload_from_string(b"r" * 600_000, **cond)


def _patch(bucket, name, **cond):
    blob = bucket.blob(name)
    blob.metadata = {"patched": "yes"}
    blob.patch(**cond)


def _delete(bucket, name, **cond):
    bucket.blob(name).delete(**cond)


def _download(bucket, name, **cond):
    assert bucket.blob(name).download_as_bytes(**cond) == b"original"


def _reload(bucket, name, **cond):
    bucket.blob(name).reload(**cond)


OPERATIONS = {
    "upload": _upload,
    "resumable_upload": _resumable_upload,
    "patch": _patch,
    "delete": _delete,
    "download": _download,
    "get_metadata": _reload,
}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("condition", CONDITIONS)
def test_precondition_fails_with_412_and_changes_nothing_then_holds(bucket, operation, condition):
    blob = bucket.blob("guarded")
    blob.upload_from_string(b"original")
    blob.metadata = {"a": "1"}
    blob.patch()  # metageneration 2, so generation and metageneration differ
    before = bucket.get_blob("guarded")
    failing, holding = CONDITIONS[condition]
    run = OPERATIONS[operation]

    with pytest.raises(gexc.PreconditionFailed):
        run(bucket, "guarded", **{condition: failing(before.generation, before.metageneration)})
    after = bucket.get_blob("guarded")
    assert after is not None
    assert (after.generation, after.metageneration, after.metadata) == (
        before.generation,
        before.metageneration,
        before.metadata,
    )
    assert after.download_as_bytes() == b"original"

    run(bucket, "guarded", **{condition: holding(before.generation, before.metageneration)})
    if operation == "delete":
        assert bucket.get_blob("guarded") is None
    elif operation in ("upload", "resumable_upload"):
        assert bucket.get_blob("guarded").generation > before.generation
    elif operation == "patch":
        assert bucket.get_blob("guarded").metadata == {"a": "1", "patched": "yes"}


def test_generation_match_zero_means_create_only(bucket):
    marker = bucket.blob("step-0000000120/COMMITTED.json")
    marker.upload_from_string(b'{"step": 120}', if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob(marker.name).upload_from_string(b'{"step": 999}', if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        _resumable_upload(bucket, marker.name, if_generation_match=0)
    assert bucket.blob(marker.name).download_as_bytes() == b'{"step": 120}'


def test_generation_not_match_zero_means_must_exist(bucket):
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("absent").upload_from_string(b"x", if_generation_not_match=0)
    bucket.blob("absent").upload_from_string(b"x")
    bucket.blob("absent").upload_from_string(b"y", if_generation_not_match=0)
    assert bucket.blob("absent").download_as_bytes() == b"y"


# ---- concurrency -------------------------------------------------------------------------


def _race(contenders):
    """Run the callables at the same moment; return what each returned or raised."""
    barrier = threading.Barrier(len(contenders))
    outcomes = [None] * len(contenders)

    def run(i, fn):
        barrier.wait(timeout=30)
        try:
            outcomes[i] = fn()
        except Exception as err:  # collected and asserted on by the caller
            outcomes[i] = err

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_concurrent_create_only_uploads_exactly_one_wins(bucket):
    payloads = [f"writer {i}".encode() * 100 for i in range(8)]

    def writer(data):
        return lambda: bucket.blob("COMMITTED.json").upload_from_string(data, if_generation_match=0)

    outcomes = _race([writer(p) for p in payloads])
    winners = [p for p, o in zip(payloads, outcomes) if o is None]
    assert len(winners) == 1, outcomes
    assert all(isinstance(o, gexc.PreconditionFailed) for o in outcomes if o is not None)
    assert bucket.blob("COMMITTED.json").download_as_bytes() == winners[0]


def test_two_resumable_sessions_racing_to_their_last_byte_only_one_commits(bucket):
    # Both sessions start while the object does not exist, so both pass the check at
    # initiation; the decision must happen atomically when the last byte lands.
    payloads = [b"A" * 70_000, b"B" * 70_000]
    urls = [bucket.blob("marker").create_resumable_upload_session(if_generation_match=0) for _ in payloads]

    def finish(url, data):
        headers = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
        return lambda: requests.put(url, data=data, headers=headers, timeout=30).status_code

    outcomes = _race([finish(u, p) for u, p in zip(urls, payloads)])
    assert sorted(outcomes) == [200, 412]
    assert bucket.blob("marker").download_as_bytes() == payloads[outcomes.index(200)]


def test_concurrent_writes_to_different_objects_all_land(bucket):
    outcomes = _race(
        [(lambda i=i: bucket.blob(f"rank-{i}.pt").upload_from_string(bytes([i]) * 50_000)) for i in range(6)]
    )
    assert outcomes == [None] * 6
    for i in range(6):
        assert bucket.blob(f"rank-{i}.pt").download_as_bytes() == bytes([i]) * 50_000


# ---- persistence -------------------------------------------------------------------------


def test_data_dir_survives_a_restart(tmp_path, monkeypatch):
    def connect(emulator):
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        return storage.Client(project="relaunch-test", credentials=AnonymousCredentials())

    with start_gcs(data_dir=str(tmp_path)) as first:
        client = connect(first)
        bucket = client.create_bucket("persistent")
        blob = bucket.blob("ckpt/step-0000000010/COMMITTED.json")
        blob.metadata = {"step": "10"}
        blob.upload_from_string(b'{"step": 10}', content_type="application/json")
        bucket.blob("deleted").upload_from_string(b"x")
        bucket.blob("deleted").delete()
        generation = blob.generation

    with start_gcs(data_dir=str(tmp_path)) as second:
        client = connect(second)
        bucket = client.bucket("persistent")
        stored = bucket.get_blob("ckpt/step-0000000010/COMMITTED.json")
        assert (stored.generation, stored.metadata, stored.content_type) == (
            generation,
            {"step": "10"},
            "application/json",
        )
        assert stored.download_as_bytes() == b'{"step": 10}'
        assert bucket.get_blob("deleted") is None
        with pytest.raises(gexc.PreconditionFailed):  # still there as far as create-only knows
            bucket.blob(stored.name).upload_from_string(b"again", if_generation_match=0)
        bucket.blob("later").upload_from_string(b"y")
        assert bucket.get_blob("later").generation > generation


def _connect(emulator, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    return storage.Client(project="relaunch-test", credentials=AnonymousCredentials())


def test_a_kill_mid_append_loses_only_the_unacknowledged_write(tmp_path, monkeypatch):
    with start_gcs(data_dir=str(tmp_path)) as first:
        bucket = _connect(first, monkeypatch).create_bucket("journal")
        for step in range(5):
            bucket.blob(f"ckpt/step-{step}/COMMITTED.json").upload_from_string(b"{}")
        bucket.blob("ckpt/step-0/COMMITTED.json").delete()
    journals = list(tmp_path.rglob(".meta.log"))
    assert len(journals) == 1
    with journals[0].open("ab") as journal:  # what a kill -9 in the middle of an append leaves
        journal.write(b'["journal", "ckpt/step-9/COMMI')

    with start_gcs(data_dir=str(tmp_path)) as second:
        bucket = _connect(second, monkeypatch).bucket("journal")
        names = sorted(blob.name for blob in bucket.list_blobs())
        assert names == [f"ckpt/step-{step}/COMMITTED.json" for step in range(1, 5)]
        bucket.blob("after-restart").upload_from_string(b"z")  # the journal is writable again


def test_compaction_keeps_every_object_and_generation(tmp_path, monkeypatch):
    from devstack.gcs.storage import GcsStorage

    monkeypatch.setattr(GcsStorage, "compact_at_least", 3)  # rewrite after every few writes
    with start_gcs(data_dir=str(tmp_path)) as first:
        bucket = _connect(first, monkeypatch).create_bucket("compacted")
        generations = {}
        for i in range(20):
            blob = bucket.blob(f"object-{i % 7}")
            blob.upload_from_string(str(i).encode())
            generations[blob.name] = blob.generation
    with start_gcs(data_dir=str(tmp_path)) as second:
        bucket = _connect(second, monkeypatch).bucket("compacted")
        stored = {blob.name: (blob.generation, blob.download_as_bytes()) for blob in bucket.list_blobs()}
        last_value = {f"object-{i % 7}": str(i).encode() for i in range(20)}
        assert stored == {name: (generations[name], last_value[name]) for name in generations}


@pytest.mark.parametrize(
    "body",
    [b"", b"--b\r\nContent-Type: application/json\r\n\r\nnot json\r\n--b--\r\n"],
    ids=["empty (a client killed before its body)", "a metadata part that is no JSON, no content part"],
)
def test_a_multipart_upload_that_cannot_be_parsed_is_400_without_a_traceback(gcs, client, body, capfd):
    name = f"bucket-{next(_bucket_count)}"
    client.create_bucket(name)
    reply = requests.post(
        f"{gcs.url}/upload/storage/v1/b/{name}/o?uploadType=multipart",
        data=body,
        headers={"Content-Type": "multipart/related; boundary=b"},
        timeout=10,
    )
    assert reply.status_code == 400 and "malformed" in reply.json()["error"]["message"]
    assert list(client.bucket(name).list_blobs()) == []  # nothing was written
    assert "Traceback" not in capfd.readouterr().err
