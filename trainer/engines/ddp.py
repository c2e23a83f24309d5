"""PyTorch DistributedDataParallel with gradient accumulation, autocast at the run's precision
(bf16, or fp16 with a loss scaler) and fp32 otherwise."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from trainer.engines.common import cpu_copy, digest_parameters, make_optimizer, make_scheduler
from trainer.numerics import autocast_dtype

STATE_FILE = "model.pt"


class DdpEngine:
    name = "ddp"

    def __init__(self, cfg, model: torch.nn.Module, device: torch.device, precision: str = "fp32"):
        self.device = device
        self.precision = precision
        self.module = model.to(device)
        on_gpu = device.type == "cuda"
        self.ddp = DistributedDataParallel(self.module, device_ids=[device.index] if on_gpu else None)
        self.optimizer = make_optimizer(cfg, self.module, device)
        self.scheduler = make_scheduler(cfg, self.optimizer)
        self._settled = False
        dtype = autocast_dtype(precision)
        self.autocast = (
            (lambda: torch.autocast(device.type, dtype=dtype))
            if dtype is not None
            else contextlib.nullcontext
        )
        # fp16 gradients underflow without loss scaling; bf16 (fp32's exponent range) needs none.
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def _settle_buckets(self, batch: tuple) -> None:
        """One throw-away forward/backward before the first real step.

        DDP regroups its gradient buckets after the first backward, and gloo's ring all-reduce
        sums an element in an order that depends on its offset in the bucket. Settling the layout
        first makes every attempt - fresh or resumed - reduce with the same layout from its first
        step on, which is what makes resume bitwise exact. RNG and gradients are left untouched.
        """
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), self.autocast():
            self.ddp(*batch).backward()
        self.optimizer.zero_grad(set_to_none=True)
        self._settled = True

    def train_step(self, micro_batches: list[tuple]) -> torch.Tensor:
        if not self._settled:
            self._settle_buckets(micro_batches[0])
        total = torch.zeros((), device=self.device)
        for index, batch in enumerate(micro_batches):
            is_last = index == len(micro_batches) - 1
            # Gradients are all-reduced only on the last micro-batch of the step.
            sync = contextlib.nullcontext() if is_last else self.ddp.no_sync()
            with sync:
                with self.autocast():
                    loss = self.ddp(*batch) / len(micro_batches)
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            total += loss.detach()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skips the step on inf/nan gradients
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def snapshot(self, staging_dir: str, step: int) -> dict[str, Any]:
        # Model and optimizer are replicated: rank 0 saves them once.
        if torch.distributed.get_rank() != 0:
            return {}
        state = {
            "model": cpu_copy(self.module.state_dict()),
            "optimizer": cpu_copy(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
        }
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return {STATE_FILE: state}

    def files_to_restore(self, paths: list[str], rank: int) -> list[str]:
        return [STATE_FILE]

    def restore(self, local_dir: str, step: int, saved_world_size: int) -> None:
        # Replicated state saved once by rank 0: the same file loads at any world size.
        state = torch.load(os.path.join(local_dir, STATE_FILE), map_location=self.device, weights_only=True)
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])

    def parameter_digest(self) -> str:
        return digest_parameters(self.module.named_parameters())

    def learning_rate(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def optimizer_steps(self) -> int:
        return int(self.scheduler.last_epoch)  # stepped once per optimizer step
