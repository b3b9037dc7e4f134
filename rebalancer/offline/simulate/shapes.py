"""Usage shapes the simulated pods follow: real Bitbrains VMs or synthetic diurnal shapes (pure, except
reading the trace files through :mod:`rebalancer.offline.traces`).

A shape set is a matrix ``(shapes, steps)`` on a regular grid starting at a UTC midnight, each row
normalised to its own P95 over the grid (1.0 = the shape's usual peak), so that a pod's usage is its
shape times its own peak in millicores. Bitbrains samples (about 5 minutes apart, with jitter and gaps)
are interpolated linearly onto the grid; a gap is bridged, never read as zero. Rows whose P95 is 0 (a VM
that never ran) are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rebalancer.offline.simulate.config import DAY
from rebalancer.offline.traces import TraceError, load_bitbrains

SYNTHETIC_START = 1_704_067_200.0  # 2024-01-01 00:00 UTC, a Monday
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Shapes:
    start: float  # epoch seconds of the grid's first step, a UTC midnight
    step_seconds: int
    values: Floats  # (shapes, steps), normalised: P95 of each row = 1
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
    rows = np.stack([np.interp(grid, t.timestamps.astype(np.float64), t.millicores) for t in covering])
    left_out = len(traces) - len(covering)
    return _normalised(
        start,
        step_seconds,
        rows,
        f"{len(covering)} Bitbrains VMs from {directory} ({left_out} not running all {days} days left out)",
    )


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
    return _normalised(SYNTHETIC_START, step_seconds, rows, f"{count} synthetic diurnal shapes (seed {seed})")


def _normalised(start: float, step_seconds: int, rows: Floats, description: str) -> Shapes:
    peaks = np.quantile(rows, 0.95, axis=1)
    keep = peaks > 0
    values = rows[keep] / peaks[keep, None]
    return Shapes(start, step_seconds, values, description)
