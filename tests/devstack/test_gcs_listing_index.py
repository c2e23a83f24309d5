"""The GCS stand-in's listing index: pages match the full scan, and a page's cost is the page.

Driven on the storage object directly (no I/O): the wire format of objects.list is covered by
test_gcs.py through the real client; here the question is what a page costs and that the
index answers exactly what filtering and sorting every object answers.
"""

from __future__ import annotations

import random

from devstack.gcs.storage import GcsStorage


def _storage_with(names: list[str]) -> GcsStorage:
    storage = GcsStorage(None)
    storage.create_bucket("b", {"name": "b"})
    for name in names:
        storage.commit({"bucket": "b", "name": name}, name.encode())
    return storage


def _scan_pages(storage: GcsStorage, prefix: str, delimiter: str, page_size: int):
    """Every page the way the handler served them before the index: filter, sort, slice."""
    files, prefixes = storage.get_file_list("b", prefix or None, delimiter or None)
    names = sorted(item["name"] for item in files)
    pages, after = [], ""
    while True:
        rest = [name for name in names if name > after] if after else names
        page = rest[:page_size]
        pages.append((page, [] if after else sorted(prefixes), len(rest) > page_size))
        if len(rest) <= page_size:
            return pages
        after = page[-1]


def _index_pages(storage: GcsStorage, prefix: str, delimiter: str, page_size: int):
    pages, after = [], ""
    while True:
        items, prefixes, more = storage.list_page("b", prefix, delimiter, after, page_size)
        page = [item["name"] for item in items]
        pages.append((page, prefixes, more))
        if not more:
            return pages
        after = page[-1]


def test_index_pages_equal_the_full_scan_for_prefixes_delimiters_and_page_sizes():
    rng = random.Random(23)
    parts = ["a", "a-b", "a.b", "jobs", "ckpt", "x/y", "z", "é", "a/"]
    names = {"/".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(600)}
    storage = _storage_with(sorted(names))
    for name in rng.sample(sorted(names), 100):  # removals keep the index in step
        storage.remove("b", name)
    storage.commit({"bucket": "b", "name": "a"}, b"again")  # a replaced object stays once
    for prefix in ["", "a", "a/", "a-b/", "jobs/", "x", "nothing/"]:
        for delimiter in ["", "/", ".", "-b"]:
            for page_size in [1, 7, 1000]:
                assert _index_pages(storage, prefix, delimiter, page_size) == _scan_pages(
                    storage, prefix, delimiter, page_size
                ), (prefix, delimiter, page_size)


def _examined_by_one_page(bucket_size: int) -> int:
    # 10 jobs' documents under the listed prefix, the rest of the bucket elsewhere around it.
    others = [f"{side}/job-{i:06d}.json" for i in range(bucket_size) for side in ("aaa", "zzz")]
    listed = [f"state/jobs/job-{i:02d}.json" for i in range(10)]
    storage = _storage_with(others + listed)
    before = storage.names_examined
    items, _, more = storage.list_page("b", "state/jobs/", "", "state/jobs/job-02.json", 5)
    assert [item["name"] for item in items] == listed[3:8]
    assert more
    return storage.names_examined - before


def test_a_listing_page_examines_the_same_names_whatever_the_bucket_holds():
    small, large = _examined_by_one_page(100), _examined_by_one_page(20_000)
    assert small == large == 6  # the five served and one to know more remain
