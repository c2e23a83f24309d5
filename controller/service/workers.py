"""A small pool that runs per-job work (a timer's poke) off the control loop, one job at a time.

A job whose work is slow (a Vertex call retrying through an outage) holds one worker and no
one else: the loop that hands work out never waits for it. Work for a job that is already
queued or running is coalesced: it runs once more after the current run, never twice at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from controller import logs

log = logs.get("relaunch.workers")


class DaemonPool:
    """A fixed set of daemon threads running submitted calls in order of submission.

    Not a ThreadPoolExecutor: the interpreter joins those threads at exit, so a call stuck in
    a retrying RPC would hold a shutdown past its budget; daemon threads end with the process.
    """

    def __init__(self, workers: int, name: str):
        self._tasks: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[], object]) -> None:
        self._tasks.put(call)

    def stop(self) -> None:
        """Each thread ends after the call it is running (calls still queued are dropped)."""
        while True:
            try:
                self._tasks.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._tasks.put(None)

    def _serve(self) -> None:
        while True:
            call = self._tasks.get()
            if call is None:
                return
            try:
                call()
            except Exception:
                log.exception("worker call failed")


class JobWorkers:
    def __init__(self, workers: int, name: str = "job"):
        self._pool = DaemonPool(workers, name)
        self._lock = threading.Lock()
        self._busy: dict[str, bool] = {}  # job -> run again after the current run

    def run(self, job_id: str, work: Callable[[], object]) -> None:
        with self._lock:
            if job_id in self._busy:
                self._busy[job_id] = True
                return
            self._busy[job_id] = False
        self._pool.submit(lambda: self._loop(job_id, work))

    def busy(self) -> int:
        with self._lock:
            return len(self._busy)

    def stop(self) -> None:
        self._pool.stop()

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
