"""The policy's ``predictor:`` section: how daily peaks of the last days become a predicted next peak.

Pydantic v2 on the project's ``Model`` base (frozen, unknown fields rejected, camelCase in YAML, every field
described). Weights are listed **yesterday first**: ``weights[0]`` is yesterday's, ``weights[1]`` the day
before's, and so on. They are normalised, so only their ratios matter.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from rebalancer.domain.settings.limits import TimeZoneName
from rebalancer.domain.settings.shared import Duration, DurationBounds, FieldProblems, Model, Percent

Aggregation = Literal["weighted_mean", "max_daily", "pooled_p95", "same_weekday", "decaying_histogram"]
AGGREGATIONS: tuple[Aggregation, ...] = (
    "weighted_mean",
    "max_daily",
    "pooled_p95",
    "same_weekday",
    "decaying_histogram",
)
NodePeak = Literal["coincident", "sum"]
# the back-test on the Bitbrains sample supports decaying_histogram (docs/user-guide.md, "Predictor"): per VM the
# lowest MAE, highest precision and F1 with max_daily's recall nearly; per node (coincident peak) the highest F1
DEFAULT_AGGREGATION: Aggregation = "decaying_histogram"

Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def decaying_weights(days: int) -> tuple[float, ...]:
    """The default: yesterday weighs ``days``, the oldest day 1, linearly in between (normalised)."""
    raw = [float(days - k) for k in range(days)]
    total = sum(raw)
    return tuple(w / total for w in raw)


DEFAULT_HISTORY_POD_QUERY = (
    "sum by (namespace, pod) ("
    'rate(container_cpu_usage_seconds_total{{container!="", container!="POD"{pod_filter}}}[{rate_window}])'
    ")"
)


class HistorySettings(Model):
    """How the daily peaks are read from Prometheus: computed server-side, one instant query per day (and
    per batch of nodes), never raw samples. Day d's peak is ``quantile_over_time`` over that calendar day
    in ``timeZone``, evaluated at the day's end."""

    renamed_seconds: ClassVar[Mapping[str, str]] = {"timeoutSeconds": "timeout"}

    pod_query: str = Field(
        default=DEFAULT_HISTORY_POD_QUERY,
        description="Per-pod CPU cores as an instant vector, one series per (namespace, pod); each day's peak is "
        "a subquery over it at `resolution`. Placeholders: {rate_window}, {node_label} and {pod_node_label} (from "
        'prometheus:), {pod_filter} (`, <podNodeLabel>=~"a|b"` for a batch of nodes; without it there is one batch).',
    )
    recording_rule: str | None = Field(
        default=None,
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        description="A recorded per-pod CPU series (labels namespace, pod and prometheus.podNodeLabel), for example "
        "`namespace_pod:cpu_usage:rate5m`: its samples are read directly, no subquery (the cheap way for "
        "large clusters). Overrides podQuery.",
    )
    profile_rule: str | None = Field(
        default=None,
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        description="nodePeak coincident: a recorded per-pod mean CPU over the hour before each sample, recorded "
        "every hour (labels as recordingRule), for example `namespace_pod:cpu_usage:avg1h`: the hourly profiles "
        "read its samples (each placed in the hour its window's middle falls in) instead of averaging every "
        "5-minute sample again (the cheap way for large clusters). Needs profileBuckets 24.",
    )
    system_query: str | None = Field(
        default=None,
        description="Per-node non-pod CPU cores (kubelet, runtime, daemons), one series per prometheus.nodeLabel, as an "
        "instant vector; its daily peaks become the nodes' predicted system usage. null: systemCpuM.",
    )
    resolution: Duration = Field(
        default=timedelta(minutes=5),
        description="Subquery step of podQuery and systemQuery; with recordingRule, the rule's evaluation "
        "interval (it sizes the batches).",
    )
    time_zone: TimeZoneName = Field(default="UTC", description="Time zone whose calendar days the daily peaks cover.")
    max_samples_per_query: int = Field(
        default=20_000_000,
        ge=1000,
        description="Nodes are queried in batches so that one query holds at most about this many samples "
        "(Prometheus refuses a query above its --query.max-samples, 50,000,000 by default, with HTTP 422).",
    )
    concurrency: int = Field(default=2, ge=1, le=16, description="Queries sent to Prometheus at once.")
    compressed_answers: bool = Field(
        default=False,
        description="Ask Prometheus to gzip the history's answers. false (the default): they come uncompressed, "
        "which spares Prometheus the compression (at 30,000 pods about 0.8 s of CPU per day of profiles, each "
        "answer about 21 MB instead of 3 MB, once a day); true where the network to Prometheus is slow or metered.",
    )
    timeout: Annotated[Duration, DurationBounds(le=timedelta(minutes=10))] = Field(
        default=timedelta(minutes=2),
        description="Timeout of one history query, applied as prometheus.timeout is (the whole answer must arrive "
        "within twice it).",
    )

    @model_validator(mode="after")
    def _valid(self) -> HistorySettings:
        problems: list[tuple[str, str]] = []
        for name, template in (("podQuery", self.pod_query), ("systemQuery", self.system_query)):
            if template is None:
                continue
            try:
                template.format(rate_window="5m", node_label="node", pod_node_label="node", pod_filter="")
            except (KeyError, IndexError, ValueError) as exc:
                problems.append((name, f"cannot fill the template: {exc!r}"))
        if problems:
            raise FieldProblems(problems)
        return self


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
        "predicted day's weekday weighted sameWeekdayFactor times more; decaying_histogram: VPA-style, the "
        "quantile of a histogram of the daily peaks whose weights halve every histogramHalfLife. See the back-test table in docs/user-guide.md.",
    )
    safety_margin: float = Field(
        default=0.0, ge=0, le=10, description="Predictions from history are multiplied by 1 + safetyMargin."
    )
    same_weekday_factor: float = Field(
        default=3.0, ge=1, le=100, description="same_weekday: how many times more the same weekday's days weigh."
    )
    histogram_half_life: Duration = Field(
        default=timedelta(hours=12),
        description="decaying_histogram: a day's weight halves every this much age (VPA: 24h); 1m to 31d.",
    )
    node_peak: NodePeak = Field(
        default="coincident",
        description="coincident: a node's daily peak is the highest time-of-day bucket of its pods' summed mean "
        "profiles that day (pods that peak at different hours do not add up), aggregated over the days; sum: the "
        "sum of its pods' predicted peaks (reads no profiles; far above the real peak when pods peak apart).",
    )
    profile_buckets: int = Field(
        default=24,
        ge=1,
        le=288,
        description="coincident: time-of-day buckets of a day's profile (24: hourly); they must divide a day "
        "into whole minutes.",
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
    history: HistorySettings = Field(
        default_factory=HistorySettings, description="Where the daily peaks come from (Prometheus)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PredictorSettings:
        problems: list[tuple[str, str]] = []
        if self.weights is not None:
            if len(self.weights) != self.days:
                problems.append(("weights", f"needs one weight per day: {self.days} (days), got {len(self.weights)}"))
            elif not any(w > 0 for w in self.weights):
                problems.append(("weights", "at least one weight must be above 0"))
        if 86_400 % self.profile_buckets or (86_400 // self.profile_buckets) % 60:
            problems.append(("profileBuckets", "must divide a day into buckets of whole minutes (24, 48, 96, ...)"))
        if self.history.profile_rule is not None and self.profile_buckets != 24:
            problems.append(("history.profileRule", "records one mean per hour: needs profileBuckets 24"))
        if self.min_history_days > self.days:
            problems.append(("minHistoryDays", f"must not be above days ({self.days})"))
        if not timedelta(minutes=1) <= self.histogram_half_life <= timedelta(days=31):
            problems.append(("histogramHalfLife", "must be from 1m to 31d"))
        if problems:
            raise FieldProblems(problems)
        return self

    def day_weights(self) -> npt.NDArray[np.float64]:
        """Normalised weights, yesterday first."""
        raw = np.asarray(self.weights if self.weights is not None else decaying_weights(self.days), dtype=np.float64)
        normalised: npt.NDArray[np.float64] = raw / raw.sum()
        return normalised
