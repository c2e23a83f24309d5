"""What every engine shares: the optimizer and schedule it builds, CPU copies for snapshots, and
the parameter digest that proves two runs ended in the same place."""

from __future__ import annotations

import hashlib

import torch


def make_optimizer(cfg, model: torch.nn.Module, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; on a GPU its fused kernel (one launch for all parameters, no host sync). On CPU the
    default implementation, whose arithmetic every CPU checkpoint so far was written with."""
    fused = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, **fused)


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
