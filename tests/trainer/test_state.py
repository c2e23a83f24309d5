"""The loop's state registry: one save, one restore, no component forgotten."""

import random

import pytest

from trainer.data import ResumableSampler
from trainer.state import RngStreams, StateRegistry, StepCounter, rank_file_state, registry_state_of


def _registry(counter, sampler):
    registry = StateRegistry()
    registry.register("progress", counter)
    registry.register("data", sampler)
    registry.register("rng", RngStreams())
    return registry


def test_a_restored_registry_continues_every_component_where_the_saved_one_stood():
    counter, sampler = StepCounter(world_size=2), ResumableSampler(100, 4, 0, 2, seed=7)
    registry = _registry(counter, sampler)
    for _ in range(5):
        sampler.next_indices()
    counter.step = 5
    saved = rank_file_state(registry, counter)
    expected_batch, expected_draw = sampler.next_indices(), random.random()

    fresh_counter, fresh_sampler = StepCounter(world_size=2), ResumableSampler(100, 4, 0, 2, seed=7)
    _registry(fresh_counter, fresh_sampler).load_state_dict(registry_state_of(saved))
    assert fresh_counter.step == 5 and saved["step"] == 5 and saved["world_size"] == 2
    assert fresh_sampler.next_indices() == expected_batch
    assert random.random() == expected_draw


def test_a_rank_file_from_before_the_registry_still_loads():
    old = {"step": 3, "world_size": 2, "data": {"epoch": 0, "consumed": 24}, "rng": RngStreams().state_dict()}
    counter, sampler = StepCounter(world_size=2), ResumableSampler(100, 4, 0, 2, seed=7)
    _registry(counter, sampler).load_state_dict(registry_state_of(old))
    assert (counter.step, sampler.consumed) == (3, 24)


def test_a_missing_component_is_an_error_and_a_skipped_one_is_left_alone():
    counter, sampler = StepCounter(world_size=2), ResumableSampler(100, 4, 0, 2, seed=7)
    registry = _registry(counter, sampler)
    with pytest.raises(KeyError, match="rng"):
        registry.load_state_dict({"progress": {"step": 1}, "data": {"epoch": 0, "consumed": 0}})
    registry.load_state_dict({"progress": {"step": 1}, "data": {"epoch": 0, "consumed": 8}}, skip=["rng"])
    assert (counter.step, sampler.consumed) == (1, 8)
    with pytest.raises(ValueError, match="twice"):
        registry.register("data", sampler)
