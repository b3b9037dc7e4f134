"""The policy's ``predictor:`` section: how daily peaks of the last days become a predicted next peak.

Pydantic v2 on the project's ``Model`` base (frozen, unknown fields rejected, camelCase in YAML, every field
described). Weights are listed **yesterday first**: ``weights[0]`` is yesterday's, ``weights[1]`` the day
before's, and so on. They are normalised, so only their ratios matter.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from rebalancer.settings import FieldProblems, Model, Percent

Aggregation = Literal["weighted_mean", "max_daily", "pooled_p95", "same_weekday"]
AGGREGATIONS: tuple[Aggregation, ...] = ("weighted_mean", "max_daily", "pooled_p95", "same_weekday")
# the back-test on the Bitbrains sample supports max_daily (README, "Predictor"): best F1 and recall at
# thresholds 70 and 90, the only one that catches most days that turn hot after a quiet day
DEFAULT_AGGREGATION: Aggregation = "max_daily"

Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def decaying_weights(days: int) -> tuple[float, ...]:
    """The default: yesterday weighs ``days``, the oldest day 1, linearly in between (normalised)."""
    raw = [float(days - k) for k in range(days)]
    total = sum(raw)
    return tuple(w / total for w in raw)


class PredictorSettings(Model):
    """Predicted next-peak load of each node from the daily CPU peaks of its pods over the last days."""

    days: int = Field(default=8, ge=1, le=31, description="Days of history a prediction reads (the window).")
    quantile: float = Field(
        default=0.95, gt=0, le=1, description="A day's peak is this quantile of the pod's CPU over the day."
    )
    weights: tuple[Weight, ...] | None = Field(
        default=None,
        description="Weight of each day, yesterday first; as many as days, not all zero (normalised). "
        "Default: decaying linearly from yesterday (days) to the oldest day (1).",
    )
    aggregation: Aggregation = Field(
        default=DEFAULT_AGGREGATION,
        description="weighted_mean: weighted mean of the daily peaks; max_daily: the highest daily peak; "
        "pooled_p95: one quantile over the whole window; same_weekday: weighted mean with the days of the "
        "predicted day's weekday weighted sameWeekdayFactor times more. See the README's back-test table.",
    )
    safety_margin: float = Field(
        default=0.0, ge=0, le=10, description="Predictions from history are multiplied by 1 + safetyMargin."
    )
    same_weekday_factor: float = Field(
        default=3.0, ge=1, le=100, description="same_weekday: how many times more the same weekday's days weigh."
    )
    min_history_days: int = Field(
        default=3,
        ge=1,
        description="A pod with fewer days of history borrows its workload's profile, then its CPU request.",
    )
    sibling_quantile: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="A pod without enough history takes this quantile of its sibling pods' predictions "
        "(pods of one workload sit at different levels; above the median leans to the safe side).",
    )
    system_cpu_m: int = Field(
        default=0,
        ge=0,
        description="Predicted non-pod usage (kubelet, runtime, daemons) of a node without system history, "
        "in millicores.",
    )
    hot_threshold: Percent = Field(
        default=70,
        description="A node predicted above this percent of its allocatable CPU is predicted hot.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PredictorSettings:
        problems: list[tuple[str, str]] = []
        if self.weights is not None:
            if len(self.weights) != self.days:
                problems.append(("weights", f"needs one weight per day: {self.days} (days), got {len(self.weights)}"))
            elif not any(w > 0 for w in self.weights):
                problems.append(("weights", "at least one weight must be above 0"))
        if self.min_history_days > self.days:
            problems.append(("minHistoryDays", f"must not be above days ({self.days})"))
        if problems:
            raise FieldProblems(problems)
        return self

    def day_weights(self) -> npt.NDArray[np.float64]:
        """Normalised weights, yesterday first."""
        raw = np.asarray(self.weights if self.weights is not None else decaying_weights(self.days), dtype=np.float64)
        normalised: npt.NDArray[np.float64] = raw / raw.sum()
        return normalised
