"""Test-only hooks that freeze the trainer at precise points, so tests can preempt or kill it
deterministically instead of racing it. Both are inert unless their environment variable is set.
"""

from __future__ import annotations

import os
import threading
import time

HOLD_AT_STEP = "RELAUNCH_TEST_HOLD_AT_STEP"  # one rank waits at this step until it gets SIGTERM
HOLD_RANK = "RELAUNCH_TEST_HOLD_RANK"  # which rank holds (default 0)
# After the held rank's signal, its step goes on this many seconds more (a slow step), so the
# gang learns of the signal late: the grace clock must still start at that signal.
SLOW_STEP_AFTER_SIGNAL = "RELAUNCH_TEST_SLOW_STEP_AFTER_SIGNAL"
PAUSE_BEFORE_COMMIT = "RELAUNCH_TEST_PAUSE_BEFORE_COMMIT"  # rank 0 stops before this step's marker
# The launcher, done and its records written, stays up until SIGTERM: a reclaim that lands just
# after the last step, while Vertex still shows the job running.
HOLD_AFTER_FINISHING = "RELAUNCH_TEST_HOLD_AFTER_FINISHING"

HOOK_DEADLINE_SECONDS = 300.0


def _step_from_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def hold_until_preempted(step: int, rank: int, flag, log) -> None:
    # Only one rank waits; the others wait for it in the next collective, as they would for a slow step.
    if rank != int(os.environ.get(HOLD_RANK) or 0) or _step_from_env(HOLD_AT_STEP) != step:
        return
    log.warning("test hook: holding for SIGTERM", step=step)  # warning: quiet ranks print it too
    deadline = time.monotonic() + HOOK_DEADLINE_SECONDS
    while not flag.requested and time.monotonic() < deadline:
        time.sleep(0.01)  # polling a flag set by a signal handler; no Event is signal-safe
    slow = float(os.environ.get(SLOW_STEP_AFTER_SIGNAL) or 0)
    if slow > 0:
        threading.Event().wait(slow)


def pause_before_commit(step: int, log) -> None:
    if _step_from_env(PAUSE_BEFORE_COMMIT) != step:
        return
    log.info("test hook: paused before commit marker", step=step)
    threading.Event().wait(HOOK_DEADLINE_SECONDS)  # the test kills the process while we wait here


def hold_after_finishing(log) -> None:
    if not os.environ.get(HOLD_AFTER_FINISHING):
        return
    import signal

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    log.warning("test hook: finished, holding for SIGTERM")
    stopped.wait(HOOK_DEADLINE_SECONDS)
