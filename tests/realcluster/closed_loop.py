"""The closed loop on real parts: a cluster of hollow nodes with two hot nodes, a real Prometheus scraping
:class:`tests.realcluster.live_usage.LiveUsage`, and the judge of what the evictions did against the truth.

Six hollow nodes of 1 CPU. hot-1 and hot-2 each run the five pods of one Deployment (``busy-1``, ``busy-2``:
170m of real CPU each, 91 % of the node with its system daemons and pause containers; two evictions bring
it to 57 %, under the 70 % target); cold-1..3 each run the one pod of their own Deployment (``idle-1``..3:
100m, 15 %: under the 20 % cold threshold, room for the load). The busy pods request 150m, the idle ones 100m
(64Mi each), so the scheduler places a replacement by requests: onto the least requested node, a cold one;
and an idle pod moved off a receiver of two replacements would land on another cold node, not back. ``spare`` runs three ``batch`` pods that request 250m
but use 20m (12 %): it stays cold whatever moves, as the most requested node it receives nothing, and so a
node that reads hot always has a cold node in its pool (the strategy relieves nothing without one). Each
Deployment has a PodDisruptionBudget of ``maxUnavailable: 1``, kept by the real disruption controller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tests.adapters.prom_fixture import ServerProcess, backfill, require_binary
from tests.controlplane import ControlPlane
from tests.controlplane.cluster import AuditEvent
from tests.realcluster import objects as o
from tests.realcluster.live_usage import LOAD_LABEL, PAUSE_CORES, Life, LiveUsage
from tests.realcluster.scenario import cordon, running

NAMESPACE = "shop"
HOT = ("hot-1", "hot-2")
COLD = ("cold-1", "cold-2", "cold-3")
SPARE = "spare"
NODES = (*HOT, *COLD, SPARE)
# name, nodes, replicas, real CPU (millicores), CPU request
Workload = tuple[str, tuple[str, ...], int, int, str]
WORKLOADS: tuple[Workload, ...] = (
    ("busy-1", HOT[:1], 5, 170, "150m"),
    ("busy-2", HOT[1:], 5, 170, "150m"),
    *((f"idle-{i}", (cold,), 1, 100, "100m") for i, cold in enumerate(COLD, 1)),
    ("batch", (SPARE,), 3, 20, "250m"),
)
REPLICAS = {name: replicas for name, _, replicas, _, _ in WORKLOADS}
SCRAPE = "5s"
RECEIVED_WITHIN = 600.0  # a node that received load this recently must not give any back unless really hot


def build(plane: ControlPlane, all_nodes: tuple[str, ...] = NODES, workloads: tuple[Workload, ...] = WORKLOADS) -> None:
    """The nodes, the Deployments placed by the real scheduler (the other nodes cordoned meanwhile), and
    the budgets with the disruption controller's status."""
    plane.hollow_nodes(all_nodes)
    plane.namespace(NAMESPACE)
    for name, nodes, replicas, load, request in workloads:
        for node in all_nodes:
            cordon(plane, node, node not in nodes)
        deployment = o.deployment(name, NAMESPACE, replicas=replicas, cpu=request, labels={LOAD_LABEL: str(load)})
        plane.admin.create(deployment)
        plane.admin.create(o.pdb(name, NAMESPACE, app=name, max_unavailable=1))
        plane.admin.wait_for(f"{name} running on {nodes}", partial(placed, plane, name, nodes, replicas), timeout=90)
    for node in all_nodes:
        cordon(plane, node, False)
    for name, *_ in workloads:
        plane.admin.wait_for(f"the disruption controller's status of {name}", partial(budget_open, plane, name))


def budget_open(plane: ControlPlane, name: str) -> bool:
    path = f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{name}"
    return bool(plane.admin.get(path).get("status", {}).get("disruptionsAllowed") == 1)


def placed(plane: ControlPlane, workload: str, nodes: Sequence[str], replicas: int) -> bool:
    """Whether the workload's replicas run, spread over ``nodes`` as evenly as they can be."""
    where = [p["spec"]["nodeName"] for p in running(plane).values() if p["metadata"]["labels"]["app"] == workload]
    counts = [where.count(n) for n in nodes]
    return len(where) == replicas and set(where) <= set(nodes) and max(counts) - min(counts) <= 1


def start_prometheus(workdir: Path, usage: LiveUsage) -> ServerProcess:
    """A real Prometheus with the history before the start backfilled, scraping the exporter every
    :data:`SCRAPE` (its labels kept: they are the kubelet's, as kube-prometheus relabels them)."""
    binary = require_binary("prometheus")
    data = workdir / "prom-data"
    data.mkdir(parents=True)
    backfill(usage.history(), data, workdir)
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {SCRAPE}, evaluation_interval: {SCRAPE}}}\n"
        "scrape_configs: [{job_name: cadvisor, honor_labels: true, "
        f"static_configs: [{{targets: ['{usage.target}']}}]}}]\n"
    )

    def argv(port: int) -> list[str]:
        return [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip

    process = ServerProcess("prometheus", workdir, argv, "/-/ready")
    process.start()
    return process


@dataclass(frozen=True)
class Move:
    """One eviction the API server granted, against the truth at that moment."""

    at: float
    pod: str
    workload: str
    node: str
    percent: float  # the node's real CPU when its pod was evicted
    received: bool  # a replacement started on the node within RECEIVED_WITHIN before
    landed: str | None  # the node of the replacement (None: none seen yet)


@dataclass(frozen=True)
class Judge:
    """What the evictions did, judged on the exporter's truth; thresholds in percent of allocatable.
    ``relief``: the level a hot node is relieved down to (the receive threshold where the policy sets one;
    None: the target)."""

    usage: LiveUsage
    cold: float
    target: float
    relief: float | None = None

    @property
    def hot(self) -> set[str]:
        return {n for n in self.usage.nodes if self.usage.percent(n, self.usage.began) > self.target}

    def needed(self, node: str) -> int:
        """The fewest evictions that bring ``node`` under its relief level from the start, largest pods first."""
        began = self.usage.began
        pods = sorted((x for x in self.usage.lives() if x.node == node and x.alive(began)), key=lambda x: -x.cores)
        percent, count = self.usage.percent(node, began), 0
        level = self.target if self.relief is None else self.relief
        while percent > level:
            percent -= 100 * (pods[count].cores + PAUSE_CORES) / self.usage.allocatable[node]
            count += 1
        return count

    def moves(self, evictions: Sequence[AuditEvent]) -> list[Move]:
        lives = self.usage.lives()
        by_name = {life.name: life for life in lives}
        granted = sorted((e for e in evictions if e.code == 201 and not e.dry_run), key=lambda e: e.at)
        replacements: dict[str, list[Life]] = {}
        for life in lives:
            if not life.initial:
                replacements.setdefault(life.workload, []).append(life)
        out = []
        for event in granted:
            assert event.name is not None
            life = by_name[event.name]
            later = replacements.get(life.workload, [])
            landed = later.pop(0).node if later else None
            received = any(
                x.node == life.node and not x.initial and event.at - RECEIVED_WITHIN < x.start <= event.at
                for x in lives
            )
            out.append(Move(event.at, life.name, life.workload, life.node, self.usage.percent(life.node, event.at - 0.5),
                            received, landed))  # fmt: skip
        return out

    def problems(self, moves: Sequence[Move], now: float) -> list[str]:
        out = []
        hot = self.hot
        for node in self.usage.nodes:
            count = sum(1 for m in moves if m.node == node)
            if node in hot and count > self.needed(node) + 1:
                out.append(f"{node}: {count} evictions, {self.needed(node)} bring it under its relief level (at most "
                           f"{self.needed(node) + 1} allowed)")  # fmt: skip
        for m in moves:
            if m.percent <= self.target and m.received:
                out.append(f"{m.pod} evicted from {m.node}, which received load in the last 10 minutes and ran at "
                           f"{m.percent:.0f} % real CPU (target {self.target:g} %)")  # fmt: skip
            elif m.percent <= self.target and m.node not in hot:
                out.append(f"{m.pod} evicted from {m.node} at {m.percent:.0f} % real CPU, never hot")
            if m.landed == m.node:
                out.append(f"{m.pod}: its replacement landed back on {m.node}")
        for node in sorted(hot):
            if (percent := self.usage.percent(node, now)) > self.target:
                out.append(f"{node} still at {percent:.0f} % real CPU at the end, over the target {self.target:g} %")
        return out

    def summary(self, moves: Sequence[Move], now: float) -> str:
        began = self.usage.began
        lines = [
            f"+{(m.at - began) / 60:4.1f} min  {m.pod} from {m.node} ({m.percent:.0f} % real"
            f"{', received load' if m.received else ''}) -> {m.landed or '?'}"
            for m in moves
        ]
        per_node = {n: sum(1 for m in moves if m.node == n) for n in self.usage.nodes}
        lines.append("evictions per node: " + ", ".join(f"{n} {c}" for n, c in per_node.items()))
        lines.append("needed: " + ", ".join(f"{n} {self.needed(n)}" for n in sorted(self.hot)))
        percents = (
            f"{n} {self.usage.percent(n, began):.0f}->{self.usage.percent(n, now):.0f}" for n in self.usage.nodes
        )
        lines.append("real CPU % start -> end: " + ", ".join(percents))
        return "\n".join(lines)


def lowest_available(usage: LiveUsage, workload: str, step: float = 1.0) -> int:
    """The fewest running pods of ``workload`` at any moment since the start (each second)."""
    lives = [x for x in usage.lives() if x.workload == workload]
    ends = [x.end for x in lives if x.end != math.inf]
    last = max([usage.began, *ends])
    moments = [usage.began + i * step for i in range(int((last - usage.began) / step) + 1)]
    moments += [e + 0.01 for e in ends]
    return min(sum(1 for x in lives if x.alive(t)) for t in moments)
