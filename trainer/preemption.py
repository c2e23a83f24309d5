"""SIGTERM handling: the handler only records the request; the loop acts at a step boundary.

Python runs signal handlers in the main thread between bytecodes, so a rank blocked in a
collective cannot react; instead every rank contributes its flag to one all-reduce per step
and all ranks stop together at the same step.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass


class PreemptionFlag:
    def __init__(self):
        self.signal_name: str | None = None
        self.received_at: float | None = None  # time.monotonic() of the first signal

    def install(self, signals=(signal.SIGTERM,)) -> PreemptionFlag:
        for sig in signals:
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, _frame) -> None:
        if self.received_at is None:  # later repeats (launcher forwarding + direct) change nothing
            self.received_at = time.monotonic()
            self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.received_at is not None

    def seconds_left(self, grace_seconds: float) -> float:
        """Grace budget still available, counted from this rank's first signal (or from now)."""
        started = self.received_at if self.received_at is not None else time.monotonic()
        return grace_seconds - (time.monotonic() - started)


@dataclass(frozen=True)
class StepSignals:
    stop: bool  # some rank was asked to terminate
    checkpoint_due: bool  # rank 0's clock says a time-based checkpoint is due


def exchange_step_signals(stop_requested: bool, checkpoint_due: bool, device) -> StepSignals:
    """One tiny all-reduce (MAX) per step so every rank takes the same decisions."""
    import torch
    import torch.distributed as dist

    flags = torch.tensor([int(stop_requested), int(checkpoint_due)], dtype=torch.int32, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    stop, due = flags.tolist()
    return StepSignals(stop=bool(stop), checkpoint_due=bool(due))


def emergency_save_fits(
    seconds_left: float, estimated_save_seconds: float | None, margin: float = 1.5
) -> bool:
    """Whether an emergency save is worth starting.

    Without any estimate we try: a save cut short by SIGKILL never writes its marker, so the
    previous checkpoint stays the valid one and trying costs nothing but the attempt.
    """
    if seconds_left <= 0:
        return False
    if estimated_save_seconds is None:
        return True
    return estimated_save_seconds * margin <= seconds_left


def broadcast_decision(decision: bool, device) -> bool:
    """Rank 0's decision, as seen by every rank."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(decision)], dtype=torch.int32, device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())
