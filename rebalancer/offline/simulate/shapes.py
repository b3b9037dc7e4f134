"""Usage shapes the simulated pods follow: real Bitbrains VMs, synthetic diurnal shapes, or the synthetic
*no-gain* case (pure, except reading the trace files through :mod:`rebalancer.offline.traces`).

A shape set is a matrix ``(shapes, steps)`` on a regular grid starting at a UTC midnight, each row the
entity's usage as a share of its own provisioned CPU (0 to 1), and each entity's provisioned CPU in
millicores; a pod's usage is its shape times its own size (see :mod:`rebalancer.offline.simulate.cluster`).
Bitbrains samples (about 5 minutes apart, with jitter and gaps) are interpolated linearly onto the grid; a
gap is bridged, never read as zero; a sample above the VM's provisioned MHz (up to 6 % on the sample: the
cores' turbo) counts as 100 %. Rows whose P95 is 0 (a VM that never ran) are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rebalancer.offline.simulate.config import DAY
from rebalancer.offline.traces import Trace, TraceError, load_bitbrains

SYNTHETIC_START = 1_704_067_200.0  # 2024-01-01 00:00 UTC, a Monday
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Shapes:
    start: float  # epoch seconds of the grid's first step, a UTC midnight
    step_seconds: int
    values: Floats  # (shapes, steps): usage / the entity's provisioned CPU, 0 to 1
    provisioned_m: Floats  # (shapes,): each entity's provisioned CPU, millicores
    description: str

    @property
    def days(self) -> int:
        return int(self.values.shape[1] * self.step_seconds // DAY)


def bitbrains_shapes(directory: str | Path, step_seconds: int) -> Shapes:
    """The VMs of a Bitbrains directory on a grid over the whole UTC days most of them cover; VMs not
    provisioned over all those days are left out (their usage there is unknown, not zero)."""
    paths = sorted(Path(directory).glob("*.csv*"), key=lambda p: (len(p.name), p.name))
    if not paths:
        raise TraceError(f"{directory}: no Bitbrains trace files (N.csv or N.csv.gz)")
    traces = [t for t in (load_bitbrains(p) for p in paths) if t is not None]
    if not traces:
        raise TraceError(f"{directory}: no VM with provisioned cores")
    start = math.ceil(float(np.median([t.timestamps[0] for t in traces])) / DAY) * DAY
    days = int((float(np.median([t.timestamps[-1] for t in traces])) - start) // DAY)
    covering = [t for t in traces if t.timestamps[0] <= start and t.timestamps[-1] >= start + days * DAY - step_seconds]
    if days < 2 or not covering:
        raise TraceError(f"{directory}: the traces share fewer than 2 whole UTC days")
    grid = start + np.arange(days * DAY // step_seconds, dtype=np.float64) * step_seconds
    rows = np.stack([np.interp(grid, t.timestamps.astype(np.float64), t.millicores / t.capacity_m) for t in covering])
    provisioned = np.array([_provisioned(t, start, days) for t in covering])
    left_out = len(traces) - len(covering)
    description = f"{len(covering)} Bitbrains VMs from {directory} ({left_out} not running all {days} days left out)"
    return _kept(start, step_seconds, np.minimum(rows, 1.0), provisioned, description)


def _provisioned(trace: Trace, start: float, days: int) -> float:
    """The VM's provisioned cores over the grid's days (the median: a VM resized within them is rare)."""
    inside = (trace.timestamps >= start) & (trace.timestamps < start + days * DAY)
    return float(np.median(trace.capacity_m[inside] if inside.any() else trace.capacity_m))


def synthetic_shapes(count: int, days: int, step_seconds: int, seed: int) -> Shapes:
    """Diurnal shapes: a base level, a daily wave peaking at a random hour, weekly dips, noise, and for
    half of them on/off bursts (hours of high usage on some days), the pattern real VMs show."""
    rng = np.random.default_rng(seed)
    steps = days * DAY // step_seconds
    hours = np.arange(steps) * step_seconds / 3600.0
    rows = np.empty((count, steps))
    for i in range(count):
        base = rng.uniform(0.1, 0.5)
        amplitude = rng.uniform(0.05, 0.4)
        peak_hour = rng.uniform(0, 24)  # services of several time zones and batch jobs: peaks spread over the day
        wave = base + amplitude * np.cos(2 * np.pi * (hours - peak_hour) / 24.0)
        weekend = (np.floor(hours / 24) % 7) >= 5
        wave = np.where(weekend, wave * rng.uniform(0.5, 1.0), wave)
        if rng.random() < 1 / 2:
            for day in range(days):
                if rng.random() < 0.4:
                    begin = int((day * 24 + rng.uniform(6, 18)) * 3600 // step_seconds)
                    wave[begin : begin + int(rng.uniform(2, 6) * 3600 // step_seconds)] += rng.uniform(0.8, 1.5)
        rows[i] = np.maximum(wave + rng.normal(0, 0.05, steps), 0.01)
    # provisioned: at its highest an entity uses 2/3 to all of it; sizes of 1 to 8 cores, as the VMs'
    rows /= rows.max(axis=1, keepdims=True) * rng.uniform(1.0, 1.5, (count, 1))
    provisioned = 1000.0 * rng.choice([1, 2, 4, 8], count)
    return _kept(SYNTHETIC_START, step_seconds, rows, provisioned, f"{count} synthetic diurnal shapes (seed {seed})")


def no_gain_shapes(count: int, days: int, step_seconds: int, seed: int) -> Shapes:
    """A case no placement helps: every entity peaks in the same afternoon hours (the whole pool runs hot
    then), and one in twenty is as large as a node (sized at a node's allocatable) and uses most of it at
    the peak (a node holding one is hot whatever else it holds)."""
    rng = np.random.default_rng(seed)
    steps = days * DAY // step_seconds
    hours = np.arange(steps) * step_seconds / 3600.0
    bump = np.exp(-((((hours % 24) - 14.0) / 2.5) ** 2))  # the shared peak, 14:00 UTC
    big = rng.random(count) < 1 / 20
    rows = np.empty((count, steps))
    for i in range(count):
        level, height = (0.05, 0.85) if big[i] else (0.2, 0.6)
        rows[i] = np.clip(level + height * bump * rng.uniform(0.9, 1.1) + rng.normal(0, 0.02, steps), 0.01, 1.0)
    provisioned = np.where(big, 1000.0 * 256, 1000.0 * rng.choice([1, 2], count))
    return _kept(SYNTHETIC_START, step_seconds, rows, provisioned, f"{count} synthetic no-gain shapes (seed {seed})")


def _kept(start: float, step_seconds: int, rows: Floats, provisioned: Floats, description: str) -> Shapes:
    keep = np.quantile(rows, 0.95, axis=1) > 0
    return Shapes(start, step_seconds, rows[keep], provisioned[keep], description)
