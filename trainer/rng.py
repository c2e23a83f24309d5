"""Capture and restore every random number generator a rank uses, for exact resumes."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)  # also seeds every CUDA device


def capture() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rank_stream_seed(seed: int, rank: int, step: int) -> int:
    """The seed of a rank's RNG streams after a resume at another world size.

    Per-rank streams (dropout and friends) cannot carry over when the ranks change: rank r of
    the new gang has no predecessor, or one that processed other samples. Every rank then
    starts a stream that depends only on (seed, rank, step), so a resume is reproducible and
    two resumes at different steps never replay the same masks.
    """
    return (seed * 1_000_003 + 7919 * (rank + 1) + 104_729 * step) % (2**63)
