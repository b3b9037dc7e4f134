"""The efficiency rates end to end: two serve cycles against the test API server and a real Prometheus
(cAdvisor history and kube-state-metrics' allocatable CPU), the records in their ConfigMap, the rates and
reasons on /metrics, and `rebalancer report` reading them back.

The cluster, in two pools (node label ``pool``):

* general: hot-1 (api-0 evicted and its load gone: cools), hot-3 (cart-0 evicted, its replacement cart-9
  lands back on hot-3 a minute later: lands back; at the second cycle the bounce-back guard passes cart-9
  over), cold-1;
* batch: hot-2 (only a DaemonSet pod: nothing to evict), cold-2 (hot for 20 minutes three hours before
  the first cycle, when rebalancer did not run: the reference saw it, rebalancer missed it).

So over the period: hot by the reference 4, found 3 (discovery 3/4), acted on 2 (eviction 2/3), cooled 1
of 2 judged (effective 1/2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app import cli
from rebalancer.app.efficiency import RECORDS_KEY
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import CycleObservers, _ClusterCache, _Cycles, _KnownNodes
from rebalancer.app.serve_efficiency import EfficiencyPublisher
from rebalancer.policy import load_policy
from rebalancer.records import EfficiencyState
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Trigger
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, Rate, constant, spike
from tests.adapters.prom_fixture import PrometheusServer, Series, StartPrometheus
from tests.fake_clock import FakeClock
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

END = 1_700_000_000.0
T1 = END - 1800  # the first cycle; the second runs at END
GONE = T1 + 30  # the evicted pods' load stops
BACK = T1 + 60  # cart-9, cart-0's replacement, starts on hot-3
START = END - 4 * 3600
SPIKE = (END - 3 * 3600 - 1200, END - 3 * 3600)
CORES = {"hot-1": 4, "hot-2": 4, "hot-3": 4, "cold-1": 8, "cold-2": 8}
POOL = {"hot-1": "general", "hot-3": "general", "cold-1": "general", "hot-2": "batch", "cold-2": "batch"}


def until(t: float, cores: float) -> Rate:
    return lambda at: cores if at <= t else 0.0


def after(t: float, cores: float) -> Rate:
    return lambda at: cores if at > t else 0.0


# (namespace, name) -> (node, load, deployment or None for the DaemonSet's pods)
PODS: dict[tuple[str, str], tuple[str, Rate, str | None]] = {
    ("shop", "api-0"): ("hot-1", until(GONE, 1.6), "api"),
    ("shop", "web-0"): ("hot-1", constant(0.4), "web"),
    ("shop", "web-5"): ("hot-1", constant(0.4), "web"),
    ("monitoring", "exporter-hot-1"): ("hot-1", constant(0.8), None),
    ("monitoring", "exporter-hot-2"): ("hot-2", constant(3.2), None),
    ("monitoring", "exporter-hot-3"): ("hot-3", constant(2.0), None),
    ("shop", "cart-0"): ("hot-3", until(GONE, 1.2), "cart"),
    ("shop", "cart-9"): ("hot-3", after(BACK, 1.2), "cart"),
    ("shop", "web-1"): ("cold-1", constant(0.1), "web"),
    ("shop", "web-2"): ("cold-2", constant(0.1), "web"),
    ("batch", "report-1"): ("cold-2", spike(0.0, 6.5, *SPIKE), None),  # a finished job: gone from the API
}
IN_API_AT_T1 = {key for key in PODS if key[1] not in ("cart-9", "report-1")}


def history() -> list[Series]:
    cadvisor = CadvisorHistory(
        nodes=tuple(NodeSpec(n, 0.3) for n in CORES),
        pods=tuple(PodSpec(ns, name, node, (Container("app", load),)) for (ns, name), (node, load, _) in PODS.items()),
        start=START,
        end=END,
    )
    stamps = [START + 30 * i for i in range(int((END - START) // 30) + 1)]
    allocatable = [
        Series(
            "kube_node_status_allocatable",
            {"job": "kube-state-metrics", "node": node, "resource": "cpu", "unit": "core"},
            [(t, float(cores)) for t in stamps],
            kind="gauge",
        )
        for node, cores in CORES.items()
    ]
    return cadvisor.series() + allocatable


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(history())


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_pod(server: TestApiServer, namespace: str, name: str, created: str = b.CREATED) -> None:
    node, _, deployment = PODS[(namespace, name)]
    if deployment is None:
        owners, labels = [b.owner("DaemonSet", "exporter")], {"app": "exporter"}
    else:
        owners, labels = [b.owner("ReplicaSet", f"{deployment}-5f7d8")], {"app": deployment}
    server.add(
        b.pod(name, namespace=namespace, node=node, owners=owners, labels=labels, created=created,
              containers=[b.container(cpu="200m", memory="256Mi")])
    )  # fmt: skip


def build_cluster(server: TestApiServer) -> None:
    for node, cores in CORES.items():
        server.add(b.node(node, cpu=str(cores), memory="32Gi", labels={"pool": POOL[node]}))
    for deployment in ("api", "web", "cart"):
        server.add(
            b.deployment(deployment, "shop", replicas=3),
            b.replica_set(f"{deployment}-5f7d8", "shop", deployment=deployment, replicas=3),
        )
    for namespace, name in sorted(IN_API_AT_T1):
        add_pod(server, namespace, name)
    server.disruption.sync_all()


def write_policy(path: Path, prometheus_url: str, extra: str = "") -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "pools: {label: pool}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        # predictPlacement off: the story places cart-9 back on hot-3 by hand; by the scheduler model both
        # replacements would tie between cold-1 and cold-2 (pool batch), so prediction would evict neither
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 70},"
        " predictPlacement: false}\n"
        "state: {namespace: rebalancer}\n"
        "service: {watchCache: {enabled: false}}\n" + extra
    )
    return path


class Serve:
    """serve's cycle object and metrics, driven by hand at chosen times (no scheduler, no HTTP)."""

    def __init__(self, kubeconfig: Path, policy: Path, dry_run: DryRun = DryRun.OFF) -> None:
        self.clock = FakeClock(T1)
        self.policy = load_policy(policy)
        self.metrics = Metrics()
        api = connect(kubeconfig=str(kubeconfig))
        self.cache = _ClusterCache(api)
        known = _KnownNodes(KubeSource(api, frozenset()), self.cache, self.clock)
        publisher = EfficiencyPublisher(self.metrics)
        runtime = Runtime(self.policy, api, self.clock, dry_run, requester="rebalancer/test")
        self.cycles = _Cycles(
            runtime, known, self.cache, CycleObservers(efficiency=publisher, on_guard=self.metrics.observe_guard)
        )

    def cycle(self, at: float) -> CycleResult:
        self.clock.now = at
        return self.cycles(self.policy, Trigger("schedule", (0,)))

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        body, _ = self.metrics.exposition()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }

    def close(self) -> None:
        self.cycles.close()
        self.cache.stop()


@pytest.fixture
def serve(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> Iterator[Serve]:
    build_cluster(kube_server)
    one = Serve(kubeconfig, write_policy(tmp_path / "policy.yaml", prometheus.url))
    yield one
    one.close()


def evicted(result: CycleResult) -> set[str]:
    assert result.report is not None
    return {r.eviction.name for r in result.report.results if r.outcome is Outcome.EVICTED}


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def two_cycles(serve: Serve, server: TestApiServer) -> tuple[CycleResult, CycleResult]:
    first = serve.cycle(T1)
    assert evicted(first) == {"api-0", "cart-0"}
    add_pod(server, "shop", "cart-9", created=iso(BACK))  # the ReplicaSet's new pod, placed back on hot-3
    second = serve.cycle(END)
    return first, second


def test_rates_and_reasons_on_metrics_after_two_cycles(serve: Serve, kube_server: TestApiServer) -> None:
    _, second = two_cycles(serve, kube_server)

    assert evicted(second) == set()  # cart-9 just moved: the guard passes it over
    (lnu,) = second.plan.results
    assert lnu.unrelieved == {"hot-2": "no-evictable-pod", "hot-3": "recently-moved"}
    cart_9 = next(d for d in lnu.pod_decisions if d.name == "cart-9")
    assert not cart_9.chosen and "moved" in cart_9.reason
    m = serve.samples()
    ratio = "rebalancer_efficiency_ratio"
    assert sample(m, ratio, pool="*", rate="discovery") == pytest.approx(3 / 4)
    assert sample(m, ratio, pool="*", rate="eviction") == pytest.approx(2 / 3)
    assert sample(m, ratio, pool="*", rate="effective") == pytest.approx(1 / 2)
    assert sample(m, ratio, pool="general", rate="discovery") == pytest.approx(1.0)
    assert sample(m, ratio, pool="batch", rate="discovery") == pytest.approx(1 / 2)
    assert sample(m, ratio, pool="batch", rate="eviction") == 0.0
    assert sample(m, ratio, pool="batch", rate="effective") is None  # nothing evicted there: no figure, not 0
    hot = "rebalancer_efficiency_hot_nodes"
    assert sample(m, hot, pool="*", kind="missed") == 1.0
    assert sample(m, hot, pool="batch", kind="reference") == 2.0
    unacted = "rebalancer_efficiency_unacted_nodes"
    assert sample(m, unacted, pool="batch", reason="no-evictable-pod") == 1.0
    reliefs = "rebalancer_efficiency_reliefs"
    assert sample(m, reliefs, pool="general", result="cooled") == 1.0
    assert sample(m, reliefs, pool="general", result="landed-back") == 1.0
    # the follow-ups were judged once, by the second cycle, on the usage at their deadline
    assert sample(m, "rebalancer_followups_total", pool="general", result="cooled") == 1.0
    assert sample(m, "rebalancer_followups_total", pool="general", result="landed-back") == 1.0
    assert sample(m, "rebalancer_efficiency_evictions", pool="general") == 2.0
    assert sample(m, "rebalancer_efficiency_bounce_backs", pool="general") == 0.0
    # cart-9 was seen as cart-0's replacement, back on hot-3 (api-0's replacement never came: not counted)
    landings = "rebalancer_efficiency_landings"
    assert sample(m, landings, pool="general", kind="seen") == 1.0
    assert sample(m, landings, pool="general", kind="landed_back") == 1.0
    assert sample(m, ratio, pool="general", rate="landed_back") == 1.0
    assert sample(m, ratio, pool="general", rate="landing_hit") is None  # no prediction: no hit rate, never 0
    # neither relief went below the cold threshold, and no node was relieved twice
    assert sample(m, ratio, pool="general", rate="overshoot") == 0.0
    assert sample(m, "rebalancer_efficiency_overshoot_reliefs", pool="general", kind="below_cold") == 0.0
    assert sample(m, "rebalancer_efficiency_overshoot_reliefs", pool="general", kind="repeat") == 0.0
    avoided = "rebalancer_efficiency_bounce_backs_avoided"
    assert sample(m, avoided, pool="general", by="memory") == 1.0  # cart-9, kept on hot-3 by the guard
    assert sample(m, avoided, pool="general", by="prediction") == 0.0


def test_records_survive_in_the_configmap_with_each_result_explained(serve: Serve, kube_server: TestApiServer) -> None:
    two_cycles(serve, kube_server)

    stored = kube_server.store.get("configmaps", "rebalancer-efficiency", "rebalancer")
    assert stored is not None
    state = EfficiencyState.from_json(stored["data"][RECORDS_KEY], END)
    results = {r.node: r for r in state.reliefs}
    assert set(results) == {"hot-1", "hot-3"}
    assert results["hot-1"].result == "cooled"
    assert results["hot-1"].usage_pct_after is not None and results["hot-1"].usage_pct_after < 70
    assert results["hot-3"].result == "landed-back"
    assert results["hot-3"].detail is not None and "shop/cart-9" in results["hot-3"].detail
    (cart_0,) = results["hot-3"].evicted
    assert (cart_0.landed, cart_0.replacement) == ("hot-3", "shop/cart-9")
    (api_0,) = results["hot-1"].evicted
    assert (api_0.landed, api_0.replacement) == (None, None)  # no pod of api came after it
    # judged late by the second cycle, on the usage at the window's close (not on the usage at END)
    assert results["hot-1"].judged_at == results["hot-3"].judged_at == T1 + 15 * 60


def test_bounce_back_counted_when_the_guard_is_off(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    policy = write_policy(tmp_path / "policy.yaml", prometheus.url, "efficiency: {bounceBackGuard: false}\n")
    serve = Serve(kubeconfig, policy)
    try:
        _, second = two_cycles(serve, kube_server)
        assert evicted(second) == {"cart-9"}  # moved twice in half an hour: what the guard prevents
        m = serve.samples()
        assert sample(m, "rebalancer_efficiency_bounce_backs", pool="general") == 1.0
        assert sample(m, "rebalancer_bounce_backs_total", pool="general") == 1.0
    finally:
        serve.close()


def report(capsys: pytest.CaptureFixture[str], policy: Path, kubeconfig: Path, *extra: str) -> str:
    args = ["report", "--policy", str(policy), "--kubeconfig", str(kubeconfig), "--until", iso(END), "--period", "6h"]
    assert cli.main([*args, *extra]) == 0
    return capsys.readouterr().out


def test_report_reads_the_records_back_with_reasons_and_plots(
    serve: Serve,
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    two_cycles(serve, kube_server)
    capsys.readouterr()
    policy = write_policy(tmp_path / "policy.yaml", prometheus.url)

    doc = json.loads(report(capsys, policy, kubeconfig, "--output", "json"))
    cluster = next(p for p in doc["pools"] if p["pool"] == "*")
    assert (cluster["discovery"], cluster["eviction"], cluster["effective"]) == pytest.approx((0.75, 2 / 3, 0.5))
    assert cluster["missedNodes"] == ["cold-2"]
    assert cluster["unactedNodes"] == {"hot-2": "no-evictable-pod"}
    assert cluster["uncooled"] == {"landed-back": 1}
    assert doc["referenceProblem"] is None
    assert len(doc["timeline"]) == 6  # 6 h in 1 h buckets
    last = doc["timeline"][-1]["cluster"]
    assert (last["found"], last["acted"], last["evictions"]) == (3, 2, 2)
    spike_hour = next(t["cluster"] for t in doc["timeline"] if t["start"] <= SPIKE[0] < t["end"])
    # rebalancer did not run in that hour: every node hot by the reference then was missed
    assert spike_hour["found"] == 0 and spike_hour["missedNodes"] == ["cold-2", "hot-1", "hot-2", "hot-3"]
    first = doc["timeline"][0]["cluster"]  # before the history starts: unknown, not "no hot node"
    assert first["reference"] is None and first["discovery"] is None

    plot = tmp_path / "efficiency.html"
    table = report(capsys, policy, kubeconfig, "--plot", str(plot))
    assert "hot-2: no-evictable-pod" in table
    assert "cold-2" in table
    assert "landed-back 1" in table
    # the price: 2 evictions over the one cooled relief's 15-minute follow-up window; hot-3's replacement
    # landed back and the second cycle, half an hour later, found hot-3 hot again
    assert "Price: 13.3 evictions per 100 hot-node-minutes saved" in table
    assert "1 of 2 evictions (50%) from a node found hot again within the hour" in table
    general = next(line for line in table.splitlines() if line.startswith("general "))
    assert general.split()[-3:] == ["1", "100%", "-"]  # landed, back, hit (no prediction was made)
    html = plot.read_text()
    assert html.count("<svg") >= 3 and "landed-back" in html
