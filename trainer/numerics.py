"""How a rank computes: the precision it trains at and whether it must be deterministic.

Precision. `--precision auto` picks from the device: bf16 autocast where the GPU has bf16 units
(compute capability 8.0 and later: A100, L4, H100), fp16 autocast with loss scaling on older
GPUs (T4, V100: bf16 there is emulated and slow), fp32 on CPU. The choice is recorded in every
commit marker; a checkpoint trained at one precision is never resumed at another (the optimizer
state, a loss scale or its absence, and the trajectory would silently change), see
`check_resume_precision`.

Determinism. `--deterministic` sets what PyTorch documents for reproducibility
(https://pytorch.org/docs/stable/notes/randomness.html): deterministic algorithms only (an op
without a deterministic implementation raises instead of running), cuDNN's deterministic
algorithms without benchmarking, and cuBLAS's fixed workspace (`CUBLAS_WORKSPACE_CONFIG=:4096:8`,
required by cuBLAS on CUDA 10.2 and later, set before the first cuBLAS handle exists).
"""

from __future__ import annotations

import os

from trainer.config import ConfigError

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
# Texts of the error torch raises for an op without a deterministic implementation.
_NONDETERMINISTIC_TEXTS = ("does not have a deterministic implementation", "use_deterministic_algorithms")


def resolve_precision(requested: str, device_type: str, capability: tuple[int, int] | None) -> str:
    """The precision this run trains at (pure: the caller reads the device)."""
    on_gpu = device_type == "cuda"
    if requested == "auto":
        if not on_gpu:
            return "fp32"
        return "bf16" if capability is not None and capability >= (8, 0) else "fp16"
    if requested == "fp16" and not on_gpu:
        raise ConfigError("--precision fp16 needs a GPU (fp16 autocast with loss scaling is CUDA-only here)")
    return requested


def device_precision(requested: str, device) -> str:
    import torch

    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return resolve_precision(requested, device.type, capability)


def autocast_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def check_resume_precision(saved: str | None, current: str, step: int) -> None:
    """Refuse a resume at another precision. Markers written before precision was recorded
    carry none: those were bf16 on GPU and fp32 on CPU, which is what `auto` still picks there."""
    if saved is not None and saved != current:
        raise ConfigError(
            f"checkpoint step {step} was trained at {saved} but this run trains at {current}: "
            f"resume with --precision {saved} (or start a new job to change precision)"
        )


def enable_determinism() -> None:
    """Call before the first CUDA/cuBLAS use (before the process group and the model)."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def is_nondeterministic_op_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(marker in text for marker in _NONDETERMINISTIC_TEXTS)
