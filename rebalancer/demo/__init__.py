"""The embedded demo: a cluster-and-usage snapshot shaped by real CPU usage, shipped with the package.

``scripts/make_demo.py`` regenerates ``cluster.json`` from the Bitbrains trace; the planner that runs on it
is the production one.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec

from rebalancer.model import ClusterFacts, UsageReport

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
