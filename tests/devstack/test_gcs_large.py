"""A checkpoint-sized (200 MB) resumable upload and download through the GCS stand-in.

It runs in a fresh process so that the process's peak memory says whether the object was
ever held whole (by the client or the stand-in) instead of streamed.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import resource

SIZE = 200 * 1024 * 1024
PIECE = 8 * 1024 * 1024
CHUNK = 32 * 1024 * 1024  # the client's resumable chunk: several chunks per upload


def _write_random_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(SIZE // PIECE):
            piece = os.urandom(PIECE)
            digest.update(piece)
            f.write(piece)
    return digest.hexdigest()


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(PIECE):
            digest.update(piece)
    return digest.hexdigest()


def _round_trip(workdir: str, results) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from devstack.gcs import start_gcs

    source, copy = os.path.join(workdir, "source.bin"), os.path.join(workdir, "copy.bin")
    expected = _write_random_file(source)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with start_gcs(data_dir=os.path.join(workdir, "gcs")) as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        client = storage.Client(project="relaunch-test", credentials=AnonymousCredentials())
        bucket = client.create_bucket("checkpoints")
        blob = bucket.blob("run/step-0000000100/rank-00000.pt", chunk_size=CHUNK)
        blob.upload_from_filename(source, if_generation_match=0)  # client checks crc32c
        stored = bucket.get_blob(blob.name)
        stored.download_to_filename(copy)  # client checks X-Goog-Hash
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    results.put(
        {
            "expected": expected,
            "actual": _sha256_of(copy),
            "size": stored.size,
            "baseline": baseline,
            "peak": peak,
        }
    )


def test_200mb_resumable_round_trip_is_streamed_and_intact(tmp_path):
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    child = spawn.Process(target=_round_trip, args=(str(tmp_path), results))
    child.start()
    outcome = results.get(timeout=300)
    child.join(timeout=60)
    assert child.exitcode == 0

    assert outcome["size"] == SIZE
    assert outcome["actual"] == outcome["expected"]
    # Holding the object whole even once would add 200 MB; chunks of 32 MB add far less.
    assert outcome["peak"] - outcome["baseline"] < 150 * 1024 * 1024, outcome
