"""What one object write costs in devstack's GCS stand-in as the bucket fills.

Seeds the bucket to each size through the stand-in's storage layer (fast, no HTTP), then times
conditional uploads through google-cloud-storage, as the controller's state store makes them.
Run it from any checkout to compare commits side by side:

    .venv/bin/python bench/gcs_write_cost.py [--sizes 100,10000,100000] [--writes 200]
    .venv/bin/python bench/gcs_write_cost.py --checkout /tmp/old   # the same, on another commit

Prints, per bucket size, the median and p95 milliseconds of a write, the median milliseconds of
two objects.list calls (the `--writes` objects just written, under a prefix of their own: one
small page; and a full page of 1,000 seeded objects from the middle of the bucket, by page
token), and the seconds seeding took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _median_ms(call, times: int = 10) -> float:
    taken = []
    for _ in range(times):
        t0 = time.perf_counter()
        call()
        taken.append((time.perf_counter() - t0) * 1000)
    return statistics.median(taken)


def _measure(size: int, writes: int) -> tuple[float, float, float, float, float]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from devstack.gcs import start_gcs

    with tempfile.TemporaryDirectory() as data_dir, start_gcs(data_dir=data_dir) as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        client = storage.Client(project="bench", credentials=AnonymousCredentials())
        bucket = client.create_bucket("state")
        started = time.perf_counter()
        backend = gcs.storage  # the stand-in's own storage layer
        for i in range(size):
            backend.create_file(
                "state", f"jobs/seed-{i:07d}.json", b"{}", {"contentType": "application/json"}
            )
        seeded = time.perf_counter() - started
        times = []
        for i in range(writes):
            blob = bucket.blob(f"jobs/new-{i:05d}.json")
            t0 = time.perf_counter()
            blob.upload_from_string(b'{"state": "pending"}', if_generation_match=0)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        small = _median_ms(lambda: list(client.list_blobs(bucket, prefix="jobs/new-", page_size=1000)))
        middle = f"jobs/seed-{size // 2:07d}.json"  # a page token is the last name served

        def full_page() -> None:
            page = client.list_blobs(bucket, prefix="jobs/seed-", page_size=1000, page_token=middle)
            next(page.pages)

        full = _median_ms(full_page)
        return statistics.median(times), times[int(len(times) * 0.95) - 1], small, full, seeded


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,10000,100000", help="bucket sizes, comma-separated")
    parser.add_argument("--writes", type=int, default=200, help="timed writes per size")
    parser.add_argument("--checkout", help="run against the devstack of another checkout")
    args = parser.parse_args()
    if args.checkout:
        sys.path.insert(0, os.path.abspath(args.checkout))
    import devstack

    print(f"devstack from {os.path.dirname(os.path.dirname(devstack.__file__))}; load {os.getloadavg()}")
    print(
        f"{'objects':>9} {'write p50 ms':>13} {'write p95 ms':>13} {'small list ms':>14}"
        f" {'1,000-page ms':>14} {'seed s':>8}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        p50, p95, small, full, seeded = _measure(size, args.writes)
        print(f"{size:>9} {p50:>13.2f} {p95:>13.2f} {small:>14.2f} {full:>14.2f} {seeded:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
