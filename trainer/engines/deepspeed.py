"""DeepSpeed ZeRO stages 1-3 (or a user's DeepSpeed config file, used as is)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import torch

from trainer.config import ConfigError
from trainer.engines.common import digest_parameters, make_optimizer, make_scheduler

SUBDIR = "deepspeed"
UNIVERSAL_SUBDIR = "universal"  # scratch dir of a conversion, inside the rank's restore dir


def _tag(step: int) -> str:
    return f"step-{step:010d}"


def deepspeed_config(cfg, precision: str) -> dict:
    if cfg.deepspeed_config:
        try:
            with open(cfg.deepspeed_config) as fh:
                config = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--deepspeed-config {cfg.deepspeed_config!r}: {exc}") from None
        if cfg.global_batch_size is not None:
            # The batch split follows the world size of each attempt: the file cannot fix it.
            config.pop("train_batch_size", None)
            config["train_micro_batch_size_per_gpu"] = cfg.batch_size
            config["gradient_accumulation_steps"] = cfg.grad_accum
        return config
    return {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16"},
        # The optimizer is torch's AdamW (fused on GPU): DeepSpeed's own Adam kernels are ops
        # compiled on first use, which a paid job's first step must never wait for.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine:
    name = "deepspeed"

    def __init__(self, cfg, model: torch.nn.Module, device: torch.device, precision: str = "fp32"):
        import deepspeed

        self._deepspeed = deepspeed
        self.device = device
        self.stage = cfg.zero_stage
        config = deepspeed_config(cfg, precision)
        self.stage = int(config.get("zero_optimization", {}).get("stage", 0))
        # A config file decides the precision itself; the commit marker records what it chose.
        enabled = {key for key in ("bf16", "fp16") if config.get(key, {}).get("enabled")}
        self.precision = "bf16" if "bf16" in enabled else "fp16" if "fp16" in enabled else "fp32"
        optimizer = make_optimizer(cfg, model, device)
        scheduler = make_scheduler(cfg, optimizer)
        self.conversion_timeout = cfg.universal_conversion_timeout
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config, dist_init_required=False
        )
        self.module = self.engine.module
        self.micro_steps = self.engine.gradient_accumulation_steps()

    def train_step(self, micro_batches: list[tuple]) -> torch.Tensor:
        if len(micro_batches) != self.micro_steps:
            raise ConfigError(
                f"--grad-accum {len(micro_batches)} disagrees with DeepSpeed's gradient_accumulation_steps {self.micro_steps}"
            )
        total = torch.zeros((), device=self.device)
        for batch in micro_batches:
            loss = self.engine(*batch)
            self.engine.backward(loss)  # scales by 1/gradient_accumulation_steps itself
            self.engine.step()  # steps the optimizer only at the accumulation boundary
            total += loss.detach().float() / len(micro_batches)
        return total

    def snapshot(self, staging_dir: str, step: int) -> dict[str, Any]:
        # Every rank writes its own shards to local disk; the checkpointer uploads them.
        self.engine.save_checkpoint(os.path.join(staging_dir, SUBDIR), tag=_tag(step))
        return {}

    def files_to_restore(self, paths: list[str], rank: int) -> list[str]:
        # ZeRO 1/2 loading reads every rank's optimizer partition, so fetch the whole engine dir.
        return [p for p in paths if p.startswith(SUBDIR + "/")]

    def restore(self, local_dir: str, step: int, saved_world_size: int) -> None:
        world_size = torch.distributed.get_world_size()
        if saved_world_size == world_size:
            self._load(os.path.join(local_dir, SUBDIR), step, universal=False)
            return
        # ZeRO partitions the optimizer state by rank, so a checkpoint written by another number
        # of ranks is first converted to DeepSpeed's universal (per-parameter, unpartitioned)
        # format, then loaded with load_universal_checkpoint, which repartitions it. One process
        # per node converts (the converter holds the whole state in memory) into a node-local
        # scratch dir the node's ranks share; it is removed once every rank has loaded it.
        shared = node_scratch_dir(step)
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        universal_root = shared or os.path.join(local_dir, UNIVERSAL_SUBDIR)
        error: Exception | None = None
        if shared is None or local_rank == 0:
            shutil.rmtree(universal_root, ignore_errors=True)
            try:
                convert_to_universal(
                    os.path.join(local_dir, SUBDIR, _tag(step)),
                    os.path.join(universal_root, _tag(step)),
                    self.conversion_timeout,
                )
            except RuntimeError as exc:
                error = exc
        try:
            if self._everyone_ok(error is None):
                self._load(universal_root, step, universal=True)
        except Exception as exc:
            error = exc
        loaded = self._everyone_ok(error is None)
        if shared is not None and local_rank == 0:
            shutil.rmtree(shared, ignore_errors=True)
        if error is not None:
            raise error
        if not loaded:
            raise RuntimeError(f"another rank could not convert or load checkpoint step {step}")

    def _everyone_ok(self, ok: bool) -> bool:
        """AND over all ranks, so a failure on one rank never leaves the others waiting."""
        flag = torch.tensor([int(ok)], dtype=torch.int32, device=self.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
        return bool(flag.item())

    def _load(self, load_dir: str, step: int, universal: bool) -> None:
        # The engine reads this config flag at load time only; later loads (if any) are normal ones.
        self.engine._config.load_universal_checkpoint = universal
        try:
            load_path, _ = self.engine.load_checkpoint(
                load_dir, tag=_tag(step), load_optimizer_states=True, load_lr_scheduler_states=True
            )
        finally:
            self.engine._config.load_universal_checkpoint = False
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint step {step} from {load_dir}")

    def parameter_digest(self) -> str:
        params = list(self.module.named_parameters())
        if self.stage == 3:  # parameters are partitioned: gather them to hash the full values
            with self._deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
                return digest_parameters(params)
        return digest_parameters(params)

    def learning_rate(self) -> float:
        return float(self.engine.get_lr()[0])

    def optimizer_steps(self) -> int:
        return int(self.engine.global_steps)


def node_scratch_dir(step: int) -> str | None:
    """A directory every worker of this node (same launcher, same TMPDIR) names alike; None when
    not started by our launcher: then every rank converts into its own restore dir."""
    launcher = os.environ.get("RELAUNCH_LAUNCHER_PID")
    if not launcher:
        return None
    return os.path.join(tempfile.gettempdir(), f"relaunch-universal-{launcher}-{_tag(step)}")


def convert_to_universal(tag_dir: str, output_dir: str, timeout_seconds: float) -> None:
    """Convert one DeepSpeed checkpoint tag directory into a universal checkpoint at output_dir.

    Runs DeepSpeed's converter in a child process (one worker: no process pool to leak) so a
    stuck or slow conversion is killed at the deadline instead of holding the gang; the output
    lives in this rank's scratch restore dir and is deleted with it, so nothing half-converted
    is ever shared or reused.
    """
    command = [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        tag_dir,
        "--output_folder",
        output_dir,
        "--num_extract_workers",
        "1",
        "--num_merge_workers",
        "1",
        # Our checkpoints do not carry Megatron's universal_checkpoint_info (no tensor or
        # pipeline parallelism to describe); the converter's default for it is what fits.
        "--inject_missing_state",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"universal-checkpoint conversion of {tag_dir} took more than {timeout_seconds:.0f}s"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"universal-checkpoint conversion of {tag_dir} failed: {' | '.join(tail)}")
