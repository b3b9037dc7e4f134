"""The embedded demo: a cluster-and-usage snapshot shaped by real CPU usage, shipped with the package.

``scripts/make_demo.py`` regenerates ``cluster.json`` from the Bitbrains trace; the planner that runs on it
is the production one.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec

from rebalancer.domain.model import ClusterFacts, PodKey, UsageReport
from rebalancer.planning.predict.history import DailyPeaks

DEMO_POLICY = "policy.yaml"


@dataclass(frozen=True, slots=True)
class DemoFile:
    description: str
    taken_at: float
    facts: ClusterFacts
    node_cpu_m: dict[str, int]
    pod_cpu_m: list[tuple[str, str, int]]

    def usage(self) -> UsageReport:
        return UsageReport(
            node_cpu_m=dict(self.node_cpu_m),
            pod_cpu_m={(ns, name): m for ns, name, m in self.pod_cpu_m},
            description=self.description,
        )


def load_demo() -> DemoFile:
    data = resources.files(__package__).joinpath("cluster.json").read_bytes()
    return msgspec.json.decode(data, type=DemoFile)


def demo_policy_path() -> Path:
    return Path(str(resources.files(__package__).joinpath(DEMO_POLICY)))


DEMO_HISTORY = "history.json"


class DemoHistory(msgspec.Struct, frozen=True):
    """The demo pods' daily P95 over the days before ``predicted_day`` (oldest first; a young pod's list is
    shorter, holding its most recent days), and what each pod really peaked at on that day."""

    description: str
    predicted_day: str
    days: list[str]
    pod_peaks: list[tuple[str, str, list[float | None]]]
    pod_pooled: list[tuple[str, str, float | None]]
    system_peaks: list[tuple[str, list[float | None]]]
    system_pooled: list[tuple[str, float | None]]
    actual_pod_peaks: list[tuple[str, str, float | None]]
    actual_system: list[tuple[str, float]]

    def pod_history(self, days: int) -> DailyPeaks[PodKey]:
        """The last ``days`` days (a longer window has the older days missing); pooled only over all of them."""
        series = {(ns, name): values[-days:] for ns, name, values in self.pod_peaks}
        pooled = {(ns, name): p for ns, name, p in self.pod_pooled} if days == len(self.days) else None
        return DailyPeaks.from_series(series, days, pooled)

    def system_history(self, days: int) -> DailyPeaks[str]:
        pooled = dict(self.system_pooled) if days == len(self.days) else None
        return DailyPeaks.from_series({node: values[-days:] for node, values in self.system_peaks}, days, pooled)

    def actual_utilization(self, facts: ClusterFacts) -> dict[str, float]:
        """Each node's real peak on the predicted day, as the predictor adds it up (pods' P95 + system), in %."""
        pods = {(ns, name): v for ns, name, v in self.actual_pod_peaks}
        total = dict(self.actual_system)
        for pod in facts.pods:
            value = pods.get(pod.key)
            if pod.node_name in total and value is not None:
                total[pod.node_name] += value
        return {n.name: 100.0 * total[n.name] / n.allocatable_cpu_m for n in facts.nodes if n.name in total}


def load_demo_history() -> DemoHistory:
    data = resources.files(__package__).joinpath(DEMO_HISTORY).read_bytes()
    return msgspec.json.decode(data, type=DemoHistory)
