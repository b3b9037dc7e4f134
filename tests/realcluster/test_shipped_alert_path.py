"""Every shipped policy's alert path against a real Prometheus with kube-prometheus-shaped series.

kube-prometheus names the node of cAdvisor's series (container and root cgroup, scraped through the
kubelet) in ``node``, their ``instance`` being the kubelet's ip:port, and relabels node_exporter's
``instance`` to the node name. An alert-driven cycle reads only the alerted nodes' pods: each shipped
policy (config/*.yaml with a LowNodeUtilization strategy, and the chart's default policy) must find those
pods' usage through its pod filter, read the alerted node's usage, judge it hot and plan evictions from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.app import root as app
from rebalancer.app.runtime import Focus
from rebalancer.planning.plan import NodeClass
from rebalancer.policy import Policy, parse_policy
from tests.adapters.node_exporter import node_exporter_series
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster import shop
from tests.service.scenario import END, HISTORY, LOADS

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
HOT = "hot-1"
HOT_PODS = {name for (namespace, name), (node, _) in LOADS.items() if node == HOT and namespace == "shop"}


def _lnu(document: dict[str, Any]) -> bool:
    return any(s.get("kind") == "LowNodeUtilization" for s in document.get("strategies", []))


def shipped_policies() -> list[Any]:
    found = []
    for path in sorted((ROOT / "config").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if _lnu(document):
            found.append(pytest.param(document, id=path.name))
    chart = yaml.safe_load((ROOT / "charts" / "rebalancer" / "values.yaml").read_text())["policy"]
    found.append(pytest.param(chart, id="chart-values"))
    return found


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus([*HISTORY.series(), *node_exporter_series(HISTORY)])


def on(url: str, document: dict[str, Any]) -> Policy:
    """The shipped policy as it is, pointed at the test Prometheus (and nothing else changed)."""
    shipped = {**document, "prometheus": {**document.get("prometheus", {}), "url": url}}
    return parse_policy(yaml.safe_dump(shipped))


def test_every_shipped_policy_is_covered() -> None:
    names = {p.id for p in shipped_policies()}
    assert {"low-node-utilization.yaml", "node-exporter.yaml", "pod-sum.yaml", "chart-values"} <= names


@pytest.mark.parametrize("document", shipped_policies())
def test_an_alerted_node_is_read_judged_hot_and_relieved(
    document: dict[str, Any], api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer
) -> None:
    shop.build(api_cluster)
    policy = on(prometheus.url, document)

    runtime = app.connect_runtime(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: END)
    outcome = app.plan_live(runtime, Focus(frozenset({HOT})))

    assert outcome.plan.blocked is None, outcome.plan.blocked
    assert outcome.snapshot.load[HOT].usage_m is not None, outcome.snapshot.load[HOT].unknown_reason
    assert {name for _, name in outcome.snapshot.pod_usage} >= HOT_PODS  # the focused pod read found them
    first = outcome.plan.results[0]  # later strategies see the node as the first one left it
    assert {d.node: d.node_class for d in first.node_decisions}[HOT] is NodeClass.HOT
    assert outcome.plan.evictions
    assert {e.node for e in outcome.plan.evictions} == {HOT}
    assert {e.name for e in outcome.plan.evictions} <= HOT_PODS
