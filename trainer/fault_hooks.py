"""Test-only hooks that freeze the trainer at precise points, so tests can preempt or kill it
deterministically instead of racing it. Both are inert unless their environment variable is set.
"""

from __future__ import annotations

import os
import threading
import time

HOLD_AT_STEP = "RELAUNCH_TEST_HOLD_AT_STEP"  # rank 0 waits at this step until it gets SIGTERM
PAUSE_BEFORE_COMMIT = "RELAUNCH_TEST_PAUSE_BEFORE_COMMIT"  # rank 0 stops before this step's marker

HOOK_DEADLINE_SECONDS = 300.0


def _step_from_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def hold_until_preempted(step: int, rank: int, flag, log) -> None:
    # Only rank 0 waits; the others wait for it in the next collective, as they would for a slow step.
    if rank != 0 or _step_from_env(HOLD_AT_STEP) != step:
        return
    log.info("test hook: holding for SIGTERM", step=step)
    deadline = time.monotonic() + HOOK_DEADLINE_SECONDS
    while not flag.requested and time.monotonic() < deadline:
        time.sleep(0.01)  # polling a flag set by a signal handler; no Event is signal-safe


def pause_before_commit(step: int, log) -> None:
    if _step_from_env(PAUSE_BEFORE_COMMIT) != step:
        return
    log.info("test hook: paused before commit marker", step=step)
    threading.Event().wait(HOOK_DEADLINE_SECONDS)  # the test kills the process while we wait here
