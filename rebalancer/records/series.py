"""The efficiency figures over time: the period cut into buckets, each with its own rates (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.records.rates import EfficiencyReport, compute_rates


@dataclass(frozen=True, slots=True)
class Bucket:
    start: float
    end: float
    report: EfficiencyReport


def bucket_bounds(start: float, end: float, width: float) -> list[tuple[float, float]]:
    """[start, end] cut into buckets of ``width`` seconds, the last one ending at ``end``."""
    if width <= 0 or end <= start:
        raise ValueError("buckets need width > 0 and end > start")
    count = max(1, math.ceil((end - start) / width))
    return [(max(start, end - (count - i) * width), end - (count - i - 1) * width) for i in range(count)]


def buckets(
    state: EfficiencyState,
    reference: Mapping[tuple[float, float], Mapping[str, float]] | None,
    pool_of: Mapping[str, str],
    bounds: list[tuple[float, float]],
) -> tuple[Bucket, ...]:
    """One report per bucket; ``reference``: each bucket's hot minutes by the reference (None: unknown)."""
    out = []
    for i, (lo, hi) in enumerate(bounds):  # a time on a boundary counts in the bucket it ends
        minutes = None if reference is None else reference.get((lo, hi))
        problem = None if minutes is not None else "reference unknown for this bucket"
        out.append(Bucket(lo, hi, compute_rates(state, minutes, pool_of, lo, hi, problem, start_open=i > 0)))
    return tuple(out)
