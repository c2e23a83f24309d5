"""What the reconciler is built from, and how it says it stopped leading."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.adapters.vertex import VertexBackend
from controller.core.decide import CoreConfig
from controller.core.model import JobState
from controller.service.alerts import AlertSink
from controller.settings import Settings
from controller.store import StateStore, Versioned

# An observer of one stored transition: (state before, state after, the document written).
Transition = Callable[[JobState, JobState, dict[str, Any]], None]


class Deposed(RuntimeError):
    """This controller is not the leader any more (lease ran out, or a write was fenced)."""


@dataclass(frozen=True)
class Listed:
    """What the periodic pass just listed about one live job, handed to that job's next look so
    that it reads nothing the pass already read (`service.sources`, "the pass's snapshot"); or the
    record the intake just created, handed to the new job's first look."""

    record: Versioned  # the job's document as the store listed it (or as the intake created it)
    # Whether a cancel for it was among the listed cancel records; None: not read (the look reads it).
    cancel_recorded: bool | None
    probe: bool = False  # the pass picked it for a progress probe (its checkpoint root is listed)


@dataclass
class Dependencies:
    store: StateStore
    vertex: VertexBackend
    checkpoints: Any  # controller.adapters.checkpoints.CheckpointProbe
    alerts: AlertSink
    metrics: Any | None = None  # controller.service.metrics.Metrics
    on_transition: list[Transition] = field(default_factory=list)


def core_config(settings: Settings) -> CoreConfig:
    """The decision core's operator knobs, from the settings."""
    return CoreConfig(
        submit_retry_seconds=settings.submit_retry_seconds,
        capacity_wait_alert_seconds=settings.capacity_wait_alert_seconds,
        preemption_storm_count=settings.preemption_storm_count,
        preemption_storm_window_seconds=settings.preemption_storm_window_seconds,
        error_settle_seconds=settings.error_settle_seconds,
        error_recheck_seconds=settings.error_recheck_seconds,
        capacity_retry_seconds=settings.capacity_retry_seconds,
    )
