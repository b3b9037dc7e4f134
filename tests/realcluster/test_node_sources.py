"""The shipped default policy on the two common monitoring shapes, scraped for real.

A real Prometheus scrapes live test exporters (the kubelet's cAdvisor endpoint of each node, node_exporter,
kube-state-metrics: tests/adapters/monitoring_shapes.py) with kube-prometheus-stack's default relabelling,
which drops cAdvisor's root cgroup, or with a plain scrape that keeps it. ``rebalancer plan`` runs on
config/low-node-utilization.yaml as shipped, only the Prometheus URL set and the window shortened to what
seconds of scraping hold (the node sources and their queries are the file's). cold-2 runs no node_exporter:
under kube-prometheus-stack it is read from the sum of its pods. A third Prometheus scrapes the kubelet's
``/metrics/resource`` too (kube-prometheus-stack's ``kubelet.serviceMonitor.resource: true``): the user
guide's filter for that second scrape of the containers is checked there.
"""

from __future__ import annotations

import functools
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.app.cli import main
from rebalancer.domain.settings.shared import DEFAULT_POD_CPU_QUERY, DEFAULT_POD_MEMORY_QUERY
from rebalancer.policy import load_policy
from tests.adapters.monitoring_shapes import (
    LiveCluster,
    LiveExporter,
    LiveNode,
    LivePod,
    kube_prometheus_stack,
    plain_cadvisor,
)
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made

pytestmark = pytest.mark.prometheus

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "low-node-utilization.yaml"
RS = "shop-5f7d8"
CLUSTER = LiveCluster(
    nodes=(
        LiveNode("hot-1", "10.0.0.1"),
        LiveNode("cold-1", "10.0.0.2"),
        LiveNode("cold-2", "10.0.0.3", node_exporter=False),
    ),
    pods=(
        LivePod("shop", "api-0", "hot-1", 1.5),
        LivePod("shop", "api-1", "hot-1", 0.9),
        LivePod("shop", "web-0", "hot-1", 0.6),
        LivePod("shop", "web-1", "cold-1", 0.1),
        LivePod("shop", "web-2", "cold-2", 0.1),
    ),
)
SCRAPED_SECONDS = 12  # the policy below needs rateWindow 4s + step 1s of data; a margin for the first scrapes
SHORT = {"window": "8s", "step": "1s", "rateWindow": "4s"}


@pytest.fixture(scope="module")
def exporter() -> Iterator[LiveExporter]:
    with LiveExporter(CLUSTER) as live:
        yield live


def scraped(start: StartPrometheus, exporter: LiveExporter, shape: Any) -> PrometheusServer:
    prometheus = start((), scrape_configs=shape(CLUSTER, exporter.address), scrape_interval="1s")
    time.sleep(SCRAPED_SECONDS)
    deadline = time.time() + SCRAPED_SECONDS
    while time.time() < deadline:  # every target scraped for SCRAPED_SECONDS
        found = prometheus.query(f"min(count_over_time(up[{SCRAPED_SECONDS}s]))", time.time())
        assert isinstance(found, dict)
        if found["result"] and float(found["result"][0]["value"][1]) >= SCRAPED_SECONDS - 1:
            return prometheus
        time.sleep(0.5)
    raise AssertionError(
        f"Prometheus did not scrape every target for {SCRAPED_SECONDS}s: {prometheus.process.log_tail()}"
    )


@pytest.fixture(scope="module")
def kps(start_prometheus: StartPrometheus, exporter: LiveExporter) -> PrometheusServer:
    return scraped(start_prometheus, exporter, kube_prometheus_stack)


@pytest.fixture(scope="module")
def plain(start_prometheus: StartPrometheus, exporter: LiveExporter) -> PrometheusServer:
    return scraped(start_prometheus, exporter, plain_cadvisor)


@pytest.fixture(scope="module")
def kps_resource(start_prometheus: StartPrometheus, exporter: LiveExporter) -> PrometheusServer:
    return scraped(start_prometheus, exporter, functools.partial(kube_prometheus_stack, resource=True))


def build_cluster(plane: ControlPlane) -> None:
    for node in CLUSTER.nodes:
        api_made.add(plane, b.node(node.name, cpu="4", memory="16Gi"))
    api_made.add(
        plane, b.deployment("shop", "shop", replicas=5), b.replica_set(RS, "shop", deployment="shop", replicas=5)
    )
    for pod in CLUSTER.all_pods():
        daemon = pod.namespace == "monitoring"
        owners = [b.owner("DaemonSet", "node-exporter")] if daemon else [b.owner("ReplicaSet", RS)]
        api_made.add(
            plane,
            b.pod(pod.name, namespace=pod.namespace, node=pod.node, owners=owners,
                  labels={"app": "node-exporter" if daemon else "shop"},
                  containers=[b.container(cpu="200m", memory="256Mi")])
        )  # fmt: skip


def shipped_policy(path: Path, url: str, **prometheus: Any) -> Path:
    """config/low-node-utilization.yaml with the URL set and the window shortened, nothing else changed
    (but the ``prometheus`` settings given)."""
    document = yaml.safe_load(SHIPPED.read_text())
    document["prometheus"] |= {"url": url, **SHORT, **prometheus}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def plan_json(api_kubeconfig: Path, policy: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["plan", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--output", "json"])
    return code, json.loads(capsys.readouterr().out)


def nodes_of(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in record["strategies"][0]["nodes"]}


# -- the relabelling is real -----------------------------------------------------------------------


def test_kube_prometheus_stack_drops_the_root_cgroup_the_kubelet_serves(
    kps: PrometheusServer, exporter: LiveExporter
) -> None:
    with urllib.request.urlopen(f"http://{exporter.address}/kubelet/hot-1/metrics/cadvisor", timeout=5) as answer:
        assert 'container_cpu_usage_seconds_total{id="/"}' in answer.read().decode()
    root = kps.query('count(container_cpu_usage_seconds_total{id="/"})', time.time())
    pods = kps.query('count(container_cpu_usage_seconds_total{pod!=""})', time.time())
    assert isinstance(root, dict) and isinstance(pods, dict)
    assert root["result"] == []  # dropped at ingestion
    assert pods["result"] and int(pods["result"][0]["value"][1]) > 0
    exported = kps.query('node_cpu_seconds_total{mode="idle", cpu="0"}', time.time())
    assert isinstance(exported, dict)
    # node_exporter's instance is its pod's ip:port: the node comes from kube_pod_info
    assert {r["metric"]["instance"] for r in exported["result"]} == {"10.0.0.1:9100", "10.0.0.2:9100"}
    assert all("node" not in r["metric"] for r in exported["result"])


# -- the shipped policy plans on both shapes -------------------------------------------------------


def test_shipped_policy_knows_every_node_under_kube_prometheus_stack(
    api_cluster: ControlPlane, api_kubeconfig: Path, kps: PrometheusServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    build_cluster(api_cluster)

    code, record = plan_json(api_kubeconfig, shipped_policy(tmp_path / "policy.yaml", kps.url), capsys)

    assert code == 0, record["blocked"]
    nodes = nodes_of(record)
    assert {name: n["usageSource"] for name, n in nodes.items()} == {
        "hot-1": "nodeExporter",
        "cold-1": "nodeExporter",
        "cold-2": "podSum",  # no node_exporter there: the sum of its pods
    }
    for name in ("hot-1", "cold-1"):
        assert nodes[name]["usageM"] == pytest.approx(CLUSTER.node_cores(name) * 1000, abs=20), name
    assert nodes["cold-2"]["usageM"] == pytest.approx(CLUSTER.pod_sum_cores("cold-2") * 1000, abs=10)
    assert nodes["hot-1"]["nodeClass"] == "hot"
    assert record["evictions"], "the hot node is relieved"


def test_shipped_policy_reads_the_root_cgroup_where_it_is_kept(
    api_cluster: ControlPlane, api_kubeconfig: Path, plain: PrometheusServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    build_cluster(api_cluster)

    code, record = plan_json(api_kubeconfig, shipped_policy(tmp_path / "policy.yaml", plain.url), capsys)

    assert code == 0, record["blocked"]
    nodes = nodes_of(record)
    assert {n["usageSource"] for n in nodes.values()} == {"cadvisor"}
    for name, node in nodes.items():
        assert node["usageM"] == pytest.approx(CLUSTER.node_cores(name) * 1000, abs=20), name


def test_the_table_names_each_nodes_source(
    api_cluster: ControlPlane, api_kubeconfig: Path, kps: PrometheusServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    build_cluster(api_cluster)
    policy = shipped_policy(tmp_path / "policy.yaml", kps.url)

    assert main(["plan", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig)]) == 0

    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "SOURCE" in line.split())
    end = next((i for i in range(header, len(lines)) if not lines[i].strip()), len(lines))  # the nodes' table
    rows = {line.split()[0]: line.split() for line in lines[header:end] if line.startswith(("hot-1", "cold-"))}
    assert "nodeExporter" in rows["hot-1"] and "podSum" in rows["cold-2"]


def test_memory_falls_back_with_the_cpu(kps: PrometheusServer, tmp_path: Path) -> None:
    settings = load_policy(shipped_policy(tmp_path / "policy.yaml", kps.url)).prometheus
    with PrometheusUsageSource(settings) as source:
        report = source.read(time.time(), memory=True, pod_memory=False)

    assert report.node_memory is not None
    for name in ("hot-1", "cold-1"):  # node_exporter's MemTotal - MemAvailable
        assert report.node_memory[name] == CLUSTER.node_memory(name)
    pods_only = sum(p.memory for p in CLUSTER.pods_on("cold-2"))
    assert report.node_memory["cold-2"] == pods_only  # its pods' working set


@pytest.mark.parametrize("shape", ["kps", "plain"])
def test_the_efficiency_reference_reads_both_shapes(shape: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    prometheus: PrometheusServer = request.getfixturevalue(shape)
    policy = load_policy(shipped_policy(tmp_path / "policy.yaml", prometheus.url))
    definition = policy.efficiency.reference.definition("node", "node", memory=True)
    assert definition is not None
    now = time.time()

    for data in definition.data_queries:  # its inputs exist: an empty reference would mean no hot node
        found = prometheus.query(data, now)
        assert isinstance(found, dict) and found["result"], data
    # its rate()s over what seconds of scraping hold (over 5m, 20 s of data read a fifteenth of the rate)
    hot = prometheus.query(definition.query.replace("[5m]", f"[{SHORT['window']}]"), now)
    assert isinstance(hot, dict)
    assert {r["metric"]["node"] for r in hot["result"]} == {"hot-1"}  # 3.36 of 4 cores: above 80%


# -- a second scrape of the same containers ---------------------------------------------------------


def cadvisor_only(query: str) -> str:
    """The user guide's filter for a second scrape of the containers: the cAdvisor scrape's label added to the
    pod query's selector, the rest of the shipped query as it is."""
    filtered = query.replace('container!="POD"', 'container!="POD", metrics_path="/metrics/cadvisor"')
    assert filtered != query
    return filtered


def filtered_policy(path: Path, url: str) -> Path:
    queries = {"podCpu": cadvisor_only(DEFAULT_POD_CPU_QUERY), "podMemory": cadvisor_only(DEFAULT_POD_MEMORY_QUERY)}
    return shipped_policy(path, url, queries=queries)


def test_the_resource_endpoint_doubles_pods_until_the_documented_filter_keeps_one_scrape(
    kps_resource: PrometheusServer, tmp_path: Path
) -> None:
    """Under kube-prometheus-stack with ``kubelet.serviceMonitor.resource: true`` the shipped queries read
    every pod twice; with ``metrics_path="/metrics/cadvisor"`` in podCpu and podMemory, as the user guide
    says, once. Tolerance: 20 m a pod, the scrape's timing over a 4 s rate."""
    series = kps_resource.query(
        "count by (job, metrics_path) (container_cpu_usage_seconds_total{pod='api-0'})", time.time()
    )
    assert isinstance(series, dict)
    scrapes = {(r["metric"]["job"], r["metric"]["metrics_path"]) for r in series["result"]}
    assert scrapes == {("kubelet", "/metrics/cadvisor"), ("kubelet", "/metrics/resource")}, "job tells them not apart"
    shipped = shipped_policy(tmp_path / "shipped.yaml", kps_resource.url)
    filtered = filtered_policy(tmp_path / "filtered.yaml", kps_resource.url)

    for path, times in ((shipped, 2), (filtered, 1)):
        with PrometheusUsageSource(load_policy(path).prometheus) as source:
            report = source.read(time.time(), memory=True)
        for pod in CLUSTER.all_pods():
            key = (pod.namespace, pod.name)
            assert report.pod_cpu_m[key] == pytest.approx(times * pod.cores * 1000, abs=20), (path.name, key)
            assert report.pod_memory[key] == times * pod.memory, (path.name, key)
        for name in ("hot-1", "cold-1"):  # node_exporter's reading is not the containers'
            assert report.node_cpu_m[name] == pytest.approx(CLUSTER.node_cores(name) * 1000, abs=20), name


def test_with_the_filter_the_sum_of_pods_reads_a_node_once(
    api_cluster: ControlPlane, api_kubeconfig: Path, kps_resource: PrometheusServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """cold-2 (no node_exporter) is read as the sum of its pods: twice its usage with the shipped queries
    under the second scrape, once with the filter. Tolerance: 20 m, as above."""
    build_cluster(api_cluster)
    for path, times in ((shipped_policy, 2), (filtered_policy, 1)):
        code, record = plan_json(api_kubeconfig, path(tmp_path / "policy.yaml", kps_resource.url), capsys)
        assert code == 0, record["blocked"]
        cold = nodes_of(record)["cold-2"]
        assert cold["usageSource"] == "podSum"
        assert cold["usageM"] == pytest.approx(times * CLUSTER.pod_sum_cores("cold-2") * 1000, abs=20), path
