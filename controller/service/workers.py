"""A small pool that runs per-job work (a timer's poke) off the control loop, one job at a time.

A job whose work is slow (a Vertex call retrying through an outage) holds one worker and no
one else: the loop that hands work out never waits for it. Work for a job that is already
queued or running is coalesced: it runs once more after the current run, never twice at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from controller import logs

log = logs.get("relaunch.workers")


class JobWorkers:
    def __init__(self, workers: int, name: str = "job"):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._busy: dict[str, bool] = {}  # job -> run again after the current run

    def run(self, job_id: str, work: Callable[[], object]) -> None:
        with self._lock:
            if job_id in self._busy:
                self._busy[job_id] = True
                return
            self._busy[job_id] = False
        self._pool.submit(self._loop, job_id, work)

    def busy(self) -> int:
        with self._lock:
            return len(self._busy)

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self, job_id: str, work: Callable[[], object]) -> None:
        while True:
            try:
                work()
            except Exception:  # Deposed included: the daemon steps down on its own signal
                log.exception("job work failed", job_id=job_id)
            with self._lock:
                if not self._busy.get(job_id):
                    self._busy.pop(job_id, None)
                    return
                self._busy[job_id] = False
