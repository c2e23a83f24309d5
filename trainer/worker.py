"""Entry point of one worker process (started by the launcher, one per local rank)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

from trainer import layout
from trainer.config import ConfigError, JobIdentity, parse_config
from trainer.node_status import NodeStatus
from trainer.preemption import PreemptionFlag

# Held by whichever ends the process: the main thread's ordinary exit or the heartbeat's
# peer-loss exit (trainer/liveness.py); the other one never gets to write a second outcome.
_ENDING = threading.Lock()


def die_with_launcher() -> None:
    """If the launcher is killed outright (kill -9, VM gone), take the workers down with it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except OSError:
        return
    expected = os.environ.get("RELAUNCH_LAUNCHER_PID")
    if expected and os.getppid() != int(expected):  # it died before prctl took effect
        os._exit(layout.EXIT_RUNTIME)


def main(argv: list[str] | None = None) -> None:
    # First thing: a SIGTERM from now on must only set the flag, never kill us mid-save.
    flag = PreemptionFlag().install()
    die_with_launcher()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    status = NodeStatus.from_env()
    status.mark_started(local_rank)
    outcome = run(sys.argv[1:] if argv is None else argv, flag, status)
    _ENDING.acquire()  # a peer-loss exit under way ends the process itself; wait for it
    status.mark_exited(
        local_rank,
        outcome.code,
        outcome.record_written,
        outcome.reason,
        flag.requested,
        outcome.detail,
        outcome.step,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: lingering communicator threads must not turn an exit code into a hang.
    os._exit(outcome.code)


@dataclass(frozen=True)
class Outcome:
    code: int
    record_written: bool  # this process wrote the attempt's exit record
    reason: str  # a layout.REPLICA_EXIT_REASONS value, for this replica's own record
    detail: str | None = None  # for the replica's record: what broke the gang, or the exception
    step: int | None = None  # the step this worker stopped at


# Texts of the errors gloo / NCCL / the c10d store raise when the other end of the gang is gone.
_PEER_LOSS_TEXTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "socket timeout",
    "communicator was aborted",
    "connection refused",
)


def looks_like_peer_loss(exc: BaseException) -> bool:
    """Whether an exception means "the gang broke" rather than "this rank's own code failed"."""
    try:
        import torch.distributed as dist

        if isinstance(exc, getattr(dist, "DistNetworkError", ())):
            return True
    except ImportError:
        pass
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in _PEER_LOSS_TEXTS)


def run(argv: list[str], flag: PreemptionFlag, status: NodeStatus | None = None) -> Outcome:
    """Train; say how it ended and whether this process wrote the attempt's exit record."""
    from trainer import logs

    rank = int(os.environ.get("RANK", "0"))
    log = logs.configure(
        verbose=rank == 0,
        rank=rank,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        node_rank=int(os.environ.get("GROUP_RANK", "0")),
    )
    try:
        cfg = parse_config(argv)
        identity = JobIdentity.from_env()
    except ConfigError as exc:
        log.error("configuration error", error=str(exc))
        return Outcome(layout.EXIT_CONFIG, False, layout.REASON_CONFIG_ERROR)

    from trainer.checkpoint import NoUsableCheckpoint
    from trainer.loop import Progress, record, train

    progress = Progress()
    extra: dict = {}
    detail: str | None = None
    heartbeat = None
    try:
        if cfg.deterministic:
            from trainer.numerics import enable_determinism

            enable_determinism()  # before CUDA and cuBLAS are first used
        device = init_distributed()

        def on_peer_loss(loss) -> None:
            exit_for_peer_loss(loss, cfg, identity, progress, status or NodeStatus(None), flag, log)

        heartbeat = start_heartbeat(cfg.peer_timeout, on_peer_loss)
        code = train(cfg, identity, device, flag, progress, log, heartbeat)
        reason = layout.REASON_OF_EXIT_CODE[code]
        if reason == layout.REASON_PREEMPTED and not flag.requested:
            reason = layout.REASON_STOPPED_BY_PEER  # the gang stopped for another replica's signal
        return Outcome(code, rank == 0 and bool(cfg.checkpoint_uri), reason, None, progress.step)
    except ConfigError as exc:
        code, reason = layout.EXIT_CONFIG, layout.REASON_CONFIG_ERROR
        log.error("configuration error", error=str(exc))
    except NoUsableCheckpoint as exc:
        code, reason = layout.EXIT_NO_USABLE_CHECKPOINT, layout.REASON_NO_USABLE_CHECKPOINT
        extra = {"checkpoint_root": exc.root, "steps_lost": exc.steps_lost}
        log.error("no usable checkpoint", error=str(exc), checkpoint_root=exc.root, steps_lost=exc.steps_lost)
    except Exception as exc:  # every other failure is a runtime error (exit 70)
        from trainer.numerics import is_nondeterministic_op_error

        code, reason = layout.EXIT_RUNTIME, layout.REASON_RUNTIME_ERROR
        if cfg.deterministic and is_nondeterministic_op_error(exc):
            # Retrying cannot help: the model uses an op with no deterministic implementation.
            code, reason = layout.EXIT_CONFIG, layout.REASON_CONFIG_ERROR
            print(f"relaunch-train: --deterministic: {exc}", file=sys.stderr)
        log.exception("training failed", error=f"{type(exc).__name__}: {exc}", step=progress.step)
        detail = exception_line(exc)
        if looks_like_peer_loss(exc):
            reason = layout.REASON_STOPPED_BY_PEER
    if heartbeat is not None:
        heartbeat.leave(orderly=False)  # the others stop now rather than at their timeout
    written = False
    if rank == 0:
        attempt_reason = layout.REASON_OF_EXIT_CODE[code]
        try:
            record(cfg, identity, attempt_reason, code, progress.step, progress.last_committed_step, **extra)
            written = bool(cfg.checkpoint_uri)
        except Exception as exc:  # the exit code still tells the story
            log.error("could not write exit record", error=str(exc))
    return Outcome(code, written, reason, detail, progress.step)


def exception_line(exc: BaseException) -> str:
    """The exception's type and the last non-empty line of its message, for the replica's record
    (the controller bounds and escapes it again before showing it)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}"[:200] if lines else type(exc).__name__


def start_heartbeat(peer_timeout: float, on_loss):
    """Watch the other ranks through the gang's rendezvous store (None when alone)."""
    import torch.distributed as dist

    from trainer import liveness

    if dist.get_world_size() == 1:
        return None
    store = liveness.connect_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), peer_timeout)
    channel = liveness.StoreChannel(store, dist.get_rank(), dist.get_world_size())
    return liveness.Heartbeat(channel, peer_timeout, on_loss).start()


def exit_for_peer_loss(loss, cfg, identity, progress, status: NodeStatus, flag, log) -> None:
    """The heartbeat found the gang broken while this rank may be blocked in a collective that
    will never return: leave the records a peer loss leaves (the same as gloo's fast failure:
    exit 70, replica reason stopped_by_peer) and end the process from this thread."""
    if not _ENDING.acquire(blocking=False):
        return  # the main thread is already ending on its own
    from trainer.loop import record

    rank = int(os.environ.get("RANK", "0"))
    detail = f"peer lost: {loss.detail}"
    log.error("peer lost", detail=loss.detail, silent_rank=loss.silent_rank, step=progress.step)
    written = False
    if rank == 0:
        try:
            reason = layout.REASON_RUNTIME_ERROR
            record(cfg, identity, reason, layout.EXIT_RUNTIME, progress.step, progress.last_committed_step)
            written = bool(cfg.checkpoint_uri)
        except Exception as exc:  # the exit code still tells the story
            log.error("could not write exit record", error=str(exc))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    status.mark_exited(
        local_rank, layout.EXIT_RUNTIME, written, layout.REASON_STOPPED_BY_PEER, flag.requested, detail
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(layout.EXIT_RUNTIME)


def init_distributed():
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "nccl"
        # A failed or timed-out NCCL collective raises in Python and tears the communicator down,
        # instead of leaving the process to the watchdog.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    else:
        device = torch.device("cpu")
        backend = "gloo"
        if "OMP_NUM_THREADS" not in os.environ:
            # Share the cores between the node's workers instead of oversubscribing them.
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group(backend=backend, timeout=timedelta(minutes=10))
    return device


if __name__ == "__main__":
    main()
