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
is W long in every interval), so to first order it changes the expected waste but not the
interval that minimises it (the exact model below keeps its small second-order effect). W does
set a floor: an interval shorter than W would start a new save before the
last one committed, so `choose_interval` never returns less than W.

What M counts. Only endings that lose work: an announced reclaim whose emergency save committed
loses (almost) nothing and is not a failure here, although it ends the attempt. `EndingKind`
names each kind and `loses_work` says which count.

The estimate
------------
Per capacity class, work-losing endings are taken to arrive as a Poisson process with unknown
rate lambda per second of exposure (seconds of training: from the first step after the restore to
the ending). The conjugate prior is Gamma(alpha, beta) (shape, rate): after n endings in T seconds
of exposure the posterior is Gamma(alpha + n, beta + T). The prior reads as "alpha endings seen in
beta seconds". Saved reclaims are counted too (their rate mu lengthens the interval, see below).

The choice
----------
`choose_interval` uses the exact renewal model under exponential endings (the model Daly's formula
approximates), extended with the endings that lose nothing: a saved reclaim restarts the attempt,
and with it the interval clock, for free, so where most reclaims are saved the best interval is
longer than Daly's. It minimises the posterior-expected time per unit of work (details above
`work_rate`), then applies the write-time floor and the user's min/max.

Endings need not arrive at a constant rate (machines reclaimed more often the longer they are
held, or in zone-wide bursts). So the estimate also keeps the last LIFETIMES_KEPT attempts' own
lifetimes, and the choice replays them at each candidate interval, shrunk towards the model above
while they are few (details under "Beyond a constant hazard"). Books without lifetimes (written
before they were kept) choose exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from statistics import NormalDist
from typing import Any

HOUR = 3600.0
_LN2 = math.log(2.0)
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
    # Ended (any way) before training resumed after the restore: there was no work to lose, and
    # no training time to count. Observe it with exposure 0; it changes nothing.
    BEFORE_TRAINING = "before_training"
    # Endings that say nothing about the capacity's reliability. Their exposure still counts: the
    # attempt trained that long without a work-losing ending.
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    USER_ERROR = "user_error"


_WORK_LOSING = frozenset(
    {EndingKind.RECLAIM_UNSAVED, EndingKind.KILLED, EndingKind.CRASHED, EndingKind.NODE_LOST}
)


_KIND_VALUES = frozenset(kind.value for kind in EndingKind)


def loses_work(kind: EndingKind) -> bool:
    """True for endings that throw away the work done since the last committed checkpoint."""
    return kind in _WORK_LOSING


# --- closed forms -------------------------------------------------------------------------------


def young_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Young's first-order optimum tau = sqrt(2 C M), good when C << M.

    J. W. Young, "A first order approximation to the optimum checkpoint interval", Communications
    of the ACM 17(9):530-531, 1974.
    """
    _check_positive(checkpoint_cost=checkpoint_cost, mtbf=mtbf)
    return math.sqrt(2.0 * checkpoint_cost * mtbf)


def daly_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum (compute time between checkpoints, C and restart excluded).

    J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
    Future Generation Computer Systems 22(3):303-312, 2006, doi:10.1016/j.future.2004.11.016:
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
        if not (value > 0.0 and (math.isfinite(value) or name == "half_life_seconds")):
            raise ValueError(f"{name} must be positive and finite (got {value})")


# Forgetting
# ----------
# Capacity changes: a region that reclaimed once a day reclaims every hour when demand comes, and
# calms down again. An estimate built from every ending since the first attempt follows such a
# change ever more slowly (bench/rate_change_sim.py: one reclaim per 30 h, then one per hour
# after 100 h; never forgetting, the adaptive interval kept 94.4 % of the goodput of a policy that
# knows each phase's rate). So each observation is discounted by the exposure that came after
# it: it weighs half after DEFAULT_HALF_LIFE_SECONDS of later training in the same class (the
# attempt's own exposure fades along it too), and the kept lifetimes are weighted alike in the
# replay. Exposure, not wall time, is the clock: a class
# nobody uses keeps what it knew (there is nothing newer to prefer), and the evidence kept is
# always about the last ~1.44 half-lives of training.
# Why 12 h: long enough that in a calm class (a reclaim per 30 h) the estimate rests on its
# prior's floor and the last ending or two rather than on each one alone; short enough that after
# a rate change the old phase weighs less than half within 12 h of training. On rate_change_sim
# (8 replications, C = 300 s, no emergency save, seed 9100) 24 h, 12 h and 8 h kept 96.6 %,
# 97.7 % and 97.9 % of the oracle's goodput (se 0.7-0.9), never forgetting 94.4 %; 12 h is the
# shorter window's gain with less noise in calm classes (figures with more replications in
# bench/README.md).
# The prior fades too (keeping its mean) down to PRIOR_FLOOR_ALPHA of weight, a quarter of the
# Spot prior's: undiminished, its 12 h of pretend exposure would hold a busy class's estimate
# well below the truth once the window is short.
# Memory counted in endings. 12 h holds about one work-losing ending where they come one per
# 10-60 h (a reclaim every 10-30 h with half the emergency saves committing), and the interval
# then follows that ending's noise: on goodput_sim's grid such classes lost up to 6 points of
# goodput against the best fixed interval, never forgetting 1 or less. So the half-life in force
# is DEFAULT_HALF_LIFE_SECONDS (the configured one) or, where longer, the exposure in which the
# class expects MEMORY_ENDINGS work-losing endings at its current estimate (MEMORY_ENDINGS / rate),
# up to MAX_HALF_LIFE_SECONDS: the time scale is "8 endings' worth of training, at least 12 h,
# at most 30 days". A busy class (an ending an hour) still forgets in 12 h; one with an ending per
# 20 h keeps ~160 h, about 11 endings of evidence, and a class with none for days keeps up to 30
# days. Each update fades what came before at the half-life in force then (the kept lifetimes carry
# their own weights, so a later, longer half-life does not revive what already faded). A longer
# memory in a calm class does not slow the response to a rise: the change test below restarts the
# estimate, and the longer calm evidence it is tested against makes the rise clearer. Tuned on
# goodput_sim's grid (seed 32000, 24 replications): 34 points below 98 % of the best fixed
# interval with 12 h alone, 10 with MEMORY_ENDINGS 8, 13-14 with 16 or 32; on rate_change_sim's
# rise (seed 9800, 48 replications) the save-0.5 rows gained about 1 point of the oracle's goodput
# and no row lost. Figures on fresh seeds: bench/README.md, "Issue 27, session 14".
DEFAULT_HALF_LIFE_SECONDS = 12 * HOUR
MEMORY_ENDINGS = 8.0
MAX_HALF_LIFE_SECONDS = 30 * DAY
PRIOR_FLOOR_ALPHA = 0.125
# Changes
# -------
# Forgetting alone follows a 30-fold rise slowly: the old phase's ~17 h of weighted exposure
# outweighs the first few short attempts of the new one. So after each attempt, the last
# CHANGE_WINDOW attempts (each suffix of them) are tested against the evidence before them: when
# the log likelihood ratio of "the suffix has its own rate" to "one rate for all" exceeds
# CHANGE_THRESHOLD_NATS, the estimate restarts from that suffix (and the prior's floor). The
# prior is left out of the test (it is no evidence of a change), and a suffix is only tested
# against at least as much exposure as its own. On rate_change_sim (C = 300 s, no emergency save,
# seed 9400) the rise went from 96.1 % (8 replications) to 97.5 % (16, se 0.55) of the per-phase
# oracle; on goodput_sim's bursty rows (bursts are changes too) it costs a few tenths of a point
# (bench/README.md). math.inf turns it off.
# A fall in the rate must clear CHANGE_DROP_EXTRA_NATS more: the two mistakes cost differently.
# Reading a busy class as calm lengthens the interval, and every attempt until the estimate
# recovers loses up to all its work; reading a calm class as busy costs extra stalls. And the
# evidence for a fall usually rests on one long attempt, a single exponential draw: at 4 nats,
# one attempt lasting about 7 times the mean restarted a busy class's estimate (one attempt in
# ~1,000 where the old rate is read exactly, more often where noise reads it high; in
# rate_change_sim's busy phase the interval then jumped from about 35 min to 3 h for a few
# attempts). At 8 nats it took ~11.4 times the mean (one in ~90,000); with the rise's threshold at
# 8 (below), a fall needs 12: ~15.8 times the mean. A real 30-fold fall still shows at once: an
# attempt that long outweighs the faded evidence before it (forgetting).
# On rate_change_sim the rise rows gained 0.2-0.9 point of the oracle's goodput where this was
# tuned (24 replications, seed 9800, C = 300 and 900 s) and 0.1-0.9 on a fresh seed (96, 12000,
# every row); the mirror (calm after busy) rows moved by -0.3 to +0.4 point, and goodput_sim's
# grid (fresh seed 31000) gained up to 1.3 points and lost at most 0.04 (bench/README.md).
# Why 8 nats for a rise (it was 4). Every ending tests up to CHANGE_WINDOW suffixes, so a steady
# class crosses a low threshold now and then by chance (at 4 nats, a steady class of one reclaim an
# hour restarted, rises and falls together, at about one ending in 65), and a burst (a few quick
# reclaims, then calm again) crosses it nearly every time: two attempts of 6 min where one per 3 h
# is the rule made 4 nats. Each such restart throws away the class's history and leaves the next
# attempts with the burst's short interval, which a long calm attempt pays for in stalls (bursty
# classes at C = 900 s without saves lost 1-3 points of goodput to it, never restarting lost under
# 1). A rise that lasts keeps adding about ln(ratio) - 1 nats per ending, so the higher threshold
# delays it by an attempt or two: a 30-fold rise after calm days restarts after 4 attempts instead
# of 3 (the tests). Measured on goodput_sim's C = 900 s points (tuning seed 41000): 3 of 48
# below 98 % of the best fixed interval instead of 8; on rate_change_sim's rise (seed 12900)
# 98.74 / 98.79 % of the oracle instead of 98.29 / 98.63 % (C = 900 s, no save / half saved:
# false restarts in the busy phase cost more than the later detection); the mirror did not lose
# (bench/README.md, "Issue 27, session 16").
CHANGE_WINDOW = 16
CHANGE_THRESHOLD_NATS = 8.0
CHANGE_DROP_EXTRA_NATS = 4.0
# Lifetimes more variable than exponential ones (young machines reclaimed first, zone-wide bursts)
# make runs of short or long attempts more common than the test's Poisson likelihood expects, and
# each run read as a change restarts the estimate from a few attempts. So the nats are divided by
# the squared coefficient of variation of the kept lifetimes before the window (at least 1; the
# quasi-likelihood correction "Attempts that differ from each other" also uses), computed where
# more than CHANGE_WINDOW + 1 lifetimes are kept. Exponential lifetimes are tested as before. On
# goodput_sim's grid (tuning seed 32000, 24 replications) the weibull0.7 and bursty points at
# M = 1-3 h, C = 900 s gained 0.1-0.7 point and the rise rows of rate_change_sim (seed 9800) did not
# lose (bench/README.md, "Issue 27, session 14").
CHANGE_OVERDISPERSION = True


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
    """What is known about how attempts in one capacity class end, per second of exposure.

    - Work-losing endings: Gamma(alpha, beta) posterior of their rate lambda.
    - Saved reclaims (announced, emergency save committed): their rate mu, estimated as
      `saved_reclaims / beta`, i.e. a Gamma(0 + n, beta) posterior with no prior weight, which
      starts at "never happens": until seen, no credit is taken for them (the safe side, since
      they can only lengthen the interval).
    `endings`, `saved_reclaims` and `exposure_seconds` are what was observed on top of the prior.
    `lifetimes` keeps the most recent attempts themselves (seconds of training, how each ended; at
    most LIFETIMES_KEPT): the shape of the lifetime distribution, which the rates alone cannot
    show (see "Beyond a constant hazard" below).
    """

    alpha: float
    beta: float  # seconds
    endings: int = 0
    exposure_seconds: float = 0.0
    saved_reclaims: int = 0
    lifetimes: tuple[tuple[float, EndingKind], ...] = ()
    # How fast old evidence fades (see "Forgetting" above): the seconds of later exposure after
    # which an observation weighs half, at least (`memory_half_life` is the one in force).
    # math.inf: never (the estimate before it forgot).
    half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS
    # The evidence as it weighs now (discounted): what alpha and beta hold on top of the prior.
    # None: undiscounted, the raw counts (books written before forgetting, and fresh priors).
    weighted_endings: float | None = None
    weighted_exposure: float | None = None
    weighted_saved: float | None = None
    # Each kept lifetime's weight now (the product of the fades since it ended), one per lifetime;
    # empty in books written before the half-life could change (then derived from the half-life).
    lifetime_fades: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _check_positive(alpha=self.alpha, beta=self.beta, half_life_seconds=self.half_life_seconds)
        if self.endings < 0 or self.exposure_seconds < 0.0 or self.saved_reclaims < 0:
            raise ValueError("observations cannot be negative")
        # A chained comparison (false for NaN and infinity): checked on every update, so kept cheap.
        if any(not (0.0 <= seconds < math.inf) for seconds, _ in self.lifetimes):
            raise ValueError("lifetimes must be finite and non-negative")

    @property
    def mean_rate(self) -> float:
        """Posterior mean of lambda (work-losing endings per second)."""
        return self.alpha / self.beta

    @property
    def saved_rate(self) -> float:
        """Posterior mean of mu (saved reclaims per second)."""
        return self.recent_saved / self.beta

    @property
    def recent_endings(self) -> float:
        """Work-losing endings as they weigh now (discounted by their age)."""
        return float(self.endings) if self.weighted_endings is None else self.weighted_endings

    @property
    def recent_exposure(self) -> float:
        """Seconds of exposure as they weigh now."""
        return self.exposure_seconds if self.weighted_exposure is None else self.weighted_exposure

    @property
    def recent_saved(self) -> float:
        """Saved reclaims as they weigh now."""
        return float(self.saved_reclaims) if self.weighted_saved is None else self.weighted_saved

    @property
    def memory_half_life(self) -> float:
        """The half-life in use now: half_life_seconds, or longer where MEMORY_ENDINGS work-losing
        endings take longer than that at the current rate (see "Forgetting")."""
        if math.isinf(self.half_life_seconds):
            return self.half_life_seconds
        return min(
            max(self.half_life_seconds, MEMORY_ENDINGS * self.beta / self.alpha), MAX_HALF_LIFE_SECONDS
        )

    def lifetime_weights(self) -> list[float]:
        """The weight of each kept lifetime now: halved per half-life of exposure that came after it."""
        if len(self.lifetime_fades) == len(self.lifetimes):
            return list(self.lifetime_fades)
        weights = [1.0] * len(self.lifetimes)
        half_life = self.memory_half_life
        if math.isinf(half_life):
            return weights
        later = 0.0
        for i in range(len(self.lifetimes) - 1, -1, -1):
            weights[i] = 0.5 ** (later / half_life)
            later += self.lifetimes[i][0]
        return weights

    @property
    def mtbf(self) -> float:
        """1 / posterior mean rate: the mean time between work-losing endings the estimate implies."""
        return self.beta / self.alpha

    def update(
        self, work_losing_endings: int, exposure_seconds: float, saved_reclaims: int = 0
    ) -> RateEstimate:
        """Conjugate update: n endings in T seconds turn Gamma(a, b) into Gamma(a + n, b + T)."""
        if (
            work_losing_endings < 0
            or saved_reclaims < 0
            or not (exposure_seconds >= 0.0 and math.isfinite(exposure_seconds))
        ):
            raise ValueError(
                "need endings >= 0 and finite exposure >= 0 "
                f"(got {work_losing_endings}, {saved_reclaims}, {exposure_seconds})"
            )
        return self._updated(
            work_losing_endings, exposure_seconds, saved_reclaims, self.lifetimes, spread=True, added=0
        )

    def _updated(
        self,
        work_losing_endings: int,
        exposure_seconds: float,
        saved_reclaims: int,
        lifetimes: tuple[tuple[float, EndingKind], ...],
        spread: bool = False,
        added: int = 1,
    ) -> RateEstimate:
        """`spread`: the endings came evenly over the exposure (a batch), not all at its end."""
        # What was seen before weighs less by the exposure that came after it. So does the prior
        # (what is left of alpha and beta once the evidence is taken off), keeping its mean, down
        # to PRIOR_FLOOR_ALPHA of weight: it must not anchor a class whose rate moved far from it,
        # nor vanish (a long calm spell would then read as "never reclaimed").
        half_life = self.memory_half_life
        fade = 0.5 ** (exposure_seconds / half_life)
        endings, exposure, saved = self.recent_endings, self.recent_exposure, self.recent_saved
        # A batch's endings fade as its exposure does (`fresh` below over the seconds).
        share = 1.0
        # The attempt's own exposure fades along it: its early hours are as old as they are.
        fresh = (
            exposure_seconds
            if math.isinf(half_life)
            else -math.expm1(-exposure_seconds * _LN2 / half_life) * half_life / _LN2
        )
        new_exposure = fade * exposure + fresh
        if spread and exposure_seconds > 0.0:
            share = fresh / exposure_seconds
        new_endings = fade * endings + work_losing_endings * share
        # max(): the subtraction may leave a hair below the prior's value by rounding.
        prior_alpha, prior_beta = max(self.alpha - endings, 1e-12), max(self.beta - exposure, 1e-9)
        keep = max(fade, min(1.0, PRIOR_FLOOR_ALPHA / prior_alpha))
        # The kept lifetimes fade alike; the one just added (if any) weighs 1.
        faded = [weight * fade for weight in self.lifetime_weights()] + [1.0] * added
        return RateEstimate(
            alpha=keep * prior_alpha + new_endings,
            beta=keep * prior_beta + new_exposure,
            endings=self.endings + work_losing_endings,
            exposure_seconds=self.exposure_seconds + exposure_seconds,
            saved_reclaims=self.saved_reclaims + saved_reclaims,
            lifetimes=lifetimes,
            half_life_seconds=self.half_life_seconds,
            weighted_endings=new_endings,
            weighted_exposure=new_exposure,
            weighted_saved=fade * saved + saved_reclaims * share,
            lifetime_fades=tuple(faded[len(faded) - len(lifetimes) :]) if lifetimes else (),
        )

    def observe(self, kind: EndingKind, exposure_seconds: float) -> RateEstimate:
        """Fold in one attempt: how it ended and how long it trained.

        Exposure is training time: from the first step after the restore to the ending. The model
        behind `choose_interval` counts rates per second of training, and charges the restart
        separately (an ending during start-up or restore loses no work whatever the interval).
        """
        lost, saved = (1 if loses_work(kind) else 0), (1 if kind is EndingKind.RECLAIM_SAVED else 0)
        if kind is EndingKind.BEFORE_TRAINING:
            # No training, nothing to learn about how long training lasts.
            return self.update(lost, exposure_seconds, saved_reclaims=saved)
        if not (exposure_seconds >= 0.0 and math.isfinite(exposure_seconds)):
            raise ValueError(f"need finite exposure >= 0 (got {exposure_seconds})")
        kept = (*self.lifetimes, (float(exposure_seconds), kind))[-LIFETIMES_KEPT:]
        # Built once, lifetimes included (observing is on the controller's path for every ending).
        updated = self._updated(lost, exposure_seconds, saved, kept)
        return updated._after_change() if CHANGE_THRESHOLD_NATS < math.inf else updated

    def _after_change(self) -> RateEstimate:
        """The estimate from the last few attempts alone when they say the rate moved (see
        "Changes" below); else itself."""
        if math.isinf(self.half_life_seconds) or self.weighted_exposure is None:
            return self
        endings = exposure = 0.0
        best, split = CHANGE_THRESHOLD_NATS, 0
        dispersion = 1.0
        if CHANGE_OVERDISPERSION and len(self.lifetimes) > CHANGE_WINDOW + 1:
            dispersion = lifetime_dispersion(
                self.lifetimes[:-CHANGE_WINDOW], self.lifetime_weights()[:-CHANGE_WINDOW]
            )
        for m in range(1, min(CHANGE_WINDOW, len(self.lifetimes)) + 1):
            seconds, kind = self.lifetimes[-m]
            endings += 1.0 if loses_work(kind) else 0.0
            exposure += seconds
            # Before the segment: the weighted evidence less the segment (the prior left out: it
            # is no evidence of a change), at least as much exposure as the segment's.
            before_endings = self.recent_endings - endings
            before_exposure = self.recent_exposure - exposure
            if before_exposure < exposure or exposure <= 0.0:
                break
            # Half an ending of slack: an old stretch with none is not a rate of zero.
            rate, recent = (max(before_endings, 0.0) + 0.5) / before_exposure, endings / exposure
            nats = (endings * math.log(recent / rate) if endings else 0.0) - (recent - rate) * exposure
            nats /= dispersion
            if recent < rate:  # a fall: see CHANGE_DROP_EXTRA_NATS
                nats -= CHANGE_DROP_EXTRA_NATS
            if nats > best:
                best, split = nats, m
        if not split:
            return self
        segment = self.lifetimes[-split:]
        endings = sum(1.0 for _, kind in segment if loses_work(kind))
        saved = sum(1.0 for _, kind in segment if kind is EndingKind.RECLAIM_SAVED)
        exposure = sum(seconds for seconds, _ in segment)
        prior_alpha = max(self.alpha - self.recent_endings, 1e-12)
        prior_beta = max(self.beta - self.recent_exposure, 1e-9)
        keep = min(1.0, PRIOR_FLOOR_ALPHA / prior_alpha)
        return replace(
            self,
            alpha=keep * prior_alpha + endings,
            beta=keep * prior_beta + exposure,
            lifetimes=segment,
            lifetime_fades=tuple(self.lifetime_weights()[-split:]),
            weighted_endings=endings,
            weighted_exposure=exposure,
            weighted_saved=saved,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "endings": self.endings,
            "exposure_seconds": self.exposure_seconds,
            "saved_reclaims": self.saved_reclaims,
            "lifetimes": [[seconds, kind.value] for seconds, kind in self.lifetimes],
            # Their weights now (see `lifetime_fades`), apart: a version before them reads the book.
            "lifetime_weights": self.lifetime_weights(),
            # JSON has no infinity: null is "never forgets".
            "half_life_seconds": self.half_life_seconds if math.isfinite(self.half_life_seconds) else None,
            **(
                {"weighted": [self.recent_endings, self.recent_exposure, self.recent_saved]}
                if self.weighted_exposure is not None
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateEstimate:
        weighted = data.get("weighted")
        rows = data.get("lifetimes", [])
        known = [kind in _KIND_VALUES for _, kind in rows]
        weights = data.get("lifetime_weights", [])
        if len(weights) == len(rows):
            weights = [weight for weight, ok in zip(weights, known) if ok]
        # A book written before estimates forgot starts forgetting now, from its counts as they are.
        half_life = data.get("half_life_seconds", DEFAULT_HALF_LIFE_SECONDS)
        return cls(
            half_life_seconds=math.inf if half_life is None else float(half_life),
            weighted_endings=float(weighted[0]) if weighted else None,
            weighted_exposure=float(weighted[1]) if weighted else None,
            weighted_saved=float(weighted[2]) if weighted else None,
            alpha=float(data["alpha"]),
            beta=float(data["beta"]),
            endings=int(data.get("endings", 0)),
            exposure_seconds=float(data.get("exposure_seconds", 0.0)),
            saved_reclaims=int(data.get("saved_reclaims", 0)),
            # Books written before lifetimes were kept have none: the choice is then the
            # constant-hazard one, as it was.
            # A kind this version does not know (written by a newer one) is left out.
            lifetimes=tuple(
                (float(seconds), EndingKind(kind)) for (seconds, kind), ok in zip(rows, known) if ok
            ),
            # Books written before the lifetimes carried weights: derived from the half-life.
            lifetime_fades=tuple(float(w) for w in weights) if len(weights) == sum(known) else (),
        )


# Priors: Gamma(1/2, M0/2): mean rate 1/M0, weight half a work-losing ending, i.e. a vague prior
# that a single real ending, or a few M0 of training without one, outweighs.
#
# Why optimistic rather than pessimistic. A new capacity class's first attempt runs at the prior's
# interval until it ends, and the costs of the two kinds of error are far apart:
#   - prior too pessimistic (interval too short): the extra stalls are paid for the whole first
#     attempt, and when work-losing endings are rare that attempt is long (tens of hours);
#   - prior too optimistic (interval too long): the loss is bounded by the work since the start of
#     the attempt, and only until the first work-losing ending, which then moves the estimate at
#     once (the prior weighs half an ending).
# In bench/goodput_sim.py a pessimistic Gamma(1, 4 h) cost up to 4 % of goodput where work-losing
# endings are rare (30 h between reclaims, 90 % of emergency saves committed, C = 900 s), while
# Gamma(1/2, M0 = 24 h) costs at most about 0.6 % where they are frequent (1 h, C = 900 s).
# Spot: M0 = 24 h of training between work-losing endings, optimistic on purpose (a reclaim every
# few hours with most emergency saves committing gives about this; whether they commit within
# Vertex's grace is unknown, and the data settle it after the first few endings). Standard and Flex-start capacity is not reclaimed; what remains
# is crashes, node loss and host events: M0 = 7 days.
SPOT_PRIOR = RateEstimate(alpha=0.5, beta=0.5 * DAY)
NON_PREEMPTIBLE_PRIOR = RateEstimate(alpha=0.5, beta=3.5 * DAY)


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
# The model. Within an attempt, training alternates tau seconds of work with a C-second stall;
# the checkpoint taken at a stall commits W seconds after it. The attempt ends at rate
# nu = lambda + mu: at rate lambda with a work-losing ending (back to the newest committed
# checkpoint), at rate mu with a reclaim whose emergency save commits (nothing lost). Either way the
# next attempt starts from a committed state, so attempts are independent renewals, and each one
# costs R seconds of restart (and a stockout wait, which does not depend on tau and is left out).
# With L ~ Exp(nu) the attempt's working time and a = tau + C, the work an attempt keeps is
#     saved ending:       L minus the stalls inside [0, L];     E = (1/nu) (1 - e^-(nu tau)) / (1 - e^-(nu a))
#     work-losing ending: tau per checkpoint committed by L;    E = tau e^-(nu (a + W)) / (1 - e^-(nu a))
# (sums of geometric series over the stalls), so the work kept per second on the machines is
#     rate(tau) = [ (mu/nu) (1 - e^-(nu tau)) + lambda tau e^-(nu (a + W)) ] / ((1 - e^-(nu a)) (1 + nu R)).
# With mu = 0 this is exactly the renewal model behind Daly's formula (its optimum is Daly's tau to
# higher order). With mu > 0 the optimum is longer than Daly's for lambda alone: an attempt that
# ends with a saved reclaim restarts the clock for free, so fewer periodic checkpoints pay off
# (bench/goodput_sim.py shows Daly's tau losing up to ~2 % there).
#
# Uncertainty. What a job cares about is its completion time, i.e. the time per second of work,
# 1 / rate. We minimise its posterior expectation: 1 / rate is averaged over lambda's Gamma
# posterior on QUADRATURE_NODES equal-probability quantiles (Wilson-Hilferty approximation of the
# Gamma quantile: good for shape >= 1, rough below, i.e. for the prior alone); mu is taken at its posterior
# mean. Rates higher than believed cost more than lower ones save, so while the posterior is wide
# the choice leans towards intervals that stay good if the rate turns out high; once it is
# narrow this is the plug-in optimum. In the goodput simulator this and the plug-in choice at the
# posterior-mean rate (nodes=1) are within noise of each other (a few hundredths of a percent of
# goodput); the prior mattered far more (see the priors above).

QUADRATURE_NODES = 5


def work_rate(
    tau: float,
    checkpoint_cost: float,
    lost_rate: float,
    saved_rate: float,
    *,
    restart_cost: float = 0.0,
    write_seconds: float = 0.0,
) -> float:
    """Expected seconds of work kept per second on the machines (the model above)."""
    nu = lost_rate + saved_rate
    a = tau + checkpoint_cost
    if nu <= 0.0:
        return tau / a
    denominator = -math.expm1(-nu * a) * (1.0 + nu * restart_cost)
    saved = (saved_rate / nu) * -math.expm1(-nu * tau)
    lost = lost_rate * tau * math.exp(-nu * (a + write_seconds))
    return (saved + lost) / denominator


def _gamma_quantiles(alpha: float, beta: float, nodes: int) -> list[float]:
    normal = NormalDist()
    out = []
    for i in range(nodes):
        z = normal.inv_cdf((i + 0.5) / nodes)
        cube = 1.0 - 1.0 / (9.0 * alpha) + z / (3.0 * math.sqrt(alpha))
        out.append(alpha * max(cube, 0.0) ** 3 / beta)
    return out


def _expected_time_per_work(
    tau: float, cost: float, lost_rates: list[float], saved_rate: float, restart: float, write: float
) -> float:
    """Posterior-expected seconds on the machines per second of work kept (1 / work_rate, averaged)."""
    return _RateTerms([(lam, saved_rate) for lam in lost_rates], restart).time_per_work(tau, cost, write)


class _RateTerms:
    """`work_rate` at fixed rates for many candidate intervals: what does not depend on tau, once.

    The arithmetic is `work_rate`'s, term by term and in the same order, so that the results are
    bitwise the same; a search evaluates these hundreds of times per choice.
    """

    def __init__(self, rates: list[tuple[float, float]], restart: float) -> None:
        """`rates`: (lambda, mu) pairs, work-losing and saved endings per second."""
        self.count = len(rates)
        # (lambda, nu, mu / nu, 1 + nu R) per pair; nu <= 0 marks "never ends".
        self.terms = []
        for lam, mu in rates:
            nu = lam + mu
            if nu <= 0.0:
                self.terms.append((lam, nu, 0.0, 0.0))
            else:
                self.terms.append((lam, nu, mu / nu, 1.0 + nu * restart))
        self.all_end = all(nu > 0.0 for _, nu, _, _ in self.terms)

    def rates(self, tau: float, cost: float, write: float) -> list[float]:
        a = tau + cost
        expm1, exp = math.expm1, math.exp
        if self.all_end:  # the usual case, as one comprehension
            return [
                (saved_share * -expm1(-nu * tau) + lam * tau * exp(-nu * (a + write)))
                / (-expm1(-nu * a) * restart_factor)
                for lam, nu, saved_share, restart_factor in self.terms
            ]
        out = []
        for lam, nu, saved_share, restart_factor in self.terms:
            if nu <= 0.0:
                out.append(tau / a)
                continue
            denominator = -expm1(-nu * a) * restart_factor
            saved = saved_share * -expm1(-nu * tau)
            lost = lam * tau * exp(-nu * (a + write))
            out.append((saved + lost) / denominator)
        return out

    def time_per_work(self, tau: float, cost: float, write: float) -> float:
        total = 0.0
        for rate in self.rates(tau, cost, write):
            # max(rate, 1e-300), NaN included, without the call.
            total += 1.0 / (1e-300 if 1e-300 > rate else rate)
        return total / self.count


_SEARCH_LOW, _SEARCH_HIGH = 1.0, 30 * DAY


def best_interval(
    estimate: RateEstimate,
    checkpoint_cost: float,
    *,
    restart_cost: float = 0.0,
    write_seconds: float = 0.0,
    nodes: int = QUADRATURE_NODES,
) -> float:
    """The interval (seconds of work) that keeps the most work per second on the machines, unclamped.

    With no lifetimes kept, the constant-hazard model's choice (minimising the posterior-expected
    time per unit of work); with some, that model's goodput curve blended with the replay of the
    kept lifetimes (see "Beyond a constant hazard"). `nodes=1` uses the posterior-mean rate alone
    in the model. Searched between 1 s and 30 days.
    """
    _check_positive(checkpoint_cost=checkpoint_cost)
    if restart_cost < 0.0 or write_seconds < 0.0:
        raise ValueError("restart_cost and write_seconds cannot be negative")
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    lost_rates = (
        [estimate.mean_rate] if nodes == 1 else _gamma_quantiles(estimate.alpha, estimate.beta, nodes)
    )
    model_tau = _constant_hazard_interval(estimate, checkpoint_cost, lost_rates, restart_cost, write_seconds)
    if not estimate.lifetimes:
        return model_tau
    return _blended_interval(
        estimate, checkpoint_cost, _rate_multipliers(estimate, nodes), restart_cost, write_seconds, model_tau
    )


def _constant_hazard_interval(
    estimate: RateEstimate,
    checkpoint_cost: float,
    lost_rates: list[float],
    restart_cost: float,
    write_seconds: float,
) -> float:
    saved_rate = estimate.saved_rate
    posterior = _RateTerms([(lam, saved_rate) for lam in lost_rates], restart_cost)
    at_mean = _RateTerms([(estimate.mean_rate, saved_rate)], restart_cost)

    def objective(log_tau: float, terms: _RateTerms = posterior) -> float:
        # Maximised, hence the sign: the expected time to get one second of work done.
        return -terms.time_per_work(math.exp(log_tau), checkpoint_cost, write_seconds)

    # Coarse scan with the posterior-mean rate (cheap), then golden-section refinement of the full
    # objective within two grid steps either side: averaging over the posterior moves the optimum
    # by far less than that (a factor of about 1.4 at the widest posterior).
    low, high = math.log(_SEARCH_LOW), math.log(_SEARCH_HIGH)
    steps = 12  # a factor of about 3.4 between grid points
    grid = [low + (high - low) * i / steps for i in range(steps + 1)]
    values = [objective(x, at_mean) for x in grid]
    best = max(range(len(grid)), key=lambda i: values[i])
    return math.exp(_golden_max(objective, grid[max(best - 2, 0)], grid[min(best + 2, steps)]))


def _golden_max(
    objective: Callable[[float], float], left: float, right: float, tolerance: float = 2e-3
) -> float:
    """Golden-section search for the maximum of `objective` (of log tau) between left and right.

    The default tolerance, 0.2 % of tau, is far below what changes goodput.
    """
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = right - ratio * (right - left), left + ratio * (right - left)
    f1, f2 = objective(x1), objective(x2)
    while right - left > tolerance:
        if f1 < f2:
            left, x1, f1 = x1, x2, f2
            x2 = left + ratio * (right - left)
            f2 = objective(x2)
        else:
            right, x2, f2 = x2, x1, f1
            x1 = right - ratio * (right - left)
            f1 = objective(x1)
    return 0.5 * (left + right)


# Beyond a constant hazard
# ------------------------
# Reclaims need not arrive at a constant rate: machines may be reclaimed more often the longer
# they are held (an increasing hazard: the best interval is shorter than the constant-hazard
# model says, since late, more exposed work is what gets lost), less often (young attempts die
# first: longer), or in zone-wide bursts (many short attempts, then long calm ones: longer too,
# since the calm attempts hold nearly all the training time). The rates cannot show any of this;
# the lifetimes of the attempts can. So the estimate keeps the last LIFETIMES_KEPT of them, and
# the choice replays them: for a candidate tau, the work each kept attempt would have kept (all of
# it for a saved reclaim or a success, the committed checkpoints for a work-losing ending, exactly
# as in the model above) over the time it held the machines (R + its training time). That is the
# goodput the empirical lifetime distribution implies, and it assumes nothing about its shape.
#
# A handful of lifetimes make a noisy curve, so it is shrunk towards the constant-hazard model's:
#     goodput(tau) = (n0 g_model(tau) + n g_replay(tau)) / (n0 + n)
# with n the work-losing endings among the lifetimes kept (each with its weight), g_model =
# 1 / (posterior-expected time per unit of work) of the model above and n0 = MODEL_WEIGHT_ENDINGS:
# the model counts as n0 work-losing endings. Endings, not attempts: the replay's shape, and its
# noise, is in the lost lifetimes (where the interval decides what is kept); a saved reclaim or a
# success keeps its work whatever the interval, and adds only the stalls. Counted in attempts, a
# class where half the emergency saves commit (M = 1 h) gave the replay of ~11 lost lifetimes
# three quarters of the weight, and its interval followed their noise (goodput_sim, C = 900 s,
# tuning seed 41000: poisson and weibull0.7 98.1-98.2 % of the best fixed interval, bursty 97.1 %,
# the rates alone 98.4-99.0 %). Where every ending loses work (no saves) the two counts are the
# same. With no lifetimes this is the constant-hazard choice exactly (books written before
# lifetimes were kept behave as before); after many, the replay dominates and the choice tends to the best fixed interval for the
# observed distribution. Keeping only the most recent attempts lets the estimate follow a class
# whose behaviour drifts, and bounds the book's size. The optimum is searched within a factor
# REPLAY_SEARCH_FACTOR either side of the model's (a scan in steps of 2^(1/3), then golden
# section), wider than shape effects move it in bench/goodput_sim.py (a factor of about 1.5).
# Each lost lifetime is spread uniformly over +-REPLAY_BANDWIDTH of itself (a kernel estimate of
# the lifetime distribution): the committed checkpoints jump at multiples of the cycle, and
# without the spread the best step of the replayed staircase is mostly noise (with simulated
# weibull1.5 lifetimes, M = 1 h, C = 900 s, 128 raw ones picked intervals up to 40 % too long, losing
# about 2 % of goodput). n0 = 8 (then in attempts), 128 kept and +-25 % were chosen on such runs
# and the simulator: a larger n0 slows learning a shape from few attempts, a smaller one or no
# spread lets noise through. n0 = 16 endings cost weibull1.5 (M = 1 h, C = 900 s, no saves) about 0.8 point
# of goodput against 8 (bench/README.md, "Issue 27, session 15").
# The replay keeps each ending's kind with its own lifetime, so it needs no assumption on whether
# work-losing endings come early or late in an attempt.

LIFETIMES_KEPT = 128
MODEL_WEIGHT_ENDINGS = 8.0
REPLAY_SEARCH_FACTOR = 3.2
REPLAY_BANDWIDTH = 0.25


def replay_rate(
    tau: float,
    checkpoint_cost: float,
    lifetimes: tuple[tuple[float, EndingKind], ...],
    *,
    restart_cost: float = 0.0,
    write_seconds: float = 0.0,
    weights: list[float] | None = None,
) -> float:
    """Work kept per second on the machines had the kept attempts checkpointed every `tau` seconds
    (each attempt counted with its weight: its age's discount; all 1 when None)."""
    return _Replay(lifetimes, restart_cost, write_seconds, weights).rate(tau, checkpoint_cost)


class _Replay:
    """The kept lifetimes, arranged once for the many candidate intervals a search replays them at."""

    def __init__(
        self,
        lifetimes: tuple[tuple[float, EndingKind], ...],
        restart_cost: float,
        write_seconds: float,
        weights: list[float] | None = None,
    ) -> None:
        weights = [1.0] * len(lifetimes) if weights is None else weights
        self.held = sum(w * (restart_cost + seconds) for (seconds, _), w in zip(lifetimes, weights))
        # A work-losing ending keeps the checkpoints whose stall ended W before it. Each lifetime
        # stands for those within REPLAY_BANDWIDTH of it (uniformly): the checkpoints committed
        # jump by one at each multiple of the cycle, and without this spread the replayed curve is
        # a staircase whose highest step, with a few dozen lifetimes, is mostly noise.
        # Kept as (high, low, high - low), with what does not depend on the interval done once: a
        # span with high <= 0 or high <= low (a lifetime so short that its spread underflows)
        # commits nothing and is left out; a low <= 0 takes nothing off (floor(0) = 0, so such a
        # low is stored as 0.0, whose term is exactly 0.0).
        # The weight is folded into the width (a span of width/w counts w times as much).
        self.lost_spans = []
        for (seconds, kind), weight in zip(lifetimes, weights):
            if kind in _WORK_LOSING and seconds > 0.0 and weight > 0.0:
                low = seconds * (1.0 - REPLAY_BANDWIDTH) - write_seconds
                high = seconds * (1.0 + REPLAY_BANDWIDTH) - write_seconds
                if high > 0.0 and high > low:
                    self.lost_spans.append((high, low if low > 0.0 else 0.0, (high - low) / weight))
        # Everything else keeps all its work but the stalls: continuous in the lifetime, no spread.
        self.kept_all = [
            (seconds, weight)
            for (seconds, kind), weight in zip(lifetimes, weights)
            if kind not in _WORK_LOSING
        ]

    def rate(self, tau: float, checkpoint_cost: float) -> float:
        if self.held <= 0.0:
            return 0.0
        cycle = tau + checkpoint_cost
        floor = math.floor
        committed = 0.0
        # A bound below which t / cycle < 1 whatever the rounding: floor(t / cycle) = 0 there, so
        # such a bound's term is exactly 0.0 and is skipped (a span entirely below it commits
        # nothing, and adding or subtracting 0.0 changes no sum).
        below_one = cycle * 0.999999
        for high, low, width in self.lost_spans:
            # The mean of floor(t / cycle) over t in [low, high], from the integral of floor: inlined,
            # this loop is most of the choice's cost.
            if high < below_one:
                continue
            y = high / cycle
            m = floor(y)
            upper = m * y - 0.5 * m * (m + 1.0)
            if low >= below_one:
                y = low / cycle
                m = floor(y)
                upper -= m * y - 0.5 * m * (m + 1.0)
            committed += upper * cycle / width
        kept = tau * committed
        for seconds, weight in self.kept_all:
            full = floor(seconds / cycle)
            rest = seconds - full * cycle
            kept += weight * (full * tau + (rest if rest < tau else tau))
        return kept / self.held


def _blended_interval(
    estimate: RateEstimate,
    checkpoint_cost: float,
    multipliers: list[float] | None,
    restart_cost: float,
    write_seconds: float,
    model_tau: float,
) -> float:
    weights = estimate.lifetime_weights()
    # The work-losing endings kept, old ones counting for less (as in the rates).
    n = math.fsum(w for (_, kind), w in zip(estimate.lifetimes, weights) if kind in _WORK_LOSING)
    model_share = MODEL_WEIGHT_ENDINGS / (MODEL_WEIGHT_ENDINGS + n)
    replay = _Replay(estimate.lifetimes, restart_cost, write_seconds, weights)
    lost_rate, saved_rate = estimate.mean_rate, estimate.saved_rate
    if multipliers is None:
        plain_rates = _gamma_quantiles(estimate.alpha, estimate.beta, QUADRATURE_NODES)
        posterior = _RateTerms([(lam, saved_rate) for lam in plain_rates], restart_cost)

        def model(tau: float) -> float:
            return 1.0 / posterior.time_per_work(tau, checkpoint_cost, write_seconds)

    else:
        mixture = _Mixture(lost_rate, saved_rate, multipliers, restart_cost)

        def model(tau: float) -> float:
            return mixture.work_rate(tau, checkpoint_cost, write_seconds)

    def objective(log_tau: float) -> float:
        tau = math.exp(log_tau)
        return model_share * model(tau) + (1.0 - model_share) * replay.rate(tau, checkpoint_cost)

    # The replayed curve, although smoothed, can have local bumps, so a plain golden section could
    # stop on one: scan in steps of 2^(1/3) (26 %) first, then refine around the best.
    centre, span = math.log(model_tau), math.log(REPLAY_SEARCH_FACTOR)
    step = math.log(2.0) / 3.0
    count = int(round(span / step))
    grid = [centre + step * i for i in range(-count, count + 1)]
    values = [objective(x) for x in grid]
    best = max(range(len(grid)), key=lambda i: values[i])
    low, high = math.log(_SEARCH_LOW), math.log(_SEARCH_HIGH)
    left, right = max(grid[max(best - 1, 0)], low), min(grid[min(best + 1, len(grid) - 1)], high)
    return math.exp(_golden_max(objective, left, right, tolerance=1e-2))


# Attempts that differ from each other
# --------------------------------
# The model above takes every attempt to end at the same (unknown) rate. Where attempts differ
# (zone-wide bursts: runs of short attempts, then long calm ones), that is wrong in a way that
# matters: the long attempts hold nearly all the training time, so they, not the typical attempt,
# should set the interval; and after a run of short attempts the rates (and their replay) say
# "short" just before a long attempt inherits that short interval (bench/goodput_sim.py, bursty,
# M = 30 h, C = 900 s: 97.1 % of the best fixed interval, the one point below 98 %).
# So, once lifetimes are kept and a work-losing ending has been seen, the model part of the blend
# treats the posterior as the spread of rates *across attempts* (on HETEROGENEITY_NODES
# equal-probability quantiles: the slow tail, which holds the long attempts, needs more than the
# QUADRATURE_NODES above):
#   - each attempt ends at rate m * (lambda, mu), with m drawn from the posterior's shape (the
#     split between work-losing and saved endings does not depend on how long an attempt lasts:
#     whether the emergency save commits is not a matter of the attempt's age);
#   - its goodput is the ratio of the expectations of work kept and time held over m (a renewal-
#     reward ratio: long attempts weigh by their length), not the expectation of the ratio;
#   - the posterior's shape is widened by the overdispersion of the kept lifetimes: with squared
#     coefficient of variation v > 1 (1 for exponential lifetimes), the observations count as
#     1 / v of themselves (a quasi-likelihood correction), so that lifetimes more variable than
#     exponential ones make the spread of rates wider.
# The posterior's width is what is not known about the rate, not a spread across attempts: taken
# as one, it lengthens the interval (the time-weighting favours the slow attempts) where every
# attempt ends at the same rate. With ~17 weighted endings (M = 1 h, the 12 h memory) that cost
# 1-2 points of goodput (goodput_sim, poisson M = 1 h, C = 900 s, no saves: 97.4 % of the best
# fixed interval, the rates alone 98.8 %, tuning seed 41000; the busy phase of rate_change_sim's
# rise alike). So the spread across attempts is at most what the kept lifetimes' overdispersion
# says: where v > 1, a Gamma spread of shape no less than 2v / (v - 1) (rates Gamma-distributed
# across attempts with shape a make exponential lifetimes' squared coefficient of variation
# a / (a - 2)); where v <= 1, none (the rates' posterior then stands alone, as in the
# constant-hazard choice) once the lifetimes hold HETEROGENEITY_MIN_ENDINGS work-losing endings
# (weighted). With fewer, the posterior's spread stays: there it hedges calm classes, whose few
# endings say little (without the threshold, goodput_sim's M = 30 h points lost up to 1 point).
# Exponential lifetimes with few endings behave as before; the prior alone, and books without
# lifetimes, too.

HETEROGENEITY_NODES = 15
HETEROGENEITY_MIN_ENDINGS = 8.0


def lifetime_dispersion(
    lifetimes: tuple[tuple[float, EndingKind], ...], weights: list[float] | None = None
) -> float:
    """Squared coefficient of variation of the kept lifetimes (1 for exponential ones), at least 1,
    each counted with its weight (all 1 when None)."""
    seconds = [s for s, _ in lifetimes]
    if len(seconds) < 2:
        return 1.0
    weights = [1.0] * len(seconds) if weights is None else weights
    total = math.fsum(weights)
    # Unbiased for weighted samples: divided by the effective count less one.
    effective = total * total / math.fsum(w * w for w in weights)
    if effective <= 1.0 + 1e-9:
        return 1.0
    mean = math.fsum(w * s for s, w in zip(seconds, weights)) / total
    if not (mean > 0.0 and math.isfinite(mean)):
        return 1.0
    # In units of the mean, so that neither tiny nor huge lifetimes underflow or overflow.
    spread = math.fsum(w * (s / mean - 1.0) ** 2 for s, w in zip(seconds, weights)) / total
    relative = spread * effective / (effective - 1.0)
    return max(1.0, relative) if math.isfinite(relative) else 1.0


def _rate_multipliers(estimate: RateEstimate, nodes: int) -> list[float] | None:
    """Equal-probability rate multipliers across attempts (mean about 1), or None where not used."""
    if nodes == 1 or estimate.endings < 1 or not estimate.lifetimes:
        return None
    dispersion = lifetime_dispersion(estimate.lifetimes, estimate.lifetime_weights())
    if dispersion <= 1.0 and estimate.recent_endings >= HETEROGENEITY_MIN_ENDINGS:
        return None  # as regular as exponential lifetimes, and enough of them to tell
    weight = 1.0 / dispersion
    prior_alpha = estimate.alpha - estimate.recent_endings
    prior_beta = estimate.beta - estimate.recent_exposure
    alpha = prior_alpha + weight * estimate.recent_endings
    beta = prior_beta + weight * estimate.recent_exposure
    if not (alpha > 0.0 and beta > 0.0):  # a book whose counts exceed its posterior (hand-edited)
        return None
    # Multipliers of mean about 1: Gamma(shape, shape), no wider than the overdispersion says.
    shape = max(alpha, 2.0 * dispersion / (dispersion - 1.0)) if dispersion > 1.0 else alpha
    return _gamma_quantiles(shape, shape, max(nodes, HETEROGENEITY_NODES))


def _mixture_work_rate(
    tau: float,
    cost: float,
    lost_rate: float,
    saved_rate: float,
    multipliers: list[float],
    restart: float,
    write: float,
) -> float:
    """Work kept per second held when each attempt's rates are (lambda, mu) times a random m."""
    return _Mixture(lost_rate, saved_rate, multipliers, restart).work_rate(tau, cost, write)


class _Mixture:
    """`_mixture_work_rate` for many candidate intervals: the per-attempt rates and lengths once."""

    def __init__(self, lost_rate: float, saved_rate: float, multipliers: list[float], restart: float) -> None:
        rates = [(m * lost_rate, m * saved_rate) for m in multipliers]
        self.lengths = [restart + 1.0 / max(lam + mu, 1e-300) for lam, mu in rates]
        self.terms = _RateTerms(rates, restart)

    def work_rate(self, tau: float, cost: float, write: float) -> float:
        kept = held = 0.0
        for rate, per_attempt in zip(self.terms.rates(tau, cost, write), self.lengths):
            kept += rate * per_attempt
            held += per_attempt
        return kept / held


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
    best = best_interval(estimate, checkpoint_cost, restart_cost=restart_cost, write_seconds=write_seconds)
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

    `checkpoint_cost` is the blocking stall of one save (C), as measured from commit markers;
    `write_seconds` the full write time up to the commit, which floors the interval (and adds its
    small second-order effect in the model); `restart_cost` the seconds from an attempt's start to
    its first step (it weighs the rates against each other a little). The user's `min_s`/`max_s`
    win over everything.
    """
    return choose_interval_detail(
        estimate, checkpoint_cost, min_s, max_s, restart_cost=restart_cost, write_seconds=write_seconds
    ).seconds


def explain(estimate: RateEstimate, checkpoint_cost: float, choice: IntervalChoice) -> str:
    """One line for `status` and `report`."""
    basis = (
        _basis(estimate)
        if estimate.exposure_seconds > 0.0 or estimate.endings or estimate.saved_reclaims
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
        + (
            f"; shaped by the last {len(estimate.lifetimes)} attempt lifetime(s)"
            if estimate.lifetimes
            else ""
        )
    )


def memory_seconds(half_life_seconds: float) -> float:
    """The training time an estimate's evidence stands for once it is full: the weighted exposure
    tends to half-life / ln 2 (about 1.44 half-lives), however long the class has been used."""
    return half_life_seconds / _LN2


def _basis(estimate: RateEstimate) -> str:
    """What the rates rest on: the evidence as it weighs now, and over what stretch of training."""
    counts = (
        f"{estimate.endings} work-losing ending(s) and {estimate.saved_reclaims} saved reclaim(s) in "
        f"{estimate.exposure_seconds / HOUR:.1f} h of training"
    )
    if math.isinf(estimate.half_life_seconds) or estimate.weighted_exposure is None:
        return f"{counts} + prior"
    # The stretch the weights cover: all of the exposure while it is short, ~1.44 half-lives after.
    half_life = estimate.memory_half_life
    window = min(estimate.exposure_seconds, memory_seconds(half_life))
    return (
        f"{estimate.recent_endings:.3g} work-losing ending(s) and {estimate.recent_saved:.3g} saved "
        f"reclaim(s) in {estimate.recent_exposure / HOUR:.1f} h of training, weighted over the last "
        f"~{_duration(window)} (half-life {_duration(half_life)}: {MEMORY_ENDINGS:g} endings at this "
        f"rate, at least {_duration(estimate.half_life_seconds)}; {counts} in all) + prior"
    )


def retimed(estimate: RateEstimate, half_life_seconds: float) -> RateEstimate:
    """The estimate forgetting at `half_life_seconds` from now on (what it weighs now is kept: the
    configured half-life applies to every update after it is set). It is the shortest half-life:
    a class that expects fewer than MEMORY_ENDINGS endings in it forgets more slowly (`memory_half_life`)."""
    _check_positive(half_life_seconds=half_life_seconds)
    if estimate.half_life_seconds == half_life_seconds:
        return estimate
    return replace(estimate, half_life_seconds=half_life_seconds)


def _duration(seconds: float) -> str:
    if seconds < 120.0:
        return f"{seconds:.0f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / 60.0:.1f} min"
    return f"{seconds / HOUR:.1f} h"
