"""The checkpoint interval's ledger in both state stores: it round-trips, and concurrent
writers never lose an update (read-modify-write under the store's version precondition)."""

from __future__ import annotations

import itertools
import threading

import pytest

from controller.core.adaptive_interval import Ledger
from controller.core.checkpoint_interval import CapacityClass, EndingKind
from controller.service.interval import IntervalKeeper
from controller.settings import Settings
from controller.store.gcs import GcsStateStore
from controller.store.keys import INTERVAL_LEDGER_KEY
from controller.store.sqlite import SqliteStateStore
from tests.support.gcs import gcs_client_with_bucket

BUCKET = "relaunch-ledger"
SPOT = CapacityClass("us-central1", "n1-standard-4", "", "SPOT")
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def gcs_client():
    with gcs_client_with_bucket(BUCKET) as client:
        yield client


@pytest.fixture(params=["sqlite", "gcs"])
def store(request, tmp_path):
    if request.param == "sqlite":
        store = SqliteStateStore(tmp_path / "state.db")
        yield store
        store.close()
    else:
        client = request.getfixturevalue("gcs_client")
        yield GcsStateStore(BUCKET, f"ledger-{next(_prefixes)}/state", client=client)


def keeper(store) -> IntervalKeeper:
    return IntervalKeeper(Settings(), store, checkpoints=None)


def test_the_ledger_round_trips_through_the_store(store):
    ledger = keeper(store).update_ledger(
        lambda book: book.record("job", 1, SPOT, EndingKind.KILLED, 12.5, now=1.0)
    )
    assert keeper(store).ledger() == ledger
    assert Ledger.from_dict(store.get(INTERVAL_LEDGER_KEY).document) == ledger


def test_concurrent_writers_lose_no_ending_and_count_none_twice(store):
    writers = 6
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []

    def write(i: int) -> None:
        try:
            barrier.wait()
            mine = keeper(store)  # each its own keeper, as two controller processes would be
            for _ in range(2):  # the same ending twice: counted once
                mine.update_ledger(
                    lambda book: book.record(f"job-{i}", 1, SPOT, EndingKind.KILLED, 10.0, now=i)
                )
        except BaseException as error:  # reported by the assertion below
            failures.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    estimate = keeper(store).ledger().book.estimate(SPOT)
    assert (estimate.endings, estimate.exposure_seconds) == (writers, 10.0 * writers)
