"""Entry point of one worker process (started by the launcher, one per local rank)."""

from __future__ import annotations

import ctypes
import os
import sys
from datetime import timedelta

from trainer import layout
from trainer.config import ConfigError, JobIdentity, parse_config
from trainer.node_status import NodeStatus
from trainer.preemption import PreemptionFlag


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
    code, record_written = run(sys.argv[1:] if argv is None else argv, flag)
    status.mark_exited(local_rank, code, record_written)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: lingering communicator threads must not turn an exit code into a hang.
    os._exit(code)


def run(argv: list[str], flag: PreemptionFlag) -> tuple[int, bool]:
    """Train; return (exit code, whether this process wrote the attempt's exit record)."""
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
        return layout.EXIT_CONFIG, False

    from trainer.loop import Progress, record, train

    progress = Progress()
    try:
        device = init_distributed()
        code = train(cfg, identity, device, flag, progress, log)
        return code, rank == 0 and bool(cfg.checkpoint_uri)
    except ConfigError as exc:
        code, reason = layout.EXIT_CONFIG, "config_error"
        log.error("configuration error", error=str(exc))
    except Exception as exc:  # every other failure is a runtime error (exit 70)
        code, reason = layout.EXIT_RUNTIME, "runtime_error"
        log.exception("training failed", error=f"{type(exc).__name__}: {exc}", step=progress.step)
    written = False
    if rank == 0:
        try:
            record(cfg, identity, reason, code, progress.step, progress.last_committed_step)
            written = bool(cfg.checkpoint_uri)
        except Exception as exc:  # the exit code still tells the story
            log.error("could not write exit record", error=str(exc))
    return code, written


def init_distributed():
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "nccl"
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
