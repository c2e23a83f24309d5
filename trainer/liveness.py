"""Peer liveness beside the collectives: a lost replica is noticed in seconds, on any backend.

A collective only fails when its backend notices. gloo notices a peer whose sockets were closed
(its process died and the kernel reset the connection), but NCCL waits for its watchdog timeout
(10 minutes by default) and then aborts the process without a Python exception; and when a whole
host vanishes (Spot VM reclaimed, network partition) no connection is reset at all, so gloo waits
just as long. So every rank beats a counter in the rendezvous store (the TCPStore that node 0's
launcher hosts for the gang) and watches everyone else's, in a thread of its own that needs no
collective and no GPU. A counter that stops moving for `--peer-timeout` seconds, a peer that says
it failed, or a store that cannot be reached means the gang is broken: the rank reports a peer
loss (exit 70, replica reason `stopped_by_peer`) and ends its process, instead of blocking in a
collective that will never complete.

The decision (SilenceTracker) is pure; the store and the thread are the shell around it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

HEARTBEAT_INTERVAL_SECONDS = 1.0
DEFAULT_PEER_TIMEOUT_SECONDS = 15.0
_PREFIX = "relaunch/liveness/"


@dataclass(frozen=True)
class PeerLoss:
    detail: str  # one sentence for logs and the replica's exit record
    silent_rank: int | None = None  # the rank that stopped beating, when one did
    silent_seconds: float = 0.0


@dataclass(frozen=True)
class GangView:
    beats: dict[int, int | None]  # every other rank's counter (None: not written yet)
    failed: int  # how many ranks said they failed
    done: int  # how many ranks said the gang ends in order (completed, or the preemption stop)


class SilenceTracker:
    """When did each peer's counter last move? A peer silent for `timeout` seconds is lost."""

    def __init__(self, peers: list[int], timeout: float, now: float):
        self.timeout = timeout
        self._seen: dict[int, int | None] = dict.fromkeys(peers)
        self._moved_at = dict.fromkeys(peers, now)

    def observe(self, view: GangView, now: float) -> PeerLoss | None:
        if view.failed:
            return PeerLoss("another rank failed; the gang cannot go on")
        for rank, count in view.beats.items():
            if count is not None and count != self._seen.get(rank):
                self._seen[rank] = count
                self._moved_at[rank] = now
        rank, moved_at = min(self._moved_at.items(), key=lambda item: (item[1], item[0]))
        silent = now - moved_at
        if silent < self.timeout:
            return None
        never = self._seen[rank] is None
        what = "never sent a heartbeat" if never else "sent no heartbeat"
        return PeerLoss(f"rank {rank} {what} for {silent:.1f}s (timeout {self.timeout:g}s)", rank, silent)


class StoreChannel:
    """The heartbeat keys in a c10d store: `beat/<rank>`, and the counters `failed` and `done`."""

    def __init__(self, store, rank: int, world_size: int):
        self.store = store
        self.rank = rank
        self.peers = [r for r in range(world_size) if r != rank]

    def beat(self, count: int) -> None:
        self.store.set(f"beat/{self.rank}", str(count))

    def read(self) -> GangView:
        # add(key, 0) reads a counter without blocking on a key nobody has written yet.
        failed, done = self.store.add("failed", 0), self.store.add("done", 0)
        keys = [f"beat/{r}" for r in self.peers]
        if self.store.check(keys):
            values = dict(zip(self.peers, self.store.multi_get(keys), strict=True))
        else:  # early on: some ranks have not beaten yet (get would block until they do)
            values = {
                r: self.store.get(k) if self.store.check([k]) else None for r, k in zip(self.peers, keys)
            }
        beats = {r: int(v) if v is not None else None for r, v in values.items()}
        return GangView(beats, failed, done)

    def announce(self, orderly: bool) -> None:
        self.store.add("done" if orderly else "failed", 1)


class Heartbeat:
    """Beats and watches on a daemon thread; calls `on_loss` once if the gang breaks."""

    def __init__(
        self,
        channel: StoreChannel,
        timeout: float,
        on_loss: Callable[[PeerLoss], None],
        interval: float = HEARTBEAT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.channel = channel
        self.timeout = timeout
        self.interval = interval
        self.on_loss = on_loss
        self.clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relaunch-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def leave(self, orderly: bool) -> None:
        """Stop watching, and tell the others: `orderly` when the whole gang ends together (they
        stop watching too), else that this rank failed (they stop at once instead of waiting)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        try:
            self.channel.announce(orderly)
        except Exception:  # the store may be gone already; the others then find out on their own
            pass

    def _run(self) -> None:
        tracker = SilenceTracker(self.channel.peers, self.timeout, self.clock())
        count = 0
        # The first beat goes out at once, not an interval later: a peer that is lost within its
        # first second is then known to have been there ("sent no heartbeat").
        first = True
        while first or not self._stopped.wait(self.interval):
            first = False
            count += 1
            try:
                self.channel.beat(count)
                view = self.channel.read()
            except Exception as exc:  # store host gone (connection refused/reset) or silent (timeout)
                loss: PeerLoss | None = PeerLoss(f"the rendezvous store on node 0 is unreachable: {exc}")
            else:
                if view.done:
                    return
                loss = tracker.observe(view, self.clock())
            if loss is not None and not self._stopped.is_set():
                self._stopped.set()
                self.on_loss(loss)
                return


def connect_store(host: str, port: int, timeout: float):
    """A client of the gang's rendezvous store of its own (the process group's client is busy
    inside collectives), whose every operation gives up after `timeout` seconds."""
    import torch.distributed as dist

    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout))
    return dist.PrefixStore(_PREFIX, store)


def collective_timeout_seconds(step_seconds: float, floor: float = 120.0, factor: float = 50.0) -> float:
    """The process group's timeout once the step time is known: far above any healthy step
    (`factor` steps), never below `floor` (a checkpoint's collectives, a slow first step). It is
    the backstop for a gang whose processes are all alive but stuck; a lost peer is the
    heartbeat's to find, in seconds."""
    return max(floor, factor * step_seconds)
