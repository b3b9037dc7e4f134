"""History a prediction reads: per entity (a pod, a node's system usage, a VM), one peak per day.

A day without data is missing (NaN), never zero: a pod that was not running, or a scrape gap, must not
pull a prediction down. Columns run oldest first; the last column is yesterday. ``pooled`` is, per entity,
one quantile over the whole window's samples (what ``pooled_p95`` reads); None when the source did not
compute it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

K = TypeVar("K", bound=Hashable)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class DailyPeaks(Generic[K]):
    keys: tuple[K, ...]
    values: FloatArray  # (len(keys), days), oldest day first, NaN = missing
    pooled: FloatArray | None = None  # (len(keys),) quantile over the whole window, NaN = missing
    _index: dict[K, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[0] != len(self.keys):
            raise ValueError(f"values must be (entities, days) = ({len(self.keys)}, days), got {self.values.shape}")
        if self.pooled is not None and self.pooled.shape != (len(self.keys),):
            raise ValueError(f"pooled must hold one value per entity, got shape {self.pooled.shape}")
        for name, array in (("values", self.values), ("pooled", self.pooled)):
            if array is None:
                continue
            if np.isinf(array).any() or (array < 0).any():
                raise ValueError(f"{name}: peaks must be finite and not negative (NaN marks a missing day)")
        index = {k: i for i, k in enumerate(self.keys)}
        if len(index) != len(self.keys):
            raise ValueError("keys must be unique")
        object.__setattr__(self, "_index", index)

    @property
    def days(self) -> int:
        return int(self.values.shape[1])

    def present_days(self) -> npt.NDArray[np.int64]:
        """Days with data, per entity."""
        counts: npt.NDArray[np.int64] = np.count_nonzero(~np.isnan(self.values), axis=1).astype(np.int64)
        return counts

    def index(self, key: K) -> int | None:
        return self._index.get(key)

    @classmethod
    def from_series(
        cls,
        series: Mapping[K, Sequence[float | None]],
        days: int,
        pooled: Mapping[K, float | None] | None = None,
    ) -> DailyPeaks[K]:
        """From per-entity lists, oldest day first; None (or NaN) is a missing day. Shorter lists are
        the most recent days (a pod younger than the window); longer ones are an error."""
        keys = tuple(series)
        values = np.full((len(keys), days), np.nan)
        for i, key in enumerate(keys):
            row = series[key]
            if len(row) > days:
                raise ValueError(f"{key}: {len(row)} days of history, the window holds {days}")
            if row:
                values[i, days - len(row) :] = [math.nan if v is None else v for v in row]
        pooled_arr = None
        if pooled is not None:
            pooled_arr = np.array([_nan_if_none(pooled.get(k)) for k in keys], dtype=np.float64)
        return cls(keys, values, pooled_arr)


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else float(value)
