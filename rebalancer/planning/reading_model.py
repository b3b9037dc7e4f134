"""How a node's usage reading shows a change of its load over time (pure): the statistic the default queries
read, modelled sample by sample.

A reading is the ``quantile`` of the samples of a subquery over ``window`` at resolution ``step``; each
sample is a rate over ``rate_window`` of a counter (CPU) or the gauge itself (memory: ``rate_window`` 0).
Prometheus puts a subquery's samples on multiples of ``step`` (counted from the epoch): a reading at
``now`` reads the ``window / step`` multiples up to ``now`` (Prometheus 3 leaves out the one at exactly
``now - window``; Prometheus 2 keeps it when ``now`` is itself on a step). A sample ``e`` seconds after a
change of the load holds ``e / rate_window`` of it (all of it from ``rate_window`` on; a gauge's at once),
and the quantile interpolates linearly between the two samples around its rank, as Prometheus does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Lag:
    """How long after a change of a node's load its usage reading still does not show it (seconds)."""

    gone: float  # load that left: while a sample the quantile reads still holds it
    landed: float  # load that arrived: until every sample the quantile reads holds it


def reading_lag(window: float, quantile: float, rate_window: float, step: float) -> Lag:
    """The lag of the ``quantile`` of the ``window / step`` samples of a rate over ``rate_window`` (seconds).

    A sample holds what was before a change until ``rate_window`` after it (0 for a gauge, as memory). The quantile reads the samples of
    rank ``quantile * (n - 1)`` (linear interpolation, as Prometheus): a fall shows once every sample from
    that rank up is later, a rise once every sample from that rank up holds it (the higher ranks being the
    later samples after a fall, the ones holding the new load after a rise)."""
    if window <= 0 or step <= 0 or rate_window < 0 or not 0 < quantile <= 1:
        raise ValueError(f"reading_lag: window {window}, step {step}, rate window {rate_window}, quantile {quantile}")
    samples = max(1, int(window // step))
    rank = round(quantile * (samples - 1), 9)
    return Lag(rate_window + math.ceil(rank) * step, rate_window + (samples - 1 - math.floor(rank)) * step)


@dataclass(frozen=True, slots=True)
class Reading:
    """The statistic a node's usage reading is (seconds; ``rate_window`` 0: a gauge)."""

    window: float
    quantile: float
    rate_window: float
    step: float

    def __post_init__(self) -> None:
        reading_lag(self.window, self.quantile, self.rate_window, self.step)  # the same checks

    @property
    def lag(self) -> Lag:
        """The lag counted from the newest sample (:func:`reading_lag`)."""
        return reading_lag(self.window, self.quantile, self.rate_window, self.step)

    def caught_up(self, changed_at: float, *, rise: bool) -> float:
        """When the reading first shows all of a change made at ``changed_at``: the first step on or after
        the lag (a subquery's newest sample is on a step, up to a step before the reading's time)."""
        lag = self.lag.landed if rise else self.lag.gone
        return math.ceil(round((changed_at + lag) / self.step, 9)) * self.step

    def shown(self, changed_at: float, now: float, *, rise: bool) -> float:
        """The share (0 to 1) of a change of the node's load made at ``changed_at`` that the reading at
        ``now`` shows: load that arrived (``rise``) or load that left."""
        if now >= self.caught_up(changed_at, rise=rise):
            return 1.0
        samples = max(1, int(self.window // self.step))
        newest = math.floor(round(now / self.step, 9)) * self.step
        parts = sorted((self._held(newest - k * self.step - changed_at) for k in range(samples)), reverse=not rise)
        rank = round(self.quantile * (samples - 1), 9)
        low, high = math.floor(rank), math.ceil(rank)
        return parts[low] + (rank - low) * (parts[high] - parts[low])

    def _held(self, elapsed: float) -> float:
        """The share of a change that a sample taken ``elapsed`` seconds after it holds."""
        if elapsed < 0:
            return 0.0
        if self.rate_window <= 0:
            return 1.0
        return min(1.0, elapsed / self.rate_window)
