"""Training engines: how one optimizer step is computed and how its state is saved/restored.

Every engine offers the same small surface to the loop and the checkpointer:
  train_step(micro_batches) -> detached mean loss of the step
  snapshot(staging_dir, step) -> {file name: CPU object}: the blocking part of a save; the
      objects are serialised later (in the background) and files the engine wrote itself into
      staging_dir are uploaded as they are
  files_to_restore(paths, rank) -> which checkpoint files this rank must download
  restore(local_dir, step, saved_world_size) -> load them; the checkpoint may come from another
      world size (elastic resume), which the engine must reshard
  parameter_digest() -> sha256 over all parameters (same on every rank)
  learning_rate(), optimizer_steps() -> where the schedule stands (logged, compared by tests)
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Engine(Protocol):
    name: str
    module: torch.nn.Module
    precision: str  # bf16, fp16 or fp32: what it trains at (recorded in every commit marker)

    def train_step(self, micro_batches: list[tuple]) -> torch.Tensor: ...
    def snapshot(self, staging_dir: str, step: int) -> dict[str, Any]: ...
    def files_to_restore(self, paths: list[str], rank: int) -> list[str]: ...
    def restore(self, local_dir: str, step: int, saved_world_size: int) -> None: ...
    def parameter_digest(self) -> str: ...
    def learning_rate(self) -> float: ...
    def optimizer_steps(self) -> int: ...


def build_engine(cfg, model: torch.nn.Module, device: torch.device, precision: str) -> Engine:
    """`precision`: bf16, fp16 or fp32, as trainer.numerics resolved it for this device."""
    if cfg.engine == "ddp":
        from trainer.engines.ddp import DdpEngine

        return DdpEngine(cfg, model, device, precision)
    from trainer.engines.deepspeed import DeepSpeedEngine

    return DeepSpeedEngine(cfg, model, device, precision)
