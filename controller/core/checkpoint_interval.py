"""How often an attempt should checkpoint: learn the rate of work-losing endings, pick the interval.

Pure: no I/O, no clock, stdlib only. The controller keeps a `RateBook` in the state store, feeds
it every attempt ending it sees (`observe`), and before each new attempt asks `choose_interval`
for the seconds of training between two checkpoints (passed as RELAUNCH_CHECKPOINT_INTERVAL_SECONDS).

What the interval trades off
----------------------------
Checkpointing every tau seconds of training costs C/tau of the time in stalls; a failure that loses
work throws away, on average, about half an interval. With M the mean time between *work-losing*
endings, the waste C/tau + tau/(2M) is smallest at Young's tau = sqrt(2CM); Daly's higher-order
form corrects it when C is not small next to M.

What C is. The trainer saves in two phases: a blocking stall (state copied out of the training
loop) and then an asynchronous write to GCS that ends with the commit. Only the stall stops
training, so C here is the *blocking stall* alone. The full write time W matters only when a
failure lands between the stall and the commit: then the previous checkpoint is the newest one and
about W more seconds are lost. That is a fixed extra loss per failure whatever tau is (the window
is W long in every interval), so it changes the expected waste but not the interval that
minimises it. W does set a floor: an interval shorter than W would start a new save before the
last one committed, so `choose_interval` never returns less than W.

What M counts. Only endings that lose work: an announced reclaim whose emergency save committed
loses (almost) nothing and is not a failure here, although it ends the attempt. `EndingKind`
names each kind and `loses_work` says which count.

The estimate
------------
Per capacity class, work-losing endings are taken to arrive as a Poisson process with unknown
rate lambda per second of exposure (seconds an attempt held its machines). The conjugate prior is
Gamma(alpha, beta) (shape, rate): after n endings in T seconds of exposure the posterior is
Gamma(alpha + n, beta + T). The prior reads as "alpha endings seen in beta seconds".

The choice
----------
`choose_interval` minimises the *posterior-expected* time to finish one interval of work, using
the exact renewal model under exponential failures (the model Daly's formula approximates),
averaged over the posterior of lambda in closed form. Early on, when the posterior is wide, this
is shorter than the interval for the posterior-mean rate, because the expected cost of an
interval grows faster than linearly in lambda (a rate higher than believed hurts more than a
lower one helps). With many observations it converges to the exact optimum for the true rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

HOUR = 3600.0
DAY = 24 * HOUR


class EndingKind(str, Enum):
    """How an attempt ended, as far as checkpointed work is concerned."""

    # Announced reclaim (SIGTERM) and the emergency checkpoint committed: nothing is lost.
    RECLAIM_SAVED = "reclaim_saved"
    # Announced reclaim, but the emergency checkpoint did not commit (SIGKILL before the save
    # finished, grace too short): everything since the last committed checkpoint is lost.
    RECLAIM_UNSAVED = "reclaim_unsaved"
    # No notice at all: SIGKILL, a replica crashed, a node was lost.
    KILLED = "killed"
    CRASHED = "crashed"
    NODE_LOST = "node_lost"
    # Endings that say nothing about the capacity's reliability. Their exposure still counts: the
    # attempt held its machines that long without a work-losing ending.
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    USER_ERROR = "user_error"


_WORK_LOSING = frozenset(
    {EndingKind.RECLAIM_UNSAVED, EndingKind.KILLED, EndingKind.CRASHED, EndingKind.NODE_LOST}
)


def loses_work(kind: EndingKind) -> bool:
    """True for endings that throw away the work done since the last committed checkpoint."""
    return kind in _WORK_LOSING


# --- closed forms -------------------------------------------------------------------------------


def young_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Young (1974): tau = sqrt(2 C M), first-order optimum, good when C << M."""
    _check_positive(checkpoint_cost=checkpoint_cost, mtbf=mtbf)
    return math.sqrt(2.0 * checkpoint_cost * mtbf)


def daly_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum (compute time between checkpoints, C and restart excluded).

    J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
    Future Generation Computer Systems 22(3):303-312, 2006:
        tau = sqrt(2 C M) * [1 + (1/3) sqrt(C / (2M)) + (1/9) (C / (2M))] - C   for C < 2M
        tau = M                                                               for C >= 2M
    Past C = 2M checkpointing barely pays at all; Daly's paper gives M there, and so do we.
    """
    _check_positive(checkpoint_cost=checkpoint_cost, mtbf=mtbf)
    if checkpoint_cost >= 2.0 * mtbf:
        return mtbf
    ratio = checkpoint_cost / (2.0 * mtbf)
    return math.sqrt(2.0 * checkpoint_cost * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - (
        checkpoint_cost
    )


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (value > 0.0 and math.isfinite(value)):
            raise ValueError(f"{name} must be positive and finite (got {value})")


# --- capacity classes and the estimate ----------------------------------------------------------


@dataclass(frozen=True)
class CapacityClass:
    """Attempts that share these draw on the same pool of machines and see the same reclaim rate."""

    region: str
    machine_type: str
    accelerator: str  # e.g. "NVIDIA_H100_80GB"; "" for CPU-only machines
    scheduling_strategy: str  # Vertex Scheduling.Strategy name: "SPOT", "STANDARD", "FLEX_START"

    def key(self) -> str:
        """A stable string key (for dicts kept as JSON)."""
        return "/".join((self.region, self.machine_type, self.accelerator, self.scheduling_strategy))

    def to_dict(self) -> dict[str, str]:
        return {
            "region": self.region,
            "machine_type": self.machine_type,
            "accelerator": self.accelerator,
            "scheduling_strategy": self.scheduling_strategy,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapacityClass:
        return cls(
            region=str(data["region"]),
            machine_type=str(data["machine_type"]),
            accelerator=str(data["accelerator"]),
            scheduling_strategy=str(data["scheduling_strategy"]),
        )


@dataclass(frozen=True)
class RateEstimate:
    """Gamma(alpha, beta) posterior of the rate (per second) of work-losing endings.

    `endings` and `exposure_seconds` are what was observed on top of the prior, kept so that the
    explanation can say what the estimate rests on.
    """

    alpha: float
    beta: float  # seconds
    endings: int = 0
    exposure_seconds: float = 0.0

    def __post_init__(self) -> None:
        _check_positive(alpha=self.alpha, beta=self.beta)
        if self.endings < 0 or self.exposure_seconds < 0.0:
            raise ValueError("observations cannot be negative")

    @property
    def mean_rate(self) -> float:
        """Posterior mean of lambda, per second."""
        return self.alpha / self.beta

    @property
    def mtbf(self) -> float:
        """1 / posterior mean rate: the mean time between work-losing endings the estimate implies."""
        return self.beta / self.alpha

    def update(self, work_losing_endings: int, exposure_seconds: float) -> RateEstimate:
        """Conjugate update: n endings in T seconds turn Gamma(a, b) into Gamma(a + n, b + T)."""
        if work_losing_endings < 0 or not (exposure_seconds >= 0.0 and math.isfinite(exposure_seconds)):
            raise ValueError(
                f"need endings >= 0 and finite exposure >= 0 (got {work_losing_endings}, {exposure_seconds})"
            )
        return RateEstimate(
            alpha=self.alpha + work_losing_endings,
            beta=self.beta + exposure_seconds,
            endings=self.endings + work_losing_endings,
            exposure_seconds=self.exposure_seconds + exposure_seconds,
        )

    def observe(self, kind: EndingKind, exposure_seconds: float) -> RateEstimate:
        """Fold in one attempt: how it ended and how long it held its machines."""
        return self.update(1 if loses_work(kind) else 0, exposure_seconds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "endings": self.endings,
            "exposure_seconds": self.exposure_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateEstimate:
        return cls(
            alpha=float(data["alpha"]),
            beta=float(data["beta"]),
            endings=int(data.get("endings", 0)),
            exposure_seconds=float(data.get("exposure_seconds", 0.0)),
        )


# Priors. Weight alpha = 2 reads as "two work-losing endings seen"; a dozen real ones outweigh it.
# Spot: a multi-node Spot job is reclaimed every few hours, and whether the emergency save gets
# done in Vertex's (unknown, assume <= 15 s) grace is uncertain, so until the data say otherwise
# assume most reclaims lose work: prior mean MTBF 4 h. Erring short early costs a few percent in
# stalls; erring long costs half an interval of recomputation at every failure.
# Standard and Flex-start capacity is not reclaimed; what remains is crashes, node loss and host
# events: prior mean MTBF 3 days.
SPOT_PRIOR = RateEstimate(alpha=2.0, beta=2.0 * 4 * HOUR)
NON_PREEMPTIBLE_PRIOR = RateEstimate(alpha=2.0, beta=2.0 * 3 * DAY)


def prior_for(capacity: CapacityClass) -> RateEstimate:
    return SPOT_PRIOR if capacity.scheduling_strategy.upper() == "SPOT" else NON_PREEMPTIBLE_PRIOR


@dataclass(frozen=True)
class RateBook:
    """One estimate per capacity class; classes never observed read as their prior."""

    estimates: tuple[tuple[CapacityClass, RateEstimate], ...] = ()

    def estimate(self, capacity: CapacityClass) -> RateEstimate:
        for known, estimate in self.estimates:
            if known == capacity:
                return estimate
        return prior_for(capacity)

    def observe(self, capacity: CapacityClass, kind: EndingKind, exposure_seconds: float) -> RateBook:
        updated = self.estimate(capacity).observe(kind, exposure_seconds)
        others = tuple((c, e) for c, e in self.estimates if c != capacity)
        return replace(self, estimates=(*others, (capacity, updated)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "classes": [
                {"capacity": capacity.to_dict(), "estimate": estimate.to_dict()}
                for capacity, estimate in self.estimates
            ]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateBook:
        return cls(
            estimates=tuple(
                (CapacityClass.from_dict(row["capacity"]), RateEstimate.from_dict(row["estimate"]))
                for row in data.get("classes", [])
            )
        )


# --- the choice ---------------------------------------------------------------------------------
#
# Exact renewal model (the one behind Daly's formula): an interval of tau seconds of work plus a
# C-second stall is retried until it runs a = tau + C seconds without a failure; each failure also
# costs R seconds of restart. For a known rate lambda the expected wall time of one interval is
#     T(a | lambda) = (1/lambda + R) * (exp(lambda a) - 1).
# Averaged over lambda ~ Gamma(alpha, beta), with x = a / beta < 1 (beyond, the average diverges:
# the posterior allows rates at which an interval that long would essentially never finish):
#     E[(exp(lambda a) - 1) / lambda] = int_0^a (1 - u/beta)^-alpha du
#                                     = beta/(alpha-1) * ((1-x)^(1-alpha) - 1)   (alpha != 1)
#                                     = -beta * log(1-x)                         (alpha == 1)
#     E[exp(lambda a) - 1]            = (1-x)^-alpha - 1
# We minimise g(a)/tau with g(a) = E[T(a | lambda)]. The condition d/dtau = 0 reads
# phi(tau) = tau g'(tau + C) - g(tau + C) = 0, and phi is increasing (phi' = tau g'' > 0) from
# phi(0) = -g(C) < 0, so the root is unique and the minimum is there.


def _g(a: float, alpha: float, beta: float, restart: float) -> float:
    x = a / beta
    log_one_minus_x = math.log1p(-x)
    if abs(alpha - 1.0) < 1e-12:
        loss = -beta * log_one_minus_x
    else:
        loss = beta / (alpha - 1.0) * math.expm1((1.0 - alpha) * log_one_minus_x)
    return loss + restart * math.expm1(-alpha * log_one_minus_x)


def _g_prime(a: float, alpha: float, beta: float, restart: float) -> float:
    log_one_minus_x = math.log1p(-a / beta)
    return math.exp(-alpha * log_one_minus_x) + restart * (alpha / beta) * math.exp(
        -(alpha + 1.0) * log_one_minus_x
    )


def _phi(tau: float, cost: float, estimate: RateEstimate, restart: float) -> float:
    a = tau + cost
    return tau * _g_prime(a, estimate.alpha, estimate.beta, restart) - _g(
        a, estimate.alpha, estimate.beta, restart
    )


def expected_waste_optimum(
    estimate: RateEstimate, checkpoint_cost: float, restart_cost: float = 0.0
) -> float:
    """The interval (seconds of work) minimising the posterior-expected wall time per unit of work.

    Unbounded above only in the limit; always finite and below beta - C here.
    """
    _check_positive(checkpoint_cost=checkpoint_cost)
    if restart_cost < 0.0:
        raise ValueError("restart_cost cannot be negative")
    ceiling = estimate.beta - checkpoint_cost  # tau must keep tau + C below beta
    if ceiling <= 0.0:
        # The posterior already allows a failure within a single stall: checkpoint as often as
        # anything allows; the caller's minimum decides.
        return 0.0
    # Bisection on log(tau): phi is increasing, so the sign tells which side the root is on.
    # The upper end stops where (1 - x)^-alpha reaches e^500, short of float overflow; phi is far
    # above zero there.
    x_max = -math.expm1(-500.0 / estimate.alpha)
    high = min(ceiling * (1.0 - 1e-9), x_max * estimate.beta - checkpoint_cost)
    low = min(1e-3, high / 2.0)
    if high <= 0.0:
        return 0.0
    if _phi(high, checkpoint_cost, estimate, restart_cost) <= 0.0:
        return high
    if _phi(low, checkpoint_cost, estimate, restart_cost) >= 0.0:
        return low
    log_low, log_high = math.log(low), math.log(high)
    while log_high - log_low > 1e-7:
        mid = 0.5 * (log_low + log_high)
        if _phi(math.exp(mid), checkpoint_cost, estimate, restart_cost) < 0.0:
            log_low = mid
        else:
            log_high = mid
    return math.exp(0.5 * (log_low + log_high))


@dataclass(frozen=True)
class IntervalChoice:
    seconds: float
    unclamped_seconds: float
    clamped_by: str | None  # "min", "max", "write_time" or None


def choose_interval_detail(
    estimate: RateEstimate,
    checkpoint_cost: float,
    min_s: float,
    max_s: float,
    *,
    restart_cost: float = 0.0,
    write_seconds: float = 0.0,
) -> IntervalChoice:
    """`choose_interval`, also saying what bound (if any) decided."""
    if not (0.0 < min_s <= max_s):
        raise ValueError(f"need 0 < min_s <= max_s (got {min_s}, {max_s})")
    if write_seconds < 0.0:
        raise ValueError("write_seconds cannot be negative")
    best = expected_waste_optimum(estimate, checkpoint_cost, restart_cost)
    seconds, clamped_by = best, None
    if seconds < write_seconds:
        seconds, clamped_by = write_seconds, "write_time"
    if seconds > max_s:
        seconds, clamped_by = max_s, "max"
    if seconds < min_s:
        seconds, clamped_by = min_s, "min"
    return IntervalChoice(seconds=seconds, unclamped_seconds=best, clamped_by=clamped_by)


def choose_interval(
    estimate: RateEstimate,
    checkpoint_cost: float,
    min_s: float,
    max_s: float,
    *,
    restart_cost: float = 0.0,
    write_seconds: float = 0.0,
) -> float:
    """Seconds of training between two checkpoints for the next attempt.

    `checkpoint_cost` is the blocking stall of one save (C); `write_seconds` the full write time
    up to the commit, which only floors the interval (see the module docstring); `restart_cost`
    the seconds a failure costs before training resumes (it shifts the optimum slightly once the
    rate is uncertain). The user's `min_s`/`max_s` win over everything.
    """
    return choose_interval_detail(
        estimate, checkpoint_cost, min_s, max_s, restart_cost=restart_cost, write_seconds=write_seconds
    ).seconds


def explain(estimate: RateEstimate, checkpoint_cost: float, choice: IntervalChoice) -> str:
    """One line for `status` and `report`."""
    basis = (
        f"{estimate.endings} work-losing ending(s) in {estimate.exposure_seconds / HOUR:.1f} h observed + prior"
        if estimate.exposure_seconds > 0.0 or estimate.endings
        else "prior only, nothing observed yet"
    )
    bound = {
        None: "",
        "min": " (raised to the configured minimum)",
        "max": " (lowered to the configured maximum)",
        "write_time": " (raised to the checkpoint's full write time)",
    }[choice.clamped_by]
    return (
        f"work-losing endings {estimate.mean_rate * HOUR:.3g}/h (MTBF {_duration(estimate.mtbf)}; {basis}); "
        f"checkpoint stall C {_duration(checkpoint_cost)}; "
        f"interval {_duration(choice.seconds)}{bound}; "
        f"Young {_duration(young_interval(checkpoint_cost, estimate.mtbf))}"
    )


def _duration(seconds: float) -> str:
    if seconds < 120.0:
        return f"{seconds:.0f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / 60.0:.1f} min"
    return f"{seconds / HOUR:.1f} h"
