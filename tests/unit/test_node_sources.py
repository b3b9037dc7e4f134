"""The node sources in the snapshot and the policy: per node, the first source that knows the node; the sum
of its pods last, and only when every running pod on it has usage; a node no source knows is unknown."""

from __future__ import annotations

import pytest

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import UsageReport
from rebalancer.policy import parse_policy
from tests.builders import node, pod, snapshot

SOURCES = ("cadvisor", "nodeExporter", "podSum")


def report(**fields: object) -> UsageReport:
    base: dict[str, object] = {"sources": SOURCES, "node_from_pods": True, "fresh_nodes": frozenset({"a", "b", "c"})}
    return UsageReport(**(base | fields))  # type: ignore[arg-type]


def test_each_node_from_the_first_source_that_knows_it() -> None:
    usage = report(
        node_cpu_m={"a": 3000, "b": 1000},
        node_source={"a": "cadvisor", "b": "nodeExporter"},
        pod_cpu_m={("default", "c1"): 400, ("default", "c2"): 200, ("default", "a1"): 9000},
    )
    snap = snapshot([node("a"), node("b"), node("c")], [pod("a1", "a"), pod("c1", "c"), pod("c2", "c")], usage)

    loads = {name: (load.usage_m, load.usage_source) for name, load in snap.load.items()}
    # a: its node reading, not its pods' (9000); c: no node source knows it, all its pods have usage
    assert loads == {"a": (3000, "cadvisor"), "b": (1000, "nodeExporter"), "c": (600, "podSum")}


def test_a_node_with_a_pod_of_unknown_usage_is_never_read_low_from_its_pods() -> None:
    usage = report(
        node_problems={"c": "cadvisor: newest sample 400s old > maxDataAge 5m"},
        pod_cpu_m={("default", "c1"): 400},  # c2 runs and has no usage
    )
    snap = snapshot([node("c")], [pod("c1", "c"), pod("c2", "c")], usage)

    load = snap.load["c"]
    assert load.usage_m is None and load.usage_source is None
    assert load.unknown_reason == (
        "cadvisor: newest sample 400s old > maxDataAge 5m; "
        "podSum: usage of 1 running pod(s) unknown, so the node sum is unknown"
    )


def test_a_node_whose_pods_are_stale_is_unknown_not_empty() -> None:
    usage = report(fresh_nodes=frozenset(), pod_cpu_m={})  # an empty node: its sum would be 0
    load = snapshot([node("c")], [], usage).load["c"]
    assert load.usage_m is None
    assert load.unknown_reason == (
        "no usage data for this node from cadvisor, nodeExporter; "
        "podSum: no freshness sample for this node: its pods' data may be old or missing"
    )


@pytest.mark.parametrize(
    "stale",
    [
        {"fresh_nodes": frozenset({"b"})},  # no sample of a's pods within Prometheus' lookback
        {"pod_sum_problems": {"a": "newest sample 420s old > maxDataAge 5m"}},
    ],
    ids=["no-freshness-sample", "older-than-maxDataAge"],
)
def test_the_pods_of_a_node_whose_pod_series_are_stale_have_unknown_usage(stale: dict[str, object]) -> None:
    """a's kubelet stopped answering its cAdvisor scrape while node-exporter still reads a hot: the pods' window
    statistic still comes from their old samples, so it is unknown, never a basis for choosing a pod."""
    usage = report(
        node_cpu_m={"a": 9000, "b": 1000},
        node_source={"a": "nodeExporter", "b": "nodeExporter"},
        pod_cpu_m={("default", "a1"): 4000, ("default", "b1"): 500},
        **stale,
    )
    a1, b1 = pod("a1", "a"), pod("b1", "b")
    snap = snapshot([node("a"), node("b")], [a1, b1], usage)

    assert snap.load["a"].usage_m == 9000  # the node's own reading is fresh
    assert snap.usage_of(a1) is None
    assert snap.usage_of(b1) == 500


def test_without_pod_sum_a_node_no_source_knows_is_unknown() -> None:
    usage = UsageReport(sources=("cadvisor", "nodeExporter"), pod_cpu_m={("default", "c1"): 400})
    load = snapshot([node("c")], [pod("c1", "c")], usage).load["c"]
    assert load.usage_m is None
    assert load.unknown_reason == "no usage data for this node from cadvisor, nodeExporter"


POLICY = """apiVersion: rebalancer.io/v1alpha1
kind: RebalancerPolicy
prometheus:
{prometheus}
strategies:
  - kind: LowNodeUtilization
    thresholds: {{cpu: 20}}
    targetThresholds: {{cpu: 70}}
"""


def sources(prometheus: str) -> list[tuple[str, str]]:
    settings = parse_policy(POLICY.format(prometheus=prometheus)).prometheus
    return [(s.name, s.label) for s in settings.resolved_node_sources()]


def test_the_default_order_and_the_kept_meaning_of_a_policy_that_sets_its_node_query() -> None:
    assert sources("  url: http://p:9090") == [("cadvisor", "node"), ("nodeExporter", "node"), ("podSum", "node")]
    custom = "  nodeLabel: instance\n  queries: {nodeCpu: 'sum by ({node_label}) (x)'}"
    assert sources(custom) == [("queries.nodeCpu", "instance")]  # as before: that query alone
    assert sources("  queries: {nodeCpu: null}") == [("podSum", "node")]
    assert sources("  nodeSources: [nodeExporter, podSum]") == [("nodeExporter", "node"), ("podSum", "node")]


@pytest.mark.parametrize(
    ("prometheus", "message"),
    [
        ("  nodeSources: [podSum, cadvisor]", "prometheus.nodeSources: podSum can only be the last source"),
        ("  nodeSources: [cadvisor, cadvisor]", "prometheus.nodeSources: each source at most once"),
        ("  nodeSources: []", "prometheus.nodeSources: name at least one node source"),
        ("  nodeSources: [kubelet]", "prometheus.nodeSources.0"),
        (
            "  nodeSources: [cadvisor]\n  queries: {nodeCpu: null}",
            "prometheus.nodeSources: cadvisor reads queries.nodeCpu, which is null",
        ),
    ],
)
def test_a_bad_order_names_the_field(prometheus: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_policy(POLICY.format(prometheus=prometheus))
