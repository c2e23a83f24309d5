"""The next step's batches, prepared on a thread of their own while the current step runs.

Reading samples and stacking them is host work that would otherwise sit between two steps, with
the GPU idle. A single worker thread does it one step ahead; on a GPU it also pins the stacked
tensors, so the copy to the device is asynchronous (`non_blocking` from pageable memory is a
synchronous copy). The sampler is advanced in the caller's thread, so the order of the samples
never depends on thread timing; the dataset's `__getitem__` runs on the worker thread and must
not draw from the global RNGs (which belong to the training thread and its checkpoints).

On CPU the batches are prepared in the training thread instead (`ahead` is off by default
there): nothing waits idle for the host work to overlap with, the cores are the ones the compute
threads use, and a second thread only adds context switches and GIL hand-offs (measured with
bench/trainer_bench.py; trainer/README.md). The samples and positions are the same either way.

The data position saved in checkpoints is the sampler's position after the last step handed
out, not after the one prepared ahead: a resume starts with exactly the next step's samples.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from trainer.data import ResumableSampler


class StepBatches:
    def __init__(
        self,
        dataset,
        sampler: ResumableSampler,
        micro_steps: int,
        device: torch.device,
        ahead: bool | None = None,
    ):
        self.dataset = dataset
        self.sampler = sampler
        self.micro_steps = micro_steps
        self.device = device
        self._pin = device.type == "cuda"
        # None: one step ahead on a GPU only (see the module's docstring).
        self.ahead = device.type == "cuda" if ahead is None else ahead
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="relaunch-batches") if self.ahead else None
        )
        self._ahead: tuple[Future, dict] | None = None
        self._position = sampler.state_dict()

    def next_step(self, prepare_another: bool = True) -> list[tuple]:
        """This step's micro-batches on the device; with `prepare_another` (and `ahead`), start
        preparing the next one on the worker thread."""
        if self._pool is None:
            host = self._load(self._draw())
            self._position = self.sampler.state_dict()
        else:
            future, position = self._ahead if self._ahead is not None else self._prepare(self._pool)
            self._ahead = self._prepare(self._pool) if prepare_another else None
            host = future.result()
            self._position = position
        return [tuple(t.to(self.device, non_blocking=True) for t in batch) for batch in host]

    def _draw(self) -> list[list[int]]:
        return [self.sampler.next_indices() for _ in range(self.micro_steps)]

    def _prepare(self, pool: ThreadPoolExecutor) -> tuple[Future, dict]:
        indices = self._draw()
        return pool.submit(self._load, indices), self.sampler.state_dict()

    def _load(self, step_indices: list[list[int]]) -> list[tuple]:
        batches = []
        for indices in step_indices:
            samples = [self.dataset[i] for i in indices]
            columns = (torch.stack(column) for column in zip(*samples, strict=True))
            batches.append(tuple(c.pin_memory() if self._pin else c for c in columns))
        return batches

    def state_dict(self) -> dict:
        return dict(self._position)

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved position; anything prepared ahead is dropped."""
        if self._ahead is not None:
            self._ahead[0].cancel()
            self._ahead = None
        self.sampler.load_state_dict(state)
        self._position = self.sampler.state_dict()

    @property
    def epoch(self) -> int:
        return int(self._position["epoch"])

    @property
    def consumed(self) -> int:
        return int(self._position["consumed"])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
