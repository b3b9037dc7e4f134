"""cAdvisor-shaped ``container_cpu_usage_seconds_total`` history, and what Prometheus should make of it.

Per pod, cAdvisor (through the kubelet's /metrics/cadvisor) reports one series per real container,
one for the pause container (``container="POD"``) and one pod-level cgroup series (``container=""``)
that already holds the sum of the others; per node, the root cgroup (``id="/"``) holds everything
including system daemons. Summing all of them doubles the usage: the history has all of them.

A load is a :data:`Rate`: cores used during the sample interval that ends at ``t``. Counters advance by
``rate(t) * step`` at every step, so the expected ``rate()`` over a window is an exact average.
"""

from __future__ import annotations

import bisect
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rebalancer.offline.traces import load_bitbrains
from tests.adapters.prom_fixture import Series
from tests.shared_data import TRACE_DIR

Rate = Callable[[float], float]
METRIC = "container_cpu_usage_seconds_total"
COUNTER_START = 5000.0  # core-seconds used before the history starts (containers started earlier)


def constant(cores: float) -> Rate:
    return lambda t: cores


def spike(base: float, extra: float, start: float, end: float) -> Rate:
    """``base`` cores, plus ``extra`` during (start, end]."""
    return lambda t: base + extra if start < t <= end else base


def add(*rates: Rate) -> Rate:
    return lambda t: sum(r(t) for r in rates)


@dataclass(frozen=True)
class Container:
    name: str
    cores: Rate


@dataclass(frozen=True)
class PodSpec:
    namespace: str
    name: str
    node: str
    containers: tuple[Container, ...]
    pause_cores: float = 0.002

    @property
    def uid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.namespace}.{self.name}"))

    def usage(self) -> Rate:
        """What rebalancer should see for this pod: its real containers, not pause or pod cgroup."""
        return add(*(c.cores for c in self.containers))


@dataclass(frozen=True)
class NodeSpec:
    name: str
    system_cores: float = 0.25
    last_sample: float | None = None  # cAdvisor on this node stops reporting after this time


@dataclass(frozen=True)
class CadvisorHistory:
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]
    start: float
    end: float
    step: float = 30.0
    node_label: str = "node"

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def node_usage(self, name: str) -> Rate:
        """The root cgroup: system daemons plus every container of every pod, pause included."""
        pods = [p for p in self.pods if p.node == name]
        parts = [constant(self.node(name).system_cores), *(p.usage() for p in pods)]
        parts += [constant(p.pause_cores) for p in pods]
        return add(*parts)

    def times(self, node: str) -> list[float]:
        last = self.node(node).last_sample
        count = int((self.end - self.start) // self.step)
        stamps = [self.start + i * self.step for i in range(count + 1)]
        return [t for t in stamps if last is None or t <= last]

    def series(self) -> list[Series]:
        out: list[Series] = []
        for node in self.nodes:
            base = node_labels(node.name, self.node_label)
            stamps = self.times(node.name)
            out.append(Series(METRIC, {**base, "id": "/"}, counter(self.node_usage(node.name), stamps)))
            for pod in (p for p in self.pods if p.node == node.name):
                names = tuple(c.name for c in pod.containers)
                cgroups = PodCgroups.of(base, pod.namespace, pod.name, pod.uid, names)
                for labels, container in zip(cgroups.containers, pod.containers, strict=True):
                    out.append(Series(METRIC, labels, counter(container.cores, stamps)))
                out.append(Series(METRIC, cgroups.pause, counter(constant(pod.pause_cores), stamps)))
                whole = add(pod.usage(), constant(pod.pause_cores))
                out.append(Series(METRIC, cgroups.whole, counter(whole, stamps)))
        return out


def node_labels(node: str, node_label: str = "node") -> dict[str, str]:
    """The labels every cAdvisor series of ``node`` carries, as kube-prometheus scrapes the kubelet
    (the node root cgroup adds ``id="/"``)."""
    return {"job": "kubelet", "metrics_path": "/metrics/cadvisor", "instance": f"{node}:10250", node_label: node}


@dataclass(frozen=True)
class PodCgroups:
    """The labels of a pod's cAdvisor series: one per real container, the pause container, the pod cgroup."""

    containers: tuple[dict[str, str], ...]
    pause: dict[str, str]
    whole: dict[str, str]

    @classmethod
    def of(cls, base: dict[str, str], namespace: str, pod: str, uid: str, containers: Sequence[str]) -> PodCgroups:
        cgroup = f"/kubepods/burstable/pod{uid}"
        labels = {**base, "namespace": namespace, "pod": pod}
        return cls(
            tuple(
                {**labels, "container": name, "id": f"{cgroup}/{uid[:8]}c{index}", "image": "app:1"}
                for index, name in enumerate(containers)
            ),
            {**labels, "container": "POD", "id": f"{cgroup}/{uid[:8]}pause", "image": "registry.k8s.io/pause:3.9"},
            {**labels, "container": "", "id": cgroup},
        )


def counter(rate: Rate, stamps: Sequence[float]) -> list[tuple[float, float]]:
    samples: list[tuple[float, float]] = []
    value = COUNTER_START
    for i, t in enumerate(stamps):
        if i:
            value += rate(t) * (t - stamps[i - 1])
        samples.append((t, value))
    return samples


def expected_quantile(
    rate: Rate, at: float, *, quantile: float, window: float, step: float, rate_window: float, sample_step: float
) -> float:
    """``quantile_over_time(q, rate(x[rate_window])[window:step])`` at ``at`` on Prometheus 2.x.

    2.x ranges are closed on both ends: the subquery has a point at every multiple of ``step`` in
    [at - window, at], and rate() over samples exactly ``sample_step`` apart and aligned with those
    points is the exact mean of the load over (t - rate_window, t]. Quantiles interpolate linearly
    between ranks, as ``numpy.quantile`` does by default.
    """
    first = math.ceil((at - window) / step) * step
    points = [first + i * step for i in range(int((at - first) // step) + 1)]
    means = []
    for t in points:
        ends = [t - k * sample_step for k in range(int(rate_window // sample_step))]
        means.append(sum(rate(e) for e in ends) / len(ends))
    means.sort()
    rank = quantile * (len(means) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(means) - 1)
    return means[low] + (means[high] - means[low]) * (rank - low)


# -- the Bitbrains trace ---------------------------------------------------------------------


@dataclass(frozen=True)
class TraceLoad:
    """A VM of the Bitbrains Rnd trace as a load: cores = usage MHz / (capacity MHz / cores).

    Each row holds the mean over the ~5 minutes *ending* at its timestamp, so the rate at ``t`` is the
    value of the first row at or after ``t``.
    """

    vm: int
    stamps: tuple[float, ...]
    cores: tuple[float, ...]

    def __call__(self, t: float) -> float:
        index = bisect.bisect_left(self.stamps, t)
        return self.cores[min(index, len(self.cores) - 1)]


def bitbrains_vm(vm: int, directory: Path = TRACE_DIR) -> TraceLoad:
    """One VM of the Bitbrains sample, read by the project's own reader (cores, not millicores)."""
    path = directory / f"{vm}.csv.gz"
    trace = load_bitbrains(path)
    if trace is None:
        raise ValueError(f"{path}: no usable rows (0 cores or 0 MHz capacity)")
    stamps = tuple(float(t) for t in trace.timestamps)
    return TraceLoad(vm, stamps, tuple(float(m) / 1000.0 for m in trace.millicores))
