"""Node-level back-test: the trace's VMs packed into nodes as the simulation packs them, and each node's
daily P95 predicted from the 8 days before it, against what the node then did (pure).

The cluster is the simulation's (:func:`~rebalancer.offline.simulate.cluster.build_cluster`: Deployments of the VMs'
shapes, their pods placed by the scheduler model, on a 5-minute grid like the Bitbrains samples), the pods stay
where they were placed, and every day after the first ``predictor.days`` is a target day. A pod's usage is
what it got on its node (throttled where the node's pods asked more than its allocatable, as Prometheus
would read it); a node's actual peak is the P95 over the day of its pods' summed usage plus the system
usage. Two predictions per
per-entity aggregation:

- ``sum``: the pods' predicted daily peaks summed (what the predictor did before node profiles);
- ``coincident``: per day, the highest time-of-day bucket of the pods' summed mean profiles, these daily
  peaks aggregated over the days as the per-entity peaks are (``pooled_p95`` reads as ``weighted_mean``
  there, as on a live cluster): what the predictor does with ``nodePeak: coincident``.

Both plus the system usage, in percentage points of the node's allocatable CPU; hot is above the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rebalancer.domain.settings.predictor import Aggregation, PredictorSettings
from rebalancer.offline.predict.backtest import BacktestRow, score, windows
from rebalancer.offline.predict.usage import Progress
from rebalancer.offline.simulate.cluster import Cluster, build_cluster
from rebalancer.offline.simulate.config import SimConfig
from rebalancer.offline.simulate.shapes import bitbrains_shapes
from rebalancer.planning.predict.aggregate import FloatArray, aggregate_with
from rebalancer.planning.predict.profile import node_daily_peaks, over_days

STEP_SECONDS = 300  # the Bitbrains sampling interval


@dataclass(frozen=True, slots=True)
class NodeBacktestRow:
    node_peak: str  # "sum" or "coincident"
    row: BacktestRow


@dataclass(frozen=True, slots=True)
class NodeBacktestReport:
    description: str
    nodes: int
    pods: int
    target_days: int
    evaluated: int
    hot: int
    threshold: float
    buckets: int
    rows: tuple[NodeBacktestRow, ...]


def packed_cluster(directory: str, days: int, seed: int = 1) -> Cluster:
    """The simulation's default cluster on the trace's shapes, over all the days the shapes share."""
    shapes = bitbrains_shapes(directory, STEP_SECONDS)
    if shapes.days <= days:
        raise ValueError(f"the traces share {shapes.days} whole days; a node back-test needs more than {days}")
    config = SimConfig(step_seconds=STEP_SECONDS, history_days=days, days=shapes.days - days, seed=seed)
    return build_cluster(config, shapes)


def _node_sums(values: npt.NDArray[np.float64], node_of: npt.NDArray[np.int64], nodes: int) -> FloatArray:
    """Per node, the sum of its pods' rows (first axis)."""
    out = np.zeros((nodes, *values.shape[1:]), dtype=np.float64)
    np.add.at(out, node_of, values)
    return out


def node_backtest(
    cluster: Cluster,
    settings: PredictorSettings,
    aggregations: tuple[Aggregation, ...],
    *,
    threshold: float | None = None,
    progress: Progress | None = None,
) -> NodeBacktestReport:
    threshold = settings.hot_threshold if threshold is None else threshold
    config = cluster.config
    per_day, buckets = config.steps_per_day, settings.profile_buckets
    if per_day % buckets:
        raise ValueError(f"profileBuckets {buckets} does not divide a day of {per_day} {config.step_seconds} s steps")
    total_days = cluster.usage.shape[1] // per_day
    slots = cluster.usage.shape[0]
    if total_days <= settings.days:
        raise ValueError(f"{total_days} days of usage; a node back-test needs more than predictor.days {settings.days}")
    node_of = cluster.initial_nodes()
    served = cluster.served_at_start()
    usage = served[:, : total_days * per_day].astype(np.float64).reshape(slots, total_days, per_day)
    q = settings.quantile
    nodes = len(cluster.nodes)
    pod_daily = np.quantile(usage, q, axis=2)  # (slots, days)
    pod_means = usage.reshape(slots, total_days, buckets, per_day // buckets).mean(axis=3)
    system = float(config.system_cpu_m)
    actual_m = np.quantile(_node_sums(usage, node_of, nodes), q, axis=2) + system  # (nodes, days)
    node_days = node_daily_peaks(_node_sums(pod_means, node_of, nodes), system)  # (nodes, days)
    capacity = np.array([n.allocatable_cpu_m for n in cluster.nodes], dtype=np.float64)[:, None]
    first = settings.days
    actual = 100.0 * actual_m[:, first:] / capacity
    turned = 100.0 * actual_m[:, first - 1 : -1] / capacity <= threshold
    pod_windows = windows(pod_daily, settings.days)[:, first:]  # (slots, targets, days)
    node_windows = windows(node_days, settings.days)[:, first:]  # (nodes, targets, days)
    pooled = _pooled(usage, settings.days, q)[:, first:]
    rows: list[NodeBacktestRow] = []
    for done, agg in enumerate(aggregations, start=1):
        each = settings.model_copy(update={"aggregation": agg})
        per_pod = aggregate_with(pod_windows, pooled, each)
        predictions = (
            ("sum", _node_sums(per_pod, node_of, nodes) + system),
            ("coincident", over_days(node_windows, each)),
        )
        for basis, predicted_m in predictions:
            predicted = 100.0 * predicted_m / capacity
            row = score(agg, settings.safety_margin, predicted.ravel(), actual.ravel(), turned.ravel(), threshold)
            rows.append(NodeBacktestRow(basis, row))
        if progress is not None:
            progress(done, len(aggregations), f"node peaks {agg}")
    return NodeBacktestReport(
        description=cluster.description,
        nodes=len(cluster.nodes),
        pods=slots,
        target_days=total_days - first,
        evaluated=int(actual.size),
        hot=int(np.count_nonzero(actual > threshold)),
        threshold=threshold,
        buckets=buckets,
        rows=tuple(rows),
    )


def _pooled(usage: npt.NDArray[np.float64], window: int, quantile: float) -> FloatArray:
    """(slots, days): per target day d, one quantile over all samples of days d-window..d-1 (NaN before)."""
    slots, days, _ = usage.shape
    out = np.full((slots, days), np.nan)
    for d in range(window, days):
        out[:, d] = np.quantile(usage[:, d - window : d].reshape(slots, -1), quantile, axis=1)
    return out
