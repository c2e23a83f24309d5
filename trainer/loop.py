"""The training loop of one rank: build, resume, train, checkpoint, stop together."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer import fault_hooks, layout, rng
from trainer.batches import StepBatches
from trainer.checkpoint import Checkpointer
from trainer.config import JobIdentity, TrainConfig, micro_steps_per_step
from trainer.data import ResumableSampler
from trainer.engines import Engine, build_engine
from trainer.factories import load_factory
from trainer.node_status import REPLICA_ENV
from trainer.numerics import device_precision
from trainer.preemption import (
    PreemptionFlag,
    any_rank,
    broadcast_decision,
    emergency_save_fits,
    exchange_step_signals,
)
from trainer.state import (
    RngStreams,
    StateRegistry,
    StepCounter,
    rank_file_state,
    registry_state_of,
)
from trainer.storage import read_exit_record, write_exit_record, write_replica_exit


@dataclass
class Progress:
    """What the worker's error handler needs to know when the loop dies."""

    step: int | None = None
    last_committed_step: int | None = None


@dataclass
class Run:
    """What one rank's training shares between its steps and its stop: built once, passed as one."""

    cfg: TrainConfig
    identity: JobIdentity
    device: torch.device
    flag: PreemptionFlag
    log: Any
    engine: Engine
    checkpointer: Checkpointer
    batches: StepBatches
    counter: StepCounter
    registry: StateRegistry

    def checkpoint_state(self) -> dict:
        return rank_file_state(self.registry, self.counter)


def build(cfg: TrainConfig, identity: JobIdentity, device: torch.device, flag: PreemptionFlag, log) -> Run:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    build_model = load_factory(cfg.model, "--model")
    build_dataset = load_factory(cfg.data, "--data")
    # Same seed everywhere: every rank builds identical initial weights.
    rng.seed_all(cfg.seed)
    model = build_model()
    dataset = build_dataset()
    engine = build_engine(cfg, model, device, device_precision(cfg.precision, device))
    sampler = ResumableSampler(
        len(dataset), cfg.batch_size, rank, world_size, cfg.seed, step_samples=cfg.global_batch_size
    )
    checkpointer = Checkpointer(
        cfg.checkpoint_uri, identity, engine.name, cfg.keep_last, log, precision=engine.precision
    )
    counter = StepCounter(world_size)
    batches = StepBatches(dataset, sampler, cfg.grad_accum, device)
    registry = StateRegistry()
    registry.register("progress", counter)
    registry.register("data", batches)
    registry.register("rng", RngStreams())
    return Run(cfg, identity, device, flag, log, engine, checkpointer, batches, counter, registry)


def restore(run: Run) -> None:
    """Resume from the newest usable checkpoint, or start fresh; either way log which."""
    cfg, log, rank, world_size = run.cfg, run.log, dist.get_rank(), dist.get_world_size()
    # Each rank gets its own stream for dropout and friends.
    rng.seed_all(cfg.seed + 7919 * (rank + 1))
    restored = run.checkpointer.restore(run.engine, cfg.resume_from)
    if restored is None:
        log.info(
            "starting fresh",
            world_size=world_size,
            engine=run.engine.name,
            steps=cfg.steps,
            micro_steps_per_step=cfg.grad_accum,
        )
        return
    # At another world size per-rank RNG streams cannot carry over: see rng.rank_stream_seed.
    skip = () if restored.exact else ("rng",)
    run.registry.load_state_dict(registry_state_of(restored.trainer_state), skip=skip)
    if not restored.exact:
        rng.seed_all(rng.rank_stream_seed(cfg.seed, rank, run.counter.step))
    log_resume(cfg, run.identity, run.counter.step, log, run.batches, world_size, restored, cfg.grad_accum)


def train(
    cfg: TrainConfig,
    identity: JobIdentity,
    device: torch.device,
    flag: PreemptionFlag,
    progress: Progress,
    log,
    heartbeat=None,
) -> int:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # With --global-batch-size the accumulation follows the world size of this attempt.
    cfg = dataclasses.replace(cfg, grad_accum=micro_steps_per_step(cfg, world_size))
    run = build(cfg, identity, device, flag, log)
    engine, checkpointer, batches, counter = run.engine, run.checkpointer, run.batches, run.counter
    log.info(
        "numerics",
        precision=engine.precision,
        deterministic=cfg.deterministic,
        backend=dist.get_backend(),
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    )
    # The per-step signal exchange runs on host memory: on a GPU over a gloo group of its own
    # (the checkpointer's group belongs to its background thread).
    signal_group = dist.new_group(backend="gloo") if device.type == "cuda" else None
    restore(run)
    progress.step, progress.last_committed_step = counter.step, checkpointer.last_committed_step

    last_checkpoint_time = timing_start = time.monotonic()
    attempt_steps = 0  # steps run by this attempt (a resumed one starts at the checkpoint's step)
    window_start, window_steps = time.monotonic(), 0
    loss = torch.zeros((), device=device)
    while counter.step < cfg.steps:
        loss = engine.train_step(batches.next_step(prepare_another=counter.step + 1 < cfg.steps))
        counter.step += 1
        step = progress.step = counter.step
        window_steps += 1

        attempt_steps += 1
        if attempt_steps == TIMEOUT_AFTER_STEPS:
            set_collective_timeout((time.monotonic() - timing_start) / (attempt_steps - 1), log)
        elif attempt_steps == 1:
            timing_start = time.monotonic()  # the first step includes warm-up and the DDP settle
        if step % cfg.log_every == 0:
            if device.type == "cuda":  # once per log window: the window's time is the GPU's, too
                torch.cuda.synchronize(device)
            elapsed = time.monotonic() - window_start
            samples = window_steps * cfg.batch_size * cfg.grad_accum * world_size
            log.info(
                "train",
                step=step,
                loss=mean_over_ranks(loss),
                lr=engine.learning_rate(),
                samples_per_second=round(samples / elapsed, 2),
                step_seconds=round(elapsed / window_steps, 5),
            )
            window_start, window_steps = time.monotonic(), 0

        fault_hooks.hold_until_preempted(step, rank, flag, log)
        time_due = (
            cfg.checkpoint_every_seconds > 0
            and rank == 0
            and time.monotonic() - last_checkpoint_time >= cfg.checkpoint_every_seconds
        )
        signals = exchange_step_signals(flag, time_due, signal_group)
        if signals.stop:
            if heartbeat is not None:
                heartbeat.leave(orderly=True)  # the gang stops together; the grace budget bounds it
            batches.close()
            return stop_for_preemption(run)

        step_due = cfg.checkpoint_every_steps > 0 and step % cfg.checkpoint_every_steps == 0
        if (step_due or signals.checkpoint_due) and step < cfg.steps:
            checkpointer.save(step, engine, run.checkpoint_state(), blocking=cfg.synchronous_checkpoints)
            last_checkpoint_time = time.monotonic()
        progress.last_committed_step = checkpointer.last_committed_step

    batches.close()
    checkpointer.wait()
    step = counter.step
    final = checkpointer.save(step, engine, run.checkpoint_state(), blocking=True)
    progress.last_committed_step = checkpointer.last_committed_step
    final_loss = mean_over_ranks(loss)
    digest = engine.parameter_digest()
    if heartbeat is not None:
        heartbeat.leave(orderly=True)  # past the last collective: peers may now exit at any time
    if rank == 0:
        record(
            cfg,
            identity,
            layout.REASON_COMPLETED,
            layout.EXIT_OK,
            step,
            checkpointer.last_committed_step,
            saved=bool(final and final.committed),
        )
    log.info(
        "training completed",
        step=step,
        final_loss=repr(final_loss),
        params_sha256=digest,
        optimizer_steps=engine.optimizer_steps(),
        world_size=world_size,
        data_epoch=batches.epoch,
        data_consumed=batches.consumed,
        final_checkpoint=bool(final and final.committed),
    )
    checkpointer.close()
    return layout.EXIT_OK


# Steps 2..TIMEOUT_AFTER_STEPS (the first one warms up) time the collective timeout.
TIMEOUT_AFTER_STEPS = 6


def set_collective_timeout(step_seconds: float, log) -> None:
    """Shorten the process group's timeout (10 min at init: rendezvous, restore) to one derived
    from the measured step time; a collective stuck that long fails instead of hanging the gang."""
    from trainer.liveness import collective_timeout_seconds

    seconds = collective_timeout_seconds(step_seconds)
    try:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        _set_pg_timeout(timedelta(seconds=seconds))
    except (ImportError, AttributeError, RuntimeError) as exc:  # a private API: best effort
        log.warning("could not set the collective timeout", error=str(exc))
        return
    log.info("collective timeout set", seconds=round(seconds, 1), step_seconds=round(step_seconds, 4))


def stop_for_preemption(run: Run) -> int:
    """Every rank arrives here at the same step, with the same grace clock (the gang's first
    signal). The exit record goes out first, so a SIGKILL at any later point still leaves one
    that says `preempted`; then every wait is bounded by what is left of the grace budget."""
    cfg, identity, flag, log, checkpointer = run.cfg, run.identity, run.flag, run.log, run.checkpointer
    engine, step, state, device = run.engine, run.counter.step, run.checkpoint_state(), run.device
    rank = dist.get_rank()
    signal_name = flag.signal_name or "SIGTERM"
    first_reported = checkpointer.last_committed_step
    if rank == 0:
        safe_record(
            cfg,
            identity,
            layout.REASON_PREEMPTED,
            layout.EXIT_PREEMPTED_UNSAVED,
            step,
            checkpointer.last_committed_step,
            log,
            saved=False,
            signal=signal_name,
        )
    report_replica_stop(cfg, identity, flag, step, log)

    def seconds_left() -> float:
        return flag.seconds_left(cfg.grace_seconds)

    saved, abandoned = False, False
    try:
        checkpointer.wait(timeout=seconds_left())  # a background save may just commit a newer one
    except RuntimeError as exc:
        log.warning("checkpoint in flight failed", error=str(exc.__cause__ or exc))
    # Ranks whose waits ended differently must still take the same path through the collectives.
    if any_rank(checkpointer.busy, device):
        abandoned = True
    else:
        saved = checkpointer.last_committed_step == step
    if not saved and not abandoned and checkpointer.store is not None:
        left = seconds_left()
        fits = emergency_save_fits(left, checkpointer.last_save_seconds)
        if broadcast_decision(fits, device):
            try:
                # A step already committed (or one that cannot be saved) answers at once.
                result = checkpointer.save(step, engine, state, blocking=False, emergency=True)
                result = result or checkpointer.wait(timeout=seconds_left())
                abandoned = checkpointer.busy
                saved = bool(result and result.committed)
            except RuntimeError as exc:
                log.warning("emergency checkpoint failed", error=str(exc.__cause__ or exc))
        else:
            log.warning(
                "emergency checkpoint skipped: does not fit the grace budget",
                seconds_left=round(left, 2),
                estimate_seconds=checkpointer.last_save_seconds,
            )
    if abandoned:
        log.warning(
            "emergency checkpoint abandoned: grace budget spent",
            step=step,
            grace_seconds=cfg.grace_seconds,
            seconds_since_first_signal=round(cfg.grace_seconds - seconds_left(), 2),
        )
    code = layout.EXIT_PREEMPTED_SAVED if saved else layout.EXIT_PREEMPTED_UNSAVED
    # The first record already says "not saved"; rewrite it if that or its last commit changed.
    if rank == 0 and (saved or checkpointer.last_committed_step != first_reported):
        safe_record(
            cfg,
            identity,
            layout.REASON_PREEMPTED,
            code,
            step,
            checkpointer.last_committed_step,
            log,
            saved=True,
            signal=signal_name,
        )
    log.warning(
        "preempted",
        step=step,
        checkpoint_saved=saved,
        last_committed_step=checkpointer.last_committed_step,
        exit_code=code,
    )
    checkpointer.close()
    return code


def report_replica_stop(cfg, identity: JobIdentity, flag, step: int, log) -> None:
    """The first worker of each node leaves a provisional record for its replica now; the
    launcher replaces it with the final one when every worker is gone (if it lives that long)."""
    replica = os.environ.get(REPLICA_ENV)
    if not cfg.checkpoint_uri or not replica or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    own = flag.requested
    try:
        write_replica_exit(
            cfg.checkpoint_uri,
            layout.ReplicaExit(
                job_id=identity.job_id,
                attempt=identity.attempt,
                vertex_job_id=identity.vertex_job_id,
                replica=replica,
                node_rank=int(os.environ.get("GROUP_RANK", "0")),
                reason=layout.REASON_PREEMPTED if own else layout.REASON_STOPPED_BY_PEER,
                exit_code=layout.EXIT_PREEMPTED_UNSAVED,
                signal=(flag.signal_name or "SIGTERM") if own else None,
                step=step,
                detail=None if own else "another replica was signalled; the gang stops together",
                final=False,
            ),
        )
    except Exception as exc:  # the attempt's record matters more; never fail the stop for this
        log.warning("could not write the replica exit record", error=str(exc))


def mean_over_ranks(value: torch.Tensor) -> float:
    total = value.detach().clone().float()
    dist.all_reduce(total)
    return (total / dist.get_world_size()).item()


def record(
    cfg,
    identity: JobIdentity,
    reason: str,
    code: int,
    step,
    last_committed,
    saved=False,
    signal=None,
    **extra,
):
    if not cfg.checkpoint_uri:
        return
    write_exit_record(
        cfg.checkpoint_uri,
        layout.ExitRecord(
            job_id=identity.job_id,
            attempt=identity.attempt,
            reason=reason,
            exit_code=code,
            step=step,
            last_committed_step=last_committed,
            checkpoint_saved=saved,
            signal=signal,
            vertex_job_id=identity.vertex_job_id,
            final_step=cfg.steps,
            run=layout.run_from_env(os.environ),
            **extra,
        ),
    )


def safe_record(cfg, identity, reason, code, step, last_committed, log, saved=False, signal=None) -> None:
    try:
        record(cfg, identity, reason, code, step, last_committed, saved=saved, signal=signal)
    except Exception as exc:  # the exit code still tells the story
        log.error("could not write exit record", error=str(exc))


def log_resume(
    cfg, identity: JobIdentity, step: int, log, sampler, world_size, restored, micro_steps
) -> None:
    previous = None
    if cfg.checkpoint_uri and identity.attempt > 1:
        previous = read_exit_record(cfg.checkpoint_uri, identity.attempt - 1)  # legacy name: any job
    reached = previous.step if previous and previous.step is not None else None
    log.info(
        "resumed",
        from_step=step,
        previous_attempt_step=reached,
        steps_recomputed=(reached - step) if reached is not None else None,
        world_size=world_size,
        saved_world_size=restored.saved_world_size,
        micro_steps_per_step=micro_steps,
        data_epoch=sampler.epoch,
        data_consumed=sampler.consumed,
    )
