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
        self.received_at: float | None = None  # time.monotonic() of this rank's first signal
        # time.monotonic() (this rank's clock) of the first signal ANY rank got, once known.
        self.gang_received_at: float | None = None

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

    def seconds_since_signal(self) -> float:
        """Seconds since this rank's first signal, or -1 without one."""
        return time.monotonic() - self.received_at if self.received_at is not None else -1.0

    def adopt_gang_elapsed(self, seconds_since_first: float) -> None:
        """Anchor the grace clock at the earliest signal of the gang (elapsed times need no
        synchronised clocks: each rank measures its own, the all-reduce keeps the largest)."""
        if seconds_since_first >= 0 and self.gang_received_at is None:
            self.gang_received_at = time.monotonic() - seconds_since_first

    def seconds_left(self, grace_seconds: float) -> float:
        """Grace budget still available, counted from the gang's first signal (else this rank's, else now)."""
        started = self.gang_received_at
        if started is None:
            started = self.received_at if self.received_at is not None else time.monotonic()
        return grace_seconds - (time.monotonic() - started)


@dataclass(frozen=True)
class StepSignals:
    stop: bool  # some rank was asked to terminate
    checkpoint_due: bool  # rank 0's clock says a time-based checkpoint is due
    seconds_since_first_signal: float  # on the rank signalled first; -1 if none was


def exchange_step_signals(flag: PreemptionFlag, checkpoint_due: bool, group=None) -> StepSignals:
    """One tiny all-reduce (MAX) per step so every rank takes the same decisions, with the same
    grace clock: the largest "seconds since my signal" is the time since the gang's first one.

    The tensor stays in host memory, on a gloo group (`group`; None: the default group, which is
    gloo on CPU): reading the result then never waits for the GPU, whose queued work for the
    step goes on meanwhile. A device tensor here cost one host-device sync per step."""
    import torch
    import torch.distributed as dist

    flags = torch.tensor(
        [float(flag.requested), float(checkpoint_due), flag.seconds_since_signal()], dtype=torch.float64
    )
    dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
    stop, due, elapsed = flags.tolist()
    if stop:
        flag.adopt_gang_elapsed(elapsed)
    return StepSignals(stop=bool(stop), checkpoint_due=bool(due), seconds_since_first_signal=elapsed)


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


def any_rank(value: bool, device) -> bool:
    """True on every rank if it is True on any rank."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(value)], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
