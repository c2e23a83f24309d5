"""Peer liveness: the pure decision, and a 2-node gang whose peer goes silent or dies."""

import os
import re
import signal
import threading
import time

import psutil
import pytest

from tests.support.gang import TINY
from trainer import layout, storage
from trainer.liveness import GangView, Heartbeat, SilenceTracker, collective_timeout_seconds

SILENT_RANK_1 = re.compile(r"rank 1 (sent no|never sent a) heartbeat for [0-9.]+s")


def _view(beats, failed=0, done=0):
    return GangView(beats=beats, failed=failed, done=done)


def test_a_peer_whose_counter_moves_is_alive_and_one_that_stops_is_lost_after_the_timeout():
    tracker = SilenceTracker(peers=[1, 2], timeout=10.0, now=0.0)
    for second in range(1, 11):  # rank 1 keeps beating; rank 2 stopped after its first beat at 1 s
        assert tracker.observe(_view({1: second, 2: 1}), now=float(second)) is None
    loss = tracker.observe(_view({1: 11, 2: 1}), now=11.0)
    assert loss is not None and loss.silent_rank == 2 and loss.silent_seconds == 10.0


def test_silence_is_counted_from_the_last_change_of_the_counter():
    tracker = SilenceTracker(peers=[1], timeout=10.0, now=0.0)
    assert tracker.observe(_view({1: 1}), now=5.0) is None
    assert tracker.observe(_view({1: 1}), now=14.9) is None
    loss = tracker.observe(_view({1: 1}), now=15.0)
    assert loss is not None and loss.silent_rank == 1 and loss.silent_seconds == 10.0
    assert "rank 1 sent no heartbeat for 10.0s" in loss.detail


def test_a_peer_that_never_beats_is_lost_after_the_timeout_from_the_start():
    tracker = SilenceTracker(peers=[0, 3], timeout=10.0, now=100.0)
    assert tracker.observe(_view({0: 1, 3: None}), now=109.0) is None
    loss = tracker.observe(_view({0: 2, 3: None}), now=110.0)
    assert loss is not None and loss.silent_rank == 3 and "never sent a heartbeat" in loss.detail


def test_a_peer_that_announced_its_failure_breaks_the_gang_at_once():
    tracker = SilenceTracker(peers=[1], timeout=10.0, now=0.0)
    loss = tracker.observe(_view({1: 1}, failed=1), now=0.5)
    assert loss is not None and loss.silent_rank is None and "failed" in loss.detail


class _RecordingChannel:
    """Stands in for the rendezvous store's keys (trainer code of ours, not a Google client)."""

    peers = [1]

    def __init__(self):
        self.first_beat = threading.Event()
        self.beats: list[int] = []

    def beat(self, count: int) -> None:
        self.beats.append(count)
        self.first_beat.set()

    def read(self) -> GangView:
        return _view({1: None})

    def announce(self, orderly: bool) -> None:
        pass


def test_the_first_heartbeat_goes_out_when_the_heartbeat_starts_not_an_interval_later():
    channel = _RecordingChannel()
    heartbeat = Heartbeat(channel, timeout=600.0, on_loss=lambda loss: None, interval=600.0).start()
    try:
        # With a 10-minute interval, a beat within seconds can only be the one sent at start: a
        # peer frozen in its first second is then known to have been there.
        assert channel.first_beat.wait(timeout=10.0)
        assert channel.beats == [1]
    finally:
        heartbeat.leave(orderly=True)


def test_the_collective_timeout_follows_the_step_time_above_a_floor():
    assert collective_timeout_seconds(0.05) == 120.0
    assert collective_timeout_seconds(10.0) == 500.0


def _freeze(node) -> list[psutil.Process]:
    """SIGSTOP a launcher and its workers: a host gone without closing a single connection, as a
    reclaimed VM or a network partition looks from the others (and as NCCL sees any lost peer)."""
    family = [psutil.Process(node.proc.pid), *psutil.Process(node.proc.pid).children(recursive=True)]
    for proc in family:
        os.kill(proc.pid, signal.SIGSTOP)
    return family


@pytest.mark.slow
def test_a_silent_peer_is_detected_by_the_heartbeat_and_the_survivor_exits_within_30s(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    env = {"RELAUNCH_TEST_HOLD_AT_STEP": "3", "RELAUNCH_TEST_HOLD_RANK": "1"}
    args = ["--steps", "6", "--peer-timeout", "8", *TINY]
    gang = start_gang(args, nodes=2, nproc=1, checkpoint_uri=root, env=env)
    gang.nodes[1].wait_for("test hook: holding for SIGTERM", step=3)
    # Rank 0 now waits in the step's all-reduce for rank 1; no socket is ever closed, so gloo
    # (like NCCL) would wait for its 10-minute timeout. Only the heartbeat can tell.
    frozen = _freeze(gang.nodes[1])
    started = time.monotonic()
    try:
        assert gang.chief.wait(timeout=60) == layout.EXIT_RUNTIME, gang.chief.output()
        took = time.monotonic() - started
    finally:
        for proc in frozen:
            proc.kill()
    assert took < 30, f"survivor took {took:.1f}s"
    # Rank 1 beats first a second after its heartbeat starts; on a loaded machine it can reach the
    # hold and be frozen before that first beat, and the survivor then says it "never sent" one.
    # Either way the silent rank is named and the survivor stops on the heartbeat.
    (lost,) = gang.chief.find("peer lost")
    assert lost["silent_rank"] == 1 and SILENT_RANK_1.match(lost["detail"]), lost["detail"]
    (survivor,) = storage.read_replica_exits(root, 1)
    assert (survivor.replica, survivor.reason, survivor.exit_code) == ("node-0", "stopped_by_peer", 70)
    assert SILENT_RANK_1.match(survivor.detail.removeprefix("peer lost: ")), survivor.detail
    assert layout.first_failed_replica([survivor]) is None  # node 0 did not fail on its own
    assert storage.read_exit_record(root, 1).reason == "runtime_error"


@pytest.mark.slow
def test_a_killed_peer_stops_the_survivors_within_30s_with_the_peer_loss_record(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    env = {"RELAUNCH_TEST_HOLD_AT_STEP": "3", "RELAUNCH_TEST_HOLD_RANK": "2"}  # node 1's first rank
    gang = start_gang(["--steps", "6", *TINY], nodes=2, nproc=2, checkpoint_uri=root, env=env)
    gang.nodes[1].wait_for("test hook: holding for SIGTERM", step=3)
    started = time.monotonic()
    gang.nodes[1].kill_tree()  # node 1 vanishes (kill -9): it leaves no record of its own
    assert gang.chief.wait(timeout=60) == layout.EXIT_RUNTIME, gang.chief.output()
    assert time.monotonic() - started < 30
    (survivor,) = storage.read_replica_exits(root, 1)
    assert (survivor.replica, survivor.reason, survivor.exit_code) == ("node-0", "stopped_by_peer", 70)
