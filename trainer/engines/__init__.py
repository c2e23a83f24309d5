"""Training engines: how one optimizer step is computed and how its state is saved/restored.

Every engine offers the same small surface to the loop and the checkpointer:
  train_step(micro_batches) -> detached mean loss of the step
  snapshot(staging_dir, step) -> {file name: CPU object}: the blocking part of a save; the
      objects are serialised later (in the background) and files the engine wrote itself into
      staging_dir are uploaded as they are
  files_to_restore(paths, rank) -> which checkpoint files this rank must download
  restore(local_dir, step) -> load them
  parameter_digest() -> sha256 over all parameters (same on every rank)
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import torch


class Engine(Protocol):
    name: str
    module: torch.nn.Module

    def train_step(self, micro_batches: list[tuple]) -> torch.Tensor: ...
    def snapshot(self, staging_dir: str, step: int) -> dict[str, Any]: ...
    def files_to_restore(self, paths: list[str], rank: int) -> list[str]: ...
    def restore(self, local_dir: str, step: int) -> None: ...
    def parameter_digest(self) -> str: ...


def build_engine(cfg, model: torch.nn.Module, device: torch.device) -> Engine:
    if cfg.engine == "ddp":
        from trainer.engines.ddp import DdpEngine

        return DdpEngine(cfg, model, device)
    from trainer.engines.deepspeed import DeepSpeedEngine

    return DeepSpeedEngine(cfg, model, device)


def make_optimizer(cfg, model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)


def make_scheduler(cfg, optimizer: torch.optim.Optimizer):
    """Linear warm-up, then constant: simple, and its state is just the step counter."""
    warmup = cfg.warmup_steps

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup) if warmup else 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def cpu_copy(obj):
    """Deep copy with every tensor cloned to CPU, so the training loop can keep mutating its state."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return obj


def digest_parameters(named_parameters) -> str:
    digest = hashlib.sha256()
    for name, param in named_parameters:
        digest.update(name.encode())
        digest.update(param.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
