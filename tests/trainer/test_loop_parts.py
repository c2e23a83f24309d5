"""Fast checks of the pieces the loop relies on: sampler position, exit-code merging, grace budget."""

import pytest

from trainer import layout
from trainer.data import ResumableSampler
from trainer.launch import combine_exit_codes
from trainer.node_status import WorkerOutcome
from trainer.preemption import emergency_save_fits


def test_sampler_resumed_from_its_state_continues_with_exactly_the_next_batches():
    def stream(sampler, n):
        return [sampler.next_indices() for _ in range(n)]

    uninterrupted = stream(ResumableSampler(50, 4, rank=1, world_size=3, seed=7), 12)  # crosses epochs
    first = ResumableSampler(50, 4, rank=1, world_size=3, seed=7)
    head = stream(first, 5)
    second = ResumableSampler(50, 4, rank=1, world_size=3, seed=7)
    second.load_state_dict(first.state_dict())
    assert head + stream(second, 7) == uninterrupted


def test_sampler_ranks_split_each_global_batch_without_overlap():
    ranks = [ResumableSampler(40, 5, rank=r, world_size=4, seed=1) for r in range(4)]
    for _ in range(4):  # two epochs of two global batches each
        batch = [i for s in ranks for i in s.next_indices()]
        assert len(batch) == len(set(batch)) == 20


def _outcome(code):
    return WorkerOutcome(0, code, False)


@pytest.mark.parametrize(
    "codes,signalled,expected",
    [
        ([0, 0], False, 0),
        ([75, 75], True, 75),
        ([75, None], True, 76),  # a worker SIGKILLed before reporting: not everything was saved
        ([75, 70], True, 70),
        ([64, 70], False, 64),
        ([0, None], False, 70),
        ([0, 1], False, 70),  # unknown codes are runtime errors
    ],
)
def test_node_exit_code_is_the_most_telling_worker_outcome(codes, signalled, expected):
    outcomes = [None if c is None else _outcome(c) for c in codes]
    assert combine_exit_codes(outcomes, signalled) == expected


def test_emergency_save_is_attempted_only_when_it_fits_the_grace_budget():
    assert emergency_save_fits(seconds_left=20, estimated_save_seconds=None)  # unknown cost: try
    assert emergency_save_fits(seconds_left=20, estimated_save_seconds=10)
    assert not emergency_save_fits(seconds_left=20, estimated_save_seconds=15)
    assert not emergency_save_fits(seconds_left=0, estimated_save_seconds=None)
    assert layout.EXIT_PREEMPTED_UNSAVED == 76
