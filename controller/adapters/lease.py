"""Leader election over one GCS object, so that exactly one controller acts at a time.

`{name}/leader.json` holds `{"holder", "acquired_at", "expires_at"}` and changes only through
uploads/deletes with `ifGenerationMatch`, so of two controllers acting on what they both read,
one gets 412 and loses. Whoever holds the lease renews it before it expires; anyone may take it
over once it has expired.

Fencing: `fence` is the object's generation at the moment we acquired it. GCS generations only
grow, so each new holder has a higher fence than every earlier one; state-store writes carry it
and a stalled former leader's writes are refused (`controller.store.Fenced`).

Expiry compares the holder's written `expires_at` with the reader's clock, so controllers' clocks
must roughly agree; `is_held` keeps a safety margin for that skew and for stalls.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.api_core import exceptions as gexc

from controller import logs
from controller.adapters import gcs as gcs_client

LEASE_OBJECT_NAME = "leader.json"
_log = logs.get("relaunch.lease")


class LeaseNotHeld(RuntimeError):
    """`fence` was asked for before this holder ever acquired the lease."""


@dataclass(frozen=True)
class _Seen:
    holder: str
    expires_at: float
    generation: int


class Lease:
    def __init__(
        self,
        bucket: str,
        name: str,
        holder_id: str,
        duration_seconds: float,
        client=None,
        clock: Callable[[], float] = time.time,
        *,
        safety_margin_seconds: float | None = None,
        timeout: float = gcs_client.CALL_TIMEOUT_SECONDS,
    ):
        if duration_seconds <= 0:
            raise ValueError("lease duration must be positive")
        self.holder_id = holder_id
        self.duration_seconds = float(duration_seconds)
        # Stop believing we lead a little before the lease really runs out: covers clock skew
        # between controllers and the time a renewal takes.
        self.safety_margin_seconds = (
            min(5.0, self.duration_seconds / 5) if safety_margin_seconds is None else safety_margin_seconds
        )
        self._clock = clock
        self._timeout = timeout
        self._client = client or gcs_client.make_client()
        name = name.strip("/")
        self._blob = self._client.bucket(bucket).blob(
            f"{name}/{LEASE_OBJECT_NAME}" if name else LEASE_OBJECT_NAME
        )
        self._lock = threading.Lock()
        self._generation: int | None = None  # of our last successful write; None = not held
        self._expires_at = 0.0  # by our own clock
        # What is_held reads, one attribute so it needs no lock: a renewal stuck in retries
        # must not block the daemon asking whether it may act. 0 = not held.
        self._held_until = 0.0
        self._fence: int | None = None
        self._acquired_at = 0.0
        self._log = _log.bind(holder=holder_id, lease=f"gs://{bucket}/{self._blob.name}")

    @property
    def object_name(self) -> str:
        return self._blob.name

    @property
    def fence(self) -> int:
        if self._fence is None:
            raise LeaseNotHeld(f"{self.holder_id} has never acquired {self._blob.name}")
        return self._fence

    def is_held(self) -> bool:
        return self._clock() < self._held_until - self.safety_margin_seconds

    def _set_held(self, generation: int | None, expires_at: float = 0.0) -> None:
        self._generation, self._expires_at = generation, expires_at
        self._held_until = expires_at if generation is not None else 0.0

    # -- GCS -----------------------------------------------------------------------------

    def _read(self) -> _Seen | None:
        blob = self._blob.bucket.blob(self._blob.name)
        try:
            body = gcs_client.call(
                lambda: blob.download_as_bytes(timeout=self._timeout, retry=None), what="read lease"
            )
        except gexc.NotFound:
            return None
        generation = int(blob.generation)
        try:
            doc = json.loads(body)
            return _Seen(str(doc["holder"]), float(doc["expires_at"]), generation)
        except (ValueError, KeyError, TypeError) as exc:
            # A garbled lease protects nobody: treat it as expired so it can be replaced.
            self._log.warning("unreadable lease object, treating it as expired", error=str(exc))
            return _Seen("", float("-inf"), generation)

    def _write(self, if_generation_match: int, acquired_at: float, now: float) -> int | None:
        """Write our lease conditionally; the new generation, or None if someone beat us."""
        doc = {
            "holder": self.holder_id,
            "acquired_at": acquired_at,
            "expires_at": now + self.duration_seconds,
        }
        try:
            return gcs_client.conditional_upload(
                self._blob.bucket.blob(self._blob.name),
                json.dumps(doc).encode(),
                if_generation_match=if_generation_match,
                timeout=self._timeout,
            )
        except gexc.PreconditionFailed:
            return None

    # -- operations ----------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if it is free or expired, renew it if it is ours. True = we hold it."""
        with self._lock:
            # Read the clock before talking to GCS: our notion of expiry errs early, never late.
            now = self._clock()
            seen = self._read()
            ours = seen is not None and seen.holder == self.holder_id and seen.generation == self._generation
            if seen is not None and not ours and seen.expires_at > now:
                self._log.debug(
                    "lease held by another controller",
                    other=seen.holder,
                    expires_in=round(seen.expires_at - now, 3),
                )
                self._set_held(None)
                return False
            acquired_at = self._acquired_at if ours else now
            generation = self._write(0 if seen is None else seen.generation, acquired_at=acquired_at, now=now)
            if generation is None:
                self._log.info("lost the race for the lease")
                self._set_held(None)
                return False
            if not ours:
                self._fence, self._acquired_at = generation, now
                self._log.info(
                    "lease acquired",
                    fence=generation,
                    took_over=None if seen is None else seen.holder or "<garbled>",
                )
            self._set_held(generation, now + self.duration_seconds)
            return True

    def renew(self) -> bool:
        """Extend our lease. False = lost: never acquired, expired, or someone else wrote it."""
        with self._lock:
            now = self._clock()
            if self._generation is None:
                return False
            if now >= self._expires_at:
                # Anyone may have taken over meanwhile; acting on after this would be unsafe.
                self._log.warning("lease expired before it was renewed")
                self._set_held(None)
                return False
            generation = self._write(self._generation, acquired_at=self._acquired_at, now=now)
            if generation is None:
                self._log.warning("lease lost: another controller wrote it")
                self._set_held(None)
                return False
            self._set_held(generation, now + self.duration_seconds)
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
                )
                self._log.info("lease released")
            except (gexc.PreconditionFailed, gexc.NotFound):
                pass  # not ours any more, or already gone: nothing to give back


class LeaseKeeper:
    """Renews a held lease every `renew_every` seconds on a daemon thread.

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

    def __exit__(self, *exc) -> None:
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
