"""Built-in example: a small GPT-style causal language model on bytes of a bundled text.

Everything ships with the package (corpus.txt); nothing is downloaded. Defaults are tiny so
that multi-process CPU tests finish in seconds; `build_larger_model` is for benchmarks.
"""

from __future__ import annotations

import math
from importlib import resources

import torch
from torch import nn
from torch.nn import functional as F

VOCAB_SIZE = 256  # byte-level tokenizer: a token is a byte


def encode(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, context: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # (batch, heads, length, head_width)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~self.mask[:length, :length], float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(batch, length, width)
        return self.dropout(self.proj(out))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, context: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context, dropout)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """forward(tokens, targets) returns the mean next-token cross-entropy: the trainer's model contract."""

    def __init__(self, context: int, width: int, layers: int, heads: int, dropout: float):
        super().__init__()
        self.context = context
        self.token_embedding = nn.Embedding(VOCAB_SIZE, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB_SIZE, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, VOCAB_SIZE).float(), targets.view(-1))


class ByteWindows(torch.utils.data.Dataset):
    """Overlapping windows of the corpus: input bytes and the same bytes shifted by one."""

    def __init__(self, tokens: torch.Tensor, context: int, stride: int):
        self.tokens = tokens
        self.context = context
        self.starts = list(range(0, len(tokens) - context - 1, stride))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int):
        start = self.starts[index]
        window = self.tokens[start : start + self.context + 1]
        return window[:-1], window[1:]


def corpus_tokens() -> torch.Tensor:
    text = resources.files("trainer.examples").joinpath("corpus.txt").read_text(encoding="utf-8")
    return encode(text)


TINY_CONTEXT = 32
LARGER_CONTEXT = 64


def build_model() -> nn.Module:
    return TinyGPT(context=TINY_CONTEXT, width=32, layers=2, heads=2, dropout=0.1)


def build_model_without_dropout() -> nn.Module:
    """The tiny model with no randomness in its forward pass (bench/elastic_resume.py uses it to
    separate rounding from dropout noise)."""
    return TinyGPT(context=TINY_CONTEXT, width=32, layers=2, heads=2, dropout=0.0)


def build_dataset() -> torch.utils.data.Dataset:
    return ByteWindows(corpus_tokens(), context=TINY_CONTEXT, stride=16)


def build_larger_model() -> nn.Module:
    return TinyGPT(context=LARGER_CONTEXT, width=128, layers=4, heads=4, dropout=0.1)


def build_larger_dataset() -> torch.utils.data.Dataset:
    return ByteWindows(corpus_tokens(), context=LARGER_CONTEXT, stride=8)
