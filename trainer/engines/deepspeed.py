"""DeepSpeed ZeRO stages 1-3 (or a user's DeepSpeed config file, used as is)."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from trainer.config import ConfigError
from trainer.engines.common import digest_parameters, make_optimizer, make_scheduler

SUBDIR = "deepspeed"


def _tag(step: int) -> str:
    return f"step-{step:010d}"


def deepspeed_config(cfg, on_gpu: bool) -> dict:
    if cfg.deepspeed_config:
        try:
            with open(cfg.deepspeed_config) as fh:
                return json.load(fh)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--deepspeed-config {cfg.deepspeed_config!r}: {exc}") from None
    return {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": on_gpu},
        # The optimizer is torch's AdamW: DeepSpeed's fused/CPU Adam would need compiled ops.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine:
    name = "deepspeed"

    def __init__(self, cfg, model: torch.nn.Module, device: torch.device):
        import deepspeed

        self._deepspeed = deepspeed
        self.device = device
        self.stage = cfg.zero_stage
        config = deepspeed_config(cfg, device.type == "cuda")
        self.stage = int(config.get("zero_optimization", {}).get("stage", 0))
        optimizer = make_optimizer(cfg, model)
        scheduler = make_scheduler(cfg, optimizer)
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

    def restore(self, local_dir: str, step: int) -> None:
        load_path, _ = self.engine.load_checkpoint(
            os.path.join(local_dir, SUBDIR),
            tag=_tag(step),
            load_optimizer_states=True,
            load_lr_scheduler_states=True,
        )
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint step {step} from {local_dir}")

    def parameter_digest(self) -> str:
        params = list(self.module.named_parameters())
        if self.stage == 3:  # parameters are partitioned: gather them to hash the full values
            with self._deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
                return digest_parameters(params)
        return digest_parameters(params)
