"""Node launcher: find this node's place in the gang, start its workers with PyTorch's elastic
launcher, and turn whatever happened into one contract exit code.

Signals: the elastic agent turns SIGTERM into an exception, forwards SIGTERM to every worker
and waits `shutdown_timeout` before SIGKILL; we set that timeout from --grace-seconds so the
workers' emergency checkpoint can finish. The agent forgets worker exit codes on that path, so
workers report their outcome through a node-local status directory (trainer/node_status.py).
"""

from __future__ import annotations

import math
import os
import shutil
import signal as signals
import sys
import tempfile
import time

from trainer import fault_hooks, layout
from trainer.cluster import NodeTopology, from_environment
from trainer.config import ConfigError, JobIdentity, TrainConfig, micro_steps_per_step, parse_config
from trainer.node_status import ENV_VAR as STATUS_DIR_VAR
from trainer.node_status import REPLICA_ENV, NodeStatus, WorkerOutcome

# Severity order when workers disagree: the most telling code wins.
_PRECEDENCE = (
    layout.EXIT_CONFIG,
    layout.EXIT_NO_USABLE_CHECKPOINT,
    layout.EXIT_RUNTIME,
    layout.EXIT_PREEMPTED_UNSAVED,
    layout.EXIT_PREEMPTED_SAVED,
    layout.EXIT_OK,
)
_PREEMPTED_CODES = (layout.EXIT_PREEMPTED_SAVED, layout.EXIT_PREEMPTED_UNSAVED)

# The elastic agent SIGKILLs workers this long after the grace budget (ceil(--grace-seconds)
# + this margin, whole seconds): room for the exit record and the process teardown.
HARD_KILL_MARGIN_SECONDS = 5


def hard_kill_after(grace_seconds: float) -> int:
    return math.ceil(grace_seconds) + HARD_KILL_MARGIN_SECONDS


def combine_exit_codes(outcomes: list[WorkerOutcome | None], signalled: bool) -> int:
    """One node exit code from its workers' outcomes (None: the worker never reported)."""
    missing = layout.EXIT_PREEMPTED_UNSAVED if signalled else layout.EXIT_RUNTIME
    codes = {o.exit_code if o is not None else missing for o in outcomes}
    codes = {c if c in _PRECEDENCE else layout.EXIT_RUNTIME for c in codes}
    return next(code for code in _PRECEDENCE if code in codes)


def replica_reason(code: int, outcomes: list[WorkerOutcome | None], signalled: bool) -> str:
    """Why this replica stopped, for its own exit record: its own signal or error, or its peers'."""
    own_signal = signalled or any(o is not None and o.signalled for o in outcomes)
    if code in _PREEMPTED_CODES:
        return layout.REASON_PREEMPTED if own_signal else layout.REASON_STOPPED_BY_PEER
    if code == layout.EXIT_RUNTIME:
        failed = [o for o in outcomes if o is None or o.exit_code == layout.EXIT_RUNTIME]
        if failed and all(o is not None and o.reason == layout.REASON_STOPPED_BY_PEER for o in failed):
            return layout.REASON_STOPPED_BY_PEER
        return layout.REASON_RUNTIME_ERROR
    return layout.REASON_OF_EXIT_CODE.get(code, layout.REASON_RUNTIME_ERROR)


def shutdown_timeout(launch_config_class, seconds: int, log) -> dict:
    """LaunchConfig's `shutdown_timeout` (seconds from SIGTERM to SIGKILL of the workers) where
    this torch has it; older releases (2.11, in some GPU images) have a fixed 30 s instead."""
    import inspect

    if "shutdown_timeout" in inspect.signature(launch_config_class).parameters:
        return {"shutdown_timeout": seconds}
    log.warning("this torch has no LaunchConfig.shutdown_timeout: workers are killed 30 s after SIGTERM")
    return {}


def default_nproc() -> int:
    import torch

    return torch.cuda.device_count() or 1


def signal_name(status: int | None) -> str | None:
    """The signal a worker process died of: the agent reports a death by signal N as status -N."""
    if status is None or status >= 0:
        return None
    try:
        return signals.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


def failed_worker(outcomes: list[WorkerOutcome | None], statuses: dict[int, int]) -> int | None:
    """The local rank of the worker whose own ending stopped this replica: one that died without
    reporting (a native crash, os._exit, a kill), else one that reported its own error (not a
    peer's loss, not a signal); None when no worker failed on its own."""
    died = [rank for rank, o in enumerate(outcomes) if o is None and rank in statuses]
    own_error = [
        rank
        for rank, o in enumerate(outcomes)
        if o is not None
        and o.exit_code != layout.EXIT_OK
        and o.reason not in (layout.REASON_STOPPED_BY_PEER, layout.REASON_PREEMPTED)
        and not o.signalled
    ]
    return next(iter(died + own_error), None)


def worker_statuses(outcomes: list[WorkerOutcome | None], statuses: dict[int, int]) -> list[int | None]:
    """Each worker's own exit status: as its process ended when the agent saw it fail, else as it
    reported it; None when neither is known (the agent forgets them when it is signalled)."""
    return [statuses.get(rank, o.exit_code if o is not None else None) for rank, o in enumerate(outcomes)]


def run_launcher(argv: list[str]) -> int:
    from trainer import logs

    log = logs.configure(verbose=True, role="launcher")
    try:
        cfg = parse_config(argv)
        identity = JobIdentity.from_env()
        topology = from_environment(dict(os.environ))
        check_factories(cfg)
        # A world size that cannot split --global-batch-size fails here, before any worker starts.
        micro_steps_per_step(cfg, topology.num_nodes * (cfg.nproc_per_node or default_nproc()))
    except ConfigError as exc:
        print(f"relaunch-train: configuration error: {exc}", file=sys.stderr)
        log.error("configuration error", error=str(exc))
        return layout.EXIT_CONFIG
    log = log.bind(node_rank=topology.node_rank)
    nproc = cfg.nproc_per_node or default_nproc()
    status_dir = tempfile.mkdtemp(prefix="relaunch-node-")
    signalled = False
    statuses: dict[int, int] = {}
    ooms_before = oom_kills()
    if topology.node_rank == 0 and cfg.checkpoint_uri and identity.vertex_job_id:
        record_run(cfg, identity, log)
    try:
        code, record_written, signalled = launch_workers(
            argv, cfg, topology, nproc, status_dir, log, statuses
        )
    finally:
        outcomes = NodeStatus(status_dir).outcomes(nproc)
        shutil.rmtree(status_dir, ignore_errors=True)
    # Global rank 0 lives on node 0: if it could not write the attempt's exit record, we do.
    if topology.node_rank == 0 and not record_written and cfg.checkpoint_uri:
        write_fallback_exit_record(cfg, identity, code, log)
    oom = oom_killed(ooms_before, oom_kills(), outcomes)
    if oom:
        log.error("a worker was killed for running out of memory (cgroup oom_kill grew)", exit_code=code)
    if cfg.checkpoint_uri:
        write_replica_record(
            cfg, identity, topology, code, outcomes, signalled, log, oom=oom, statuses=statuses
        )
    log.info("node finished", exit_code=code, workers=worker_statuses(outcomes, statuses))
    fault_hooks.hold_after_finishing(log)
    return code


# cgroup v2 counts the kills of its OOM killer here (the kernel's cgroup-v2 documentation,
# "memory.events": oom_kill). Absent outside a cgroup v2 container: then no OOM is inferred.
MEMORY_EVENTS = "/sys/fs/cgroup/memory.events"


def oom_kills(path: str = MEMORY_EVENTS) -> int | None:
    try:
        with open(path, encoding="ascii") as events:
            for line in events:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def oom_killed(before: int | None, after: int | None, outcomes: list[WorkerOutcome | None]) -> bool:
    """A worker died of SIGKILL (no outcome written, or -9/137) while the OOM counter grew."""
    if before is None or after is None or after <= before:
        return False
    return any(o is None or o.exit_code in (-9, 137) for o in outcomes)


def check_factories(cfg: TrainConfig) -> None:
    """Fail fast (exit 64) on a factory path that cannot work, before starting any worker."""
    from trainer.factories import load_factory

    load_factory(cfg.model, "--model")
    load_factory(cfg.data, "--data")


def launch_workers(
    argv: list[str],
    cfg: TrainConfig,
    topology: NodeTopology,
    nproc: int,
    status_dir: str,
    log,
    statuses: dict[int, int],
) -> tuple[int, bool, bool]:
    """Run this node's workers (each gets the launcher's own command line) until they are done.

    Returns (exit code, whether a worker wrote the attempt's exit record, whether we were signalled);
    fills `statuses` with each failed worker's own exit status by local rank (-N: signal N).
    """
    import torch
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ[STATUS_DIR_VAR] = status_dir
    os.environ[REPLICA_ENV] = topology.replica
    os.environ["RELAUNCH_LAUNCHER_PID"] = str(os.getpid())
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if cfg.engine == "deepspeed":
        from trainer.warmup import STALE_LOCK_SECONDS, extensions_root, remove_stale_locks

        # A build killed earlier on this machine would make every worker wait on its lock for ever.
        remove_stale_locks(extensions_root(), STALE_LOCK_SECONDS, log)
    config = LaunchConfig(
        min_nodes=topology.num_nodes,
        max_nodes=topology.num_nodes,
        nproc_per_node=nproc,
        run_id=os.environ.get("RELAUNCH_JOB_ID", "relaunch"),
        rdzv_backend="static",
        rdzv_endpoint=f"{topology.master_addr}:{topology.master_port}",
        rdzv_configs={"rank": topology.node_rank, "timeout": cfg.rendezvous_timeout},
        max_restarts=0,  # a failed gang is the controller's business, not a local retry
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(status_dir, "logs")),
        **shutdown_timeout(LaunchConfig, hard_kill_after(cfg.grace_seconds), log),
    )
    log.info(
        "launching workers",
        nodes=topology.num_nodes,
        nproc_per_node=nproc,
        master=f"{topology.master_addr}:{topology.master_port}",
        topology_source=topology.source,
    )
    status = NodeStatus(status_dir)
    signalled = False
    started = time.monotonic()
    try:
        elastic_launch(config, sys.executable)("-m", "trainer.worker", *argv)
    except SignalException as exc:
        signalled = True
        log.warning("launcher got a termination signal; workers were told to stop", signal=str(exc.sigval))
    except ChildFailedError as exc:
        # The workers' own outcomes below say why; a worker that died before reporting (a native
        # crash, os._exit, a kill) is known only by the status the agent saw its process end with.
        statuses.update({failure.local_rank: failure.exitcode for failure in exc.failures.values()})
    except Exception as exc:  # best effort; the exit code is still returned
        if not status.any_started():
            # Nothing ran: the gang never assembled (static rendezvous store timed out).
            print(
                f"relaunch-train: rendezvous failed after {time.monotonic() - started:.0f}s "
                f"(timeout {cfg.rendezvous_timeout}s, {topology.num_nodes} nodes at "
                f"{topology.master_addr}:{topology.master_port}): {exc}",
                file=sys.stderr,
            )
            log.error("rendezvous timeout", error=str(exc), timeout_seconds=cfg.rendezvous_timeout)
            return layout.EXIT_RENDEZVOUS_TIMEOUT, False, signalled
        log.exception("launcher failed")
        return layout.EXIT_RUNTIME, False, signalled
    outcomes = status.outcomes(nproc)
    record_written = any(o is not None and o.exit_record_written for o in outcomes)
    return combine_exit_codes(outcomes, signalled), record_written, signalled


def record_run(cfg: TrainConfig, identity: JobIdentity, log) -> None:
    """The chief's run record: a second run of one CustomJob is Vertex restarting it in place,
    which only this record tells the controller (docs/contracts.md, "Run records")."""
    from trainer.storage import latest_committed, record_run_start

    assert identity.vertex_job_id is not None
    try:
        latest = latest_committed(cfg.checkpoint_uri)
        record = record_run_start(
            cfg.checkpoint_uri,
            identity.job_id,
            identity.attempt,
            identity.vertex_job_id,
            latest.step if latest else None,
        )
    except Exception as exc:  # the run goes on: the controller still sees the attempt's ending
        log.warning("could not write the run record", error=str(exc))
        return
    # The workers inherit it: the chief's exit record then names the run that wrote it.
    os.environ[layout.RUN_ENV] = str(record.run)
    if record.run > 1:
        log.warning("restarted in place by Vertex", run=record.run, resume_step=record.resume_step)


def write_fallback_exit_record(cfg: TrainConfig, identity: JobIdentity, code: int, log) -> None:
    from trainer.storage import latest_committed, write_exit_record

    try:
        latest = latest_committed(cfg.checkpoint_uri)
        write_exit_record(
            cfg.checkpoint_uri,
            layout.ExitRecord(
                job_id=identity.job_id,
                attempt=identity.attempt,
                reason=layout.REASON_OF_EXIT_CODE.get(code, layout.REASON_RUNTIME_ERROR),
                exit_code=code,
                step=None,
                last_committed_step=latest.step if latest else None,
                checkpoint_saved=False,
                signal="SIGTERM" if code in _PREEMPTED_CODES else None,
                vertex_job_id=identity.vertex_job_id,
                run=layout.run_from_env(os.environ),
            ),
        )
    except Exception as exc:
        log.warning("could not write exit record", error=str(exc))


def write_replica_record(
    cfg: TrainConfig,
    identity: JobIdentity,
    topology: NodeTopology,
    code: int,
    outcomes: list[WorkerOutcome | None],
    signalled: bool,
    log,
    *,
    oom: bool = False,
    statuses: dict[int, int] | None = None,
) -> None:
    """This replica's own final exit record (every node writes one, see docs/contracts.md): its
    `exitCode` is the launcher's contract code; the worker that failed on its own is named by
    its own exit status and signal."""
    from trainer.storage import write_replica_exit

    statuses = statuses or {}
    reason = layout.REASON_RUNTIME_ERROR if oom else replica_reason(code, outcomes, signalled)
    codes = worker_statuses(outcomes, statuses)
    detail = f"worker exit codes {codes} (-N: killed by signal N; None: unknown)"
    failed = failed_worker(outcomes, statuses)
    worker_code = codes[failed] if failed is not None else None
    known = next((o.detail for o in outcomes if o is not None and o.detail), None)
    step = max((o.step for o in outcomes if o is not None and o.step is not None), default=None)
    try:
        write_replica_exit(
            cfg.checkpoint_uri,
            layout.ReplicaExit(
                job_id=identity.job_id,
                attempt=identity.attempt,
                vertex_job_id=identity.vertex_job_id,
                replica=topology.replica,
                node_rank=topology.node_rank,
                reason=reason,
                exit_code=code,
                signal=layout.SIGNAL_OOM_KILL
                if oom
                else ("SIGTERM" if reason == layout.REASON_PREEMPTED else None),
                step=step,
                detail=f"{known}; {detail}" if known else detail,
                final=True,
                worker_exit_code=worker_code,
                worker_signal=signal_name(worker_code),
            ),
        )
    except Exception as exc:
        log.warning("could not write the replica exit record", error=str(exc))
