"""Leader lease on the GCS stand-in, with a hand-driven clock (no sleeping for expiry).

The clock stands for each host's monotonic clock. A contender judges expiry by how long it has
itself seen one generation unchanged, so tests let it look once (`try_acquire` -> False) before
they advance the clock past the lease.
"""

from __future__ import annotations

import itertools
import threading

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from controller.adapters.lease import Lease, LeaseKeeper, LeaseNotHeld
from controller.store import Fenced
from controller.store.gcs import GcsStateStore
from devstack.gcs import start_gcs

BUCKET = "relaunch-leases"
DURATION = 30.0
_names = itertools.count()


class FakeClock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _client():
    return storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())


@pytest.fixture(scope="module")
def gcs_client():
    with start_gcs() as emulator, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        client = _client()
        client.create_bucket(BUCKET)
        yield client


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_lease(gcs_client, clock):
    name = f"controller-{next(_names)}"

    def make(holder: str, client=None, clock_=None) -> Lease:
        return Lease(BUCKET, name, holder, DURATION, client=client or gcs_client, clock=clock_ or clock)

    return make


def test_second_controller_cannot_acquire_while_the_first_holds(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    clock.advance(DURATION - 1)
    assert not b.try_acquire()
    assert not b.is_held()
    with pytest.raises(LeaseNotHeld):
        b.fence


def test_holder_renews_and_keeps_it_past_the_original_expiry(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    fence = a.fence
    for _ in range(5):
        clock.advance(DURATION / 2)
        assert a.renew() and a.is_held()
    assert not b.try_acquire()
    assert a.fence == fence  # renewal is not a change of holder


def test_is_held_ends_with_a_safety_margin_before_expiry(make_lease, clock):
    a = make_lease("a")
    assert a.try_acquire() and a.is_held()
    clock.advance(DURATION - a.safety_margin_seconds)
    assert not a.is_held()


def test_takeover_after_expiry_and_the_old_holder_learns_it_lost(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    assert not b.try_acquire()  # b starts counting from here
    clock.advance(DURATION + 0.1)
    assert b.try_acquire() and b.is_held()
    assert a.renew() is False
    assert not a.is_held()
    # And a cannot grab it back while b keeps it.
    assert not a.try_acquire()


def test_renew_after_our_own_expiry_is_refused_even_if_nobody_took_over(make_lease, clock):
    a = make_lease("a")
    assert a.try_acquire()
    clock.advance(DURATION + 1)
    assert a.renew() is False


def test_fence_strictly_increases_with_every_change_of_holder(make_lease, clock):
    holders = [make_lease(h) for h in ("a", "b", "c", "a2")]
    fences = []
    for lease in holders:
        if fences:
            assert not lease.try_acquire()  # sees the previous holder's lease first
            clock.advance(DURATION + 1)
        assert lease.try_acquire()
        fences.append(lease.fence)
    assert fences == sorted(set(fences)) and len(fences) == 4


def test_release_lets_another_acquire_immediately(make_lease):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    a.release()
    assert not a.is_held()
    assert b.try_acquire()
    assert b.fence > a.fence


def test_release_after_losing_does_not_delete_the_new_holders_lease(make_lease, clock):
    a, b, c = make_lease("a"), make_lease("b"), make_lease("c")
    assert a.try_acquire()
    assert not b.try_acquire()
    clock.advance(DURATION + 1)
    assert b.try_acquire()
    a.release()  # a does not know yet that it lost
    assert not c.try_acquire()
    assert b.renew()


def test_fence_before_acquiring_is_an_error(make_lease):
    with pytest.raises(LeaseNotHeld):
        make_lease("a").fence


def test_racing_controllers_exactly_one_wins(make_lease, clock):
    for round_ in range(2):  # once on a fresh object, once on an expired one
        leases = [make_lease(f"r{round_}-{i}", client=_client()) for i in range(6)]
        if round_:
            assert not any(lease.try_acquire() for lease in leases)  # all see the old lease
            clock.advance(DURATION + 1)
        barrier = threading.Barrier(len(leases))
        won = []

        def contend(lease):
            barrier.wait(timeout=30)
            if lease.try_acquire():
                won.append(lease.holder_id)

        threads = [threading.Thread(target=contend, args=(lease,)) for lease in leases]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(won) == 1, won


def test_stale_leaders_store_write_is_refused(make_lease, clock, gcs_client):
    store = GcsStateStore(BUCKET, f"state-{next(_names)}", client=gcs_client)
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    version = store.create("jobs/demo-gpt", {"phase": "running", "by": "a"}, fence=a.fence)
    assert not b.try_acquire()

    clock.advance(DURATION + 1)  # a stalls past its lease
    assert b.try_acquire()
    current = store.get("jobs/demo-gpt")
    version = store.put(
        "jobs/demo-gpt", {"phase": "resubmitting", "by": "b"}, expected_version=current.version, fence=b.fence
    )

    # a wakes up, re-reads (so its version is current) and still must not write.
    with pytest.raises(Fenced):
        store.put("jobs/demo-gpt", {"phase": "cancelled", "by": "a"}, expected_version=version, fence=a.fence)
    assert store.get("jobs/demo-gpt").document["by"] == "b"


def test_keeper_reports_a_lost_lease(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    lost = threading.Event()
    assert not b.try_acquire()
    # a stalls past its lease before its keeper's first renewal (advancing the clock inside the
    # keeper instead raced its first renewal: a renewal just before the advance is a new
    # generation, which rightly restarts b's count).
    clock.advance(DURATION + 1)
    with LeaseKeeper(a, renew_every=0.02, on_lost=lost.set):
        assert b.try_acquire()
        assert lost.wait(timeout=20)


def test_keeper_keeps_the_lease_alive(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    lost = threading.Event()
    renewed = threading.Condition()
    renewal_clock_readings = []
    plain_renew = a.renew

    def recording_renew():
        reading = clock.now
        result = plain_renew()
        with renewed:
            renewal_clock_readings.append(reading)
            renewed.notify_all()
        return result

    a.renew = recording_renew
    with LeaseKeeper(a, renew_every=0.02, on_lost=lost.set):
        for _ in range(3):  # more than one lease duration in total, in steps it can keep up with
            with renewed:
                assert renewed.wait_for(lambda: clock.now in renewal_clock_readings, timeout=20)
            clock.advance(DURATION * 0.6)
        with renewed:
            assert renewed.wait_for(lambda: clock.now in renewal_clock_readings, timeout=20)
        assert not b.try_acquire()
        assert not lost.is_set()


def test_a_clock_step_on_one_host_does_not_make_two_leaders(make_lease, clock):
    """Finding 7: expiry used to compare the holder's written wall time with the reader's clock,
    so a reader whose clock ran a lease-length ahead took over a lease still being renewed."""
    ahead = FakeClock(clock.now + DURATION + 60)  # b's clock reads far ahead of a's
    a, b = make_lease("a"), make_lease("b", clock_=ahead)
    assert a.try_acquire()
    assert not b.try_acquire()
    for _ in range(4):  # a keeps renewing; b's clock keeps running, a lease length at a time
        clock.advance(DURATION / 2)
        ahead.advance(DURATION / 2)
        assert a.renew() and a.is_held()
        assert not b.try_acquire()
        assert not b.is_held()


def test_a_contender_waits_a_whole_lease_of_its_own_time_before_taking_over(make_lease, clock):
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    assert not b.try_acquire()
    clock.advance(DURATION - 0.5)
    assert not b.try_acquire()  # a's view of its lease has not run out yet
    assert not a.is_held()  # ... but a stopped acting a safety margin earlier
    clock.advance(1.0)
    assert b.try_acquire()


def test_check_refuses_to_act_once_the_lease_ran_out(make_lease, clock):
    a = make_lease("a")
    assert a.try_acquire()
    assert 0 < a.check() <= DURATION - a.safety_margin_seconds
    clock.advance(DURATION - a.safety_margin_seconds)
    with pytest.raises(LeaseNotHeld):
        a.check("create a CustomJob")


def test_abandon_stops_acting_at_once_and_renew_does_not_revive_it(make_lease):
    a = make_lease("a")
    assert a.try_acquire()
    a.abandon()
    assert not a.is_held()
    assert a.renew() is False
