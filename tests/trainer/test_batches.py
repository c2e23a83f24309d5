"""The step batches: prepared one step ahead on a worker thread (the GPU default) or in the
training thread (the CPU default), a run sees the same samples and saves the same data position,
and a resume from that position continues with exactly the next step's samples."""

import pytest
import torch

from trainer.batches import StepBatches
from trainer.data import ResumableSampler


class Numbered(torch.utils.data.Dataset):
    """Sample i is (i, -i): the batches say which samples they hold."""

    def __len__(self) -> int:
        return 37

    def __getitem__(self, index: int):
        return torch.tensor(index), torch.tensor(-index)


def batches(ahead: bool) -> StepBatches:
    sampler = ResumableSampler(37, 3, rank=1, world_size=2, seed=5, step_samples=12)
    return StepBatches(Numbered(), sampler, micro_steps=2, device=torch.device("cpu"), ahead=ahead)


def run(source: StepBatches, steps: int, last: int | None = None):
    """Samples of each step, and the position after each (prepare_another off at step `last`)."""
    seen = []
    for step in range(1, steps + 1):
        step_batches = source.next_step(prepare_another=step != last)
        seen.append(([b[0].tolist() for b in step_batches], source.state_dict()))
    return seen


def test_the_cpu_default_prepares_in_the_training_thread_and_a_gpu_one_step_ahead():
    sampler = ResumableSampler(37, 3, rank=0, world_size=1, seed=5)
    on_cpu, on_gpu = (StepBatches(Numbered(), sampler, 1, torch.device(*d)) for d in [("cpu",), ("cuda", 0)])
    on_cpu.close()
    on_gpu.close()
    assert (on_cpu.ahead, on_gpu.ahead) == (False, True)


def test_ahead_and_in_thread_hand_out_the_same_samples_and_positions_across_epochs():
    ahead, in_thread = batches(ahead=True), batches(ahead=False)
    try:
        assert run(ahead, 9) == run(in_thread, 9)  # 3 steps an epoch: crosses two epoch ends
    finally:
        ahead.close()
        in_thread.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_a_resume_from_the_saved_position_continues_with_exactly_the_next_step(ahead):
    uninterrupted = batches(ahead)
    first, resumed = batches(ahead), batches(ahead)
    try:
        expected = run(uninterrupted, 8)
        head = run(first, 4)  # with ahead, step 5 is already prepared when step 4's position is saved
        resumed.load_state_dict(head[-1][1])
        assert head + run(resumed, 4) == expected
    finally:
        for source in (uninterrupted, first, resumed):
            source.close()
