"""The training loop's own state as named components, saved and restored as one registry.

Each component answers `state_dict()` and `load_state_dict(state)` and is registered once under
its name; a checkpoint holds `{name: component.state_dict()}` in every rank's file, and a resume
hands each component its part back. Neither the save nor the restore takes the pieces one by
one, so adding a component is one `register` call. (The pattern is torchtitan's; this code is
ours.) The engine - model, optimizer, LR scheduler, loss scale - is the one component that
saves itself as files instead (`Engine.snapshot`/`restore`): its state is sharded under ZeRO and
replicated under DDP, which a per-rank dict cannot express.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from trainer import rng


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class StepCounter:
    """Optimizer steps done, and the world size that did them."""

    def __init__(self, world_size: int):
        self.step = 0
        self.world_size = world_size

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


class RngStreams:
    """Every random number generator of this rank (python, numpy, torch CPU, CUDA)."""

    def state_dict(self) -> dict[str, Any]:
        return rng.capture()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng.restore(state)


class StateRegistry:
    def __init__(self) -> None:
        self._parts: dict[str, Stateful] = {}

    def register(self, name: str, part: Stateful) -> None:
        if name in self._parts:
            raise ValueError(f"state component {name!r} registered twice")
        self._parts[name] = part

    def state_dict(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in self._parts.items()}

    def load_state_dict(self, state: dict[str, Any], skip: Iterable[str] = ()) -> None:
        """Give every component its part back; a missing part is an error, not a silent reset."""
        wanted = [name for name in self._parts if name not in set(skip)]
        missing = [name for name in wanted if name not in state]
        if missing:
            raise KeyError(f"checkpoint has no state for {missing}")
        for name in wanted:
            self._parts[name].load_state_dict(state[name])


def rank_file_state(registry: StateRegistry, counter: StepCounter) -> dict[str, Any]:
    """What a rank's checkpoint file holds: the registry, plus `step` and `world_size` at the top,
    where the checkpointer (and checkpoints written before the registry) keep them."""
    return {"step": counter.step, "world_size": counter.world_size, **registry.state_dict()}


def registry_state_of(saved: dict[str, Any]) -> dict[str, Any]:
    """A rank file's state as the registry reads it (older files have no `progress` part)."""
    if "progress" in saved:
        return saved
    return {**saved, "progress": {"step": saved["step"], "world_size": saved.get("world_size")}}
