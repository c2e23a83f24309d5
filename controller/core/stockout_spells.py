"""How much longer a refused placement's stockout is expected to last, learned from the refusals
the job itself watched (its own attempts, in its stored record).

A refusal (a stockout or quota error before the attempt ran) says the capacity is gone now, not
for how long. Google documents no length: a resource error applies to that request at that
moment, and capacity changes often (Google's "Troubleshoot resource availability errors",
https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability).
So the length is learned, per job, over all its placements (one estimate: a job sees too few
stockouts to learn one per placement):

- Spells. Refusals of one placement in a row form a watched spell, from its first refusal (the
  moment its request was made) to its last. Refusals more than `watch_gap_seconds` apart (half an
  hour, or three capacity retries when those are longer: `watch_gap`) are not one watched spell:
  nobody looked in between (the job ran elsewhere), so the spell before the gap counts up to its
  last refusal, its end unseen. A start there within the gap ends the spell, seen: it counts half
  the gap more. A start after a longer gap ends it unseen. Quota refusals count alike: a
  placement without quota is expected to stay refused as a stockout is.
- The mean length. Stockouts taken as exponential, the estimate from censored lengths: watched
  seconds over the spells seen to end, with a prior of `PRIOR_STOCKOUT_SECONDS` counted as one
  spell seen to end. Old evidence fades: the watched seconds and the ends seen weigh half as much
  per `half_life_seconds` (the job's evidence half-life, 12 h by default), so the mean goes back to
  the prior when nothing new is watched.
- What is left of one placement's spell. Exponential spells are memoryless: a placement refused
  `since` seconds ago is still out with probability exp(-since/mean), and then for `mean` more on
  average, so the expected wait is mean x exp(-since/mean); a refusal many means ago says nothing.

Both the controller (`placement_choice.evidence`, folding the job's attempts) and the capacity
simulator's relaunch lane (bench/capacity_sim.py, as it watches) fold their refusals and starts
through this one class, so the policy the simulator measures is the one the controller runs.

Pure: no I/O, no clock (times are passed in); each fold returns a new value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# Refusals of one placement further apart than this are not one watched stockout: the controller
# asks again within the capacity retry (120 s) while it waits, so a longer gap means it was elsewhere.
WATCH_GAP_SECONDS = 1800.0
# With a longer capacity retry configured, the gap is this many retries (a retry's jitter included).
WATCH_GAP_RETRIES = 3.0
# A refusal is taken to last this long before any stockout was watched (counted as one spell seen
# to its end): a guess of hours, not minutes, that the job's own refusals correct.
PRIOR_STOCKOUT_SECONDS = 2 * 3600.0
# The scale old stockouts fade on by default: the job's evidence half-life
# (`placement_choice.EVIDENCE_HALF_LIFE_SECONDS`, the rate book's).
DEFAULT_HALF_LIFE_SECONDS = 12 * 3600.0


@dataclass(frozen=True)
class Stockouts:
    """What the job watched of its stockouts, folded in time order (`refused`, `started`)."""

    refused_at: dict[str, float] = field(default_factory=dict)  # each open spell's latest refusal
    since: dict[str, float] = field(default_factory=dict)  # its first (when that request was made)
    watched: float = 0.0  # seconds of stockout watched, faded to `at`
    ended: float = 0.0  # spells seen to their end, faded to `at`
    at: float = 0.0  # when `watched` and `ended` were last faded
    half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS
    watch_gap_seconds: float = WATCH_GAP_SECONDS

    def refused(self, name: str, at: float, asked_at: float | None = None) -> Stockouts:
        """`name` refused at `at` a request made at `asked_at` (by default `at`)."""
        asked = at if asked_at is None else min(asked_at, at)
        last = self.refused_at.get(name)
        state = self
        if last is not None and asked - last > self.watch_gap_seconds:
            # Left unwatched: the spell counts up to its last refusal, its end unseen.
            state = state._close(name, at, last - self.since[name], ends=0.0)
        refused_at = {**state.refused_at, name: at}
        since = {**state.since, name: state.since.get(name, asked)}
        return replace(state, refused_at=refused_at, since=since)

    def started(self, name: str, at: float) -> Stockouts:
        """`name` took an attempt asked for at `at`: its open spell, if any, is over."""
        last = self.refused_at.get(name)
        if last is None:
            return self
        first = self.since[name]
        if at - last <= self.watch_gap_seconds:
            return self._close(name, at, 0.5 * (last + at) - first, ends=1.0)
        return self._close(name, at, last - first, ends=0.0)

    def mean(self, now: float, prior_seconds: float = PRIOR_STOCKOUT_SECONDS) -> float:
        """The expected length of a stockout at `now`: the prior counts as one spell seen to end."""
        kept = self.kept(now)
        return (prior_seconds + kept * self.watched) / (1.0 + kept * self.ended)

    def remaining(self, name: str, now: float, prior_seconds: float = PRIOR_STOCKOUT_SECONDS) -> float | None:
        """Expected seconds until `name` has capacity again; None when no spell of it is open."""
        last = self.refused_at.get(name)
        if last is None:
            return None
        mean = self.mean(now, prior_seconds)
        return mean * math.exp(-max(0.0, now - last) / mean)

    def _close(self, name: str, at: float, seconds: float, ends: float) -> Stockouts:
        kept = self.kept(at)
        return replace(
            self,
            refused_at={k: v for k, v in self.refused_at.items() if k != name},
            since={k: v for k, v in self.since.items() if k != name},
            watched=kept * self.watched + max(0.0, seconds),
            ended=kept * self.ended + ends,
            at=max(self.at, at),
        )

    def kept(self, now: float) -> float:
        """How much the watched seconds and ends weigh at `now` (1 when just folded)."""
        if not math.isfinite(self.half_life_seconds):
            return 1.0
        return math.pow(0.5, max(0.0, now - self.at) / self.half_life_seconds)


def watch_gap(capacity_retry_seconds: float) -> float:
    """The longest gap between refusals of one placement that still counts as watching it: half
    an hour, or a few capacity retries where the configured retry is long."""
    return max(WATCH_GAP_SECONDS, WATCH_GAP_RETRIES * capacity_retry_seconds)
