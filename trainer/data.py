"""A resumable distributed sampler: its position is part of every checkpoint.

The sampler walks a stream of global batches (batch_size x world_size samples each), epoch by
epoch, in an order fixed by the seed and the epoch; rank r takes its slice of each global batch.
Its state is (epoch, samples consumed in that epoch), so a resume continues with exactly the
next batch and the state means the same thing at any world size.

With a fixed global batch (`step_samples`, --global-batch-size) one optimizer step takes the
next `step_samples` samples of the order, cut into micro-batches of batch_size x world_size;
an epoch's incomplete last *step* is dropped. So the samples of every optimizer step, and the
epoch boundaries, are the same at every world size: only how they are spread over ranks and
micro-steps changes. Without it the incomplete last micro-batch is dropped, as it always was.
"""

from __future__ import annotations

import torch

from trainer.config import ConfigError


class ResumableSampler:
    def __init__(
        self,
        dataset_len: int,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        step_samples: int | None = None,
    ):
        self.global_batch = batch_size * world_size
        # The unit an epoch's tail is dropped by: one optimizer step's samples, or one micro-step's.
        self.step_samples = step_samples or self.global_batch
        if self.step_samples % self.global_batch:
            raise ConfigError(
                f"{self.step_samples} samples per step do not split into micro-batches of {self.global_batch}"
            )
        if dataset_len < self.step_samples:
            raise ConfigError(
                f"dataset has {dataset_len} samples, fewer than one global batch ({self.step_samples})"
            )
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.rank = rank
        self.seed = seed
        self.epoch = 0
        self.consumed = 0
        self._order: list[int] | None = None

    def _epoch_order(self) -> list[int]:
        if self._order is None:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._order = torch.randperm(self.dataset_len, generator=generator).tolist()
        return self._order

    def next_indices(self) -> list[int]:
        # The incomplete last global batch of an epoch is dropped, so all ranks stay in step.
        # With a fixed global batch a step that would not fit whole is dropped at its start.
        at_step_start = self.consumed % self.step_samples == 0
        step_cut = at_step_start and self.consumed + self.step_samples > self.dataset_len
        if step_cut or self.consumed + self.global_batch > self.dataset_len:
            self.epoch += 1
            self.consumed = 0
            self._order = None
        start = self.consumed + self.rank * self.batch_size
        indices = self._epoch_order()[start : start + self.batch_size]
        self.consumed += self.global_batch
        return indices

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])
        self._order = None
