"""Leader election over one GCS object, so that exactly one controller acts at a time.

`{name}/leader.json` holds `{"holder", "acquired_at", "duration_seconds", ...}` and changes only
through uploads/deletes with `ifGenerationMatch`, so of two controllers acting on what they both
read, one gets 412 and loses. Whoever holds the lease renews it before it runs out; anyone may
take it over once it has run out.

No two clocks are compared. Expiry is judged with each host's own monotonic clock:
  - the holder counts its lease from the moment it *started* the write that succeeded, so its
    view ends no later than the truth (`is_held`, less a safety margin for the time an action
    takes once it checked);
  - a contender counts from the moment it first *read* a given generation: an object that has
    not changed for `duration_seconds` of the contender's own time has not been renewed for at
    least that long, so the holder's own view of it has ended (it was written before it was read).
Only the clocks' rates must agree (they do, to parts per million). A new contender therefore
waits one full lease duration before taking over a lease it never saw change; a holder that shuts
down cleanly deletes the object so its successor need not wait.

Fencing: `fence` is the object's generation at the moment we acquired it. GCS generations only
grow, so each new holder has a higher fence than every earlier one; state-store writes carry it
and a stalled former leader's writes are refused (`controller.store.Fenced`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters import gcs as gcs_client

LEASE_OBJECT_NAME = "leader.json"
_log = logs.get("relaunch.lease")


class LeaseNotHeld(RuntimeError):
    """`fence` was asked for before this holder ever acquired the lease, or an action that needs
    a valid lease (`check`) found none."""


@dataclass(frozen=True)
class _Seen:
    holder: str
    generation: int
    garbled: bool = False


class Lease:
    def __init__(
        self,
        bucket: str,
        name: str,
        holder_id: str,
        duration_seconds: float,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        safety_margin_seconds: float | None = None,
        timeout: float = gcs_client.CALL_TIMEOUT_SECONDS,
    ):
        if duration_seconds <= 0:
            raise ValueError("lease duration must be positive")
        self.holder_id = holder_id
        self.duration_seconds = float(duration_seconds)
        # Stop believing we lead a little before the lease really runs out: covers the time
        # between checking and the side effect landing (an RPC's flight time).
        self.safety_margin_seconds = (
            min(5.0, self.duration_seconds / 5) if safety_margin_seconds is None else safety_margin_seconds
        )
        self._clock = clock  # monotonic: only durations measured on this host are compared
        # One lease call must give up well before the lease it protects could run out.
        self._timeout = min(timeout, max(0.5, self.duration_seconds / 3))
        self._deadline = max(1.0, self.duration_seconds / 2)
        self._client = client or gcs_client.make_client()
        name = name.strip("/")
        self._blob = self._client.bucket(bucket).blob(
            f"{name}/{LEASE_OBJECT_NAME}" if name else LEASE_OBJECT_NAME
        )
        self._lock = threading.Lock()
        self._generation: int | None = None  # of our last successful write; None = not held
        # What is_held reads, one attribute so it needs no lock: a renewal stuck in retries
        # must not block the daemon asking whether it may act. 0 = not held.
        self._held_until = 0.0
        self._fence: int | None = None
        self._acquired_at = 0.0
        # Another holder's generation and when (our clock) we first saw it.
        self._observed: tuple[int, float] | None = None
        self._abandoned = False
        self._log = _log.bind(holder=holder_id, lease=f"gs://{bucket}/{self._blob.name}")

    @property
    def object_name(self) -> str:
        return self._blob.name

    @property
    def fence(self) -> int:
        if self._fence is None:
            raise LeaseNotHeld(f"{self.holder_id} has never acquired {self._blob.name}")
        return self._fence

    def remaining(self) -> float:
        """Seconds for which this holder may still act (margin deducted); <= 0: not held."""
        return self._held_until - self.safety_margin_seconds - self._clock()

    def is_held(self) -> bool:
        return self.remaining() > 0

    def check(self, what: str = "act") -> float:
        """Raise LeaseNotHeld unless the lease is still valid; the seconds left to act otherwise.

        Called just before every side effect, so a leader that stalled past its lease (GC pause,
        SIGSTOP, a blocked rate limiter) finds out before it acts, not after."""
        left = self.remaining()
        if left <= 0:
            raise LeaseNotHeld(f"{self.holder_id} may not {what}: the leader lease is not held")
        return left

    def abandon(self) -> None:
        """Stop believing we lead, at once (a fenced write told us someone else does).

        A renewal in flight meanwhile does not revive it; only a later `try_acquire` can."""
        self._abandoned = True
        self._held_until = 0.0
        with self._lock:
            self._set_held(None)

    def _set_held(self, generation: int | None, started_at: float = 0.0) -> None:
        self._generation = generation
        self._held_until = started_at + self.duration_seconds if generation is not None else 0.0

    # -- GCS -----------------------------------------------------------------------------

    def _read(self) -> _Seen | None:
        blob = self._blob.bucket.blob(self._blob.name)
        try:
            body = gcs_client.call(
                lambda: blob.download_as_bytes(timeout=self._timeout, retry=None),
                what="read lease",
                deadline=self._deadline,
            )
        except gexc.NotFound:
            return None
        generation = int(blob.generation)
        try:
            doc = json.loads(body)
            return _Seen(str(doc["holder"]), generation)
        except (ValueError, KeyError, TypeError) as exc:
            # A garbled lease protects nobody: treat it as expired so it can be replaced.
            self._log.warning("unreadable lease object, treating it as expired", error=str(exc))
            return _Seen("", generation, garbled=True)

    def _write(self, if_generation_match: int, acquired_at: float) -> int | None:
        """Write our lease conditionally; the new generation, or None if someone beat us."""
        doc = {
            "holder": self.holder_id,
            # For people reading the object; no controller compares these with its own clock.
            "written_at_wall": time.time(),
            "acquired_at_wall": acquired_at,
            "duration_seconds": self.duration_seconds,
            # Only for controllers of an older release still running during a rollout: they
            # judge expiry by this wall time.
            "expires_at": time.time() + self.duration_seconds,
        }
        try:
            return gcs_client.conditional_upload(
                self._blob.bucket.blob(self._blob.name),
                json.dumps(doc).encode(),
                if_generation_match=if_generation_match,
                timeout=self._timeout,
                deadline=self._deadline,
            )
        except gexc.PreconditionFailed:
            return None

    def _expired_for_us(self, seen: _Seen, now: float) -> bool:
        """Has `seen` stayed unchanged for a whole lease duration of our own time?"""
        if seen.garbled:
            return True
        if self._observed is None or self._observed[0] != seen.generation:
            self._observed = (seen.generation, now)
            return False
        return now - self._observed[1] >= self.duration_seconds

    # -- operations ----------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if it is free or has run out, renew it if it is ours. True = we hold it.

        Errors reaching GCS propagate (after a bounded retry); they leave our view unchanged."""
        with self._lock:
            if self._generation is not None and self.is_held():
                return self._renew_locked()
            # Read the clock before talking to GCS: a contender's notion of expiry errs late.
            now = self._clock()
            seen = self._read()
            if seen is not None and not self._expired_for_us(seen, self._clock()):
                self._log.debug("lease held by another controller", other=seen.holder)
                self._set_held(None)
                return False
            started = self._clock()  # the holder counts from before its write: errs early
            acquired_at = time.time()
            generation = self._write(0 if seen is None else seen.generation, acquired_at=acquired_at)
            if generation is None:
                self._log.info("lost the race for the lease")
                self._set_held(None)
                return False
            self._fence, self._acquired_at, self._observed = generation, acquired_at, None
            self._abandoned = False
            self._log.info(
                "lease acquired",
                fence=generation,
                took_over=None if seen is None else seen.holder or "<garbled>",
                waited=round(started - now, 3),
            )
            self._set_held(generation, started)
            return True

    def renew(self) -> bool:
        """Extend our lease. False = lost: never acquired, run out, or someone else wrote it.

        Errors reaching GCS propagate; the lease stays ours until our own view of it runs out."""
        with self._lock:
            return self._renew_locked()

    def _renew_locked(self) -> bool:
        if self._generation is None:
            return False
        started = self._clock()
        if started >= self._held_until:
            # Anyone may have taken over meanwhile; acting on after this would be unsafe.
            self._log.warning("lease ran out before it was renewed")
            self._set_held(None)
            return False
        generation = self._write(self._generation, acquired_at=self._acquired_at)
        if generation is None:
            self._log.warning("lease lost: another controller wrote it")
            self._set_held(None)
            return False
        if self._abandoned:  # abandoned while the write was in flight
            self._set_held(None)
            return False
        self._set_held(generation, started)
        return True

    def release(self) -> None:
        """Give the lease up now (if it is still ours) so a successor need not wait for expiry."""
        with self._lock:
            generation = self._generation
            self._set_held(None)
            if generation is None:
                return
            blob = self._blob.bucket.blob(self._blob.name)
            try:
                gcs_client.call(
                    lambda: blob.delete(if_generation_match=generation, timeout=self._timeout, retry=None),
                    what="release lease",
                    deadline=self._deadline,
                )
                self._log.info("lease released")
            except (gexc.PreconditionFailed, gexc.NotFound):
                pass  # not ours any more, or already gone: nothing to give back


class LeaseKeeper:
    """Renews a held lease every `renew_every` seconds on a daemon thread, so that a slow pass
    of the main loop can never let the lease run out under a leader that still acts.

    Calls `on_lost()` once, from that thread, when a renewal says the lease is gone, or when
    renewals keep failing until our own view of the lease has run out; then the thread ends.
    """

    def __init__(self, lease: Lease, renew_every: float, on_lost: Callable[[], None]):
        if renew_every <= 0:
            raise ValueError("renew_every must be positive")
        self.lease = lease
        self.renew_every = renew_every
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-keeper:{lease.holder_id}", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                still_ours = self.lease.renew()
            except Exception as exc:  # GCS unreachable after retries
                # Not a verdict: keep trying while our own view of the lease is still valid.
                still_ours = self.lease.is_held()
                _log.warning(
                    "lease renewal failed",
                    holder=self.lease.holder_id,
                    error=repr(exc),
                    still_held=still_ours,
                )
            if not still_ours and not self._stop.is_set():
                _log.error("lease lost", holder=self.lease.holder_id)
                self.on_lost()
                return
