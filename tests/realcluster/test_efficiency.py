"""The efficiency rates end to end: two serve cycles against a real API server and a real Prometheus
(cAdvisor history and kube-state-metrics' allocatable CPU), the records in their ConfigMap, the rates and
reasons on /metrics, and `rebalancer report` reading them back. The story is efficiency_story.py's, told around
now: the pods are made (by api_made.py, on an API server alone) just before the first cycle, and cart-9,
cart-0's replacement, just after it, so that the server's own creationTimestamps place them where the story
does; no controller replaces api-0. The second cycle runs on serve's clock half an hour later, on the history
Prometheus holds up to then."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rebalancer.actions.evictor import Outcome
from rebalancer.app import cli
from rebalancer.app.efficiency import RECORDS_KEY
from rebalancer.records import EfficiencyState
from rebalancer.service.runner import CycleResult
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster.efficiency_story import Cluster, Serve, Story, write_policy


@pytest.fixture
def made(api_server: ControlPlane) -> Iterator[Cluster]:
    cluster = Cluster(api_server)
    yield cluster
    cluster.clear()


@pytest.fixture
def story(made: Cluster) -> Story:
    return Story(t1=float(int(time.time())))  # every pod but cart-9 created by now


@pytest.fixture
def prometheus(story: Story, start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(story.history())


@pytest.fixture
def kubeconfig(api_server: ControlPlane, tmp_path: Path) -> Path:
    return api_server.user_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def serve(kubeconfig: Path, story: Story, prometheus: PrometheusServer, tmp_path: Path) -> Iterator[Serve]:
    one = Serve(kubeconfig, write_policy(tmp_path / "policy.yaml", prometheus.url), story.t1)
    yield one
    one.close()


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def evicted(result: CycleResult) -> set[str]:
    assert result.report is not None
    return {r.eviction.name for r in result.report.results if r.outcome is Outcome.EVICTED}


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def two_cycles(serve: Serve, made: Cluster, story: Story) -> tuple[CycleResult, CycleResult]:
    first = serve.cycle(story.t1)
    assert evicted(first) == {"api-0", "cart-0"}
    cart_9 = made.add_pod("shop", "cart-9")  # the ReplicaSet's new pod, placed back on hot-3
    assert story.t1 <= datetime.fromisoformat(cart_9["metadata"]["creationTimestamp"]).timestamp() < story.t1 + 900
    second = serve.cycle(story.end)
    return first, second


def test_rates_and_reasons_on_metrics_after_two_cycles(serve: Serve, made: Cluster, story: Story) -> None:
    _, second = two_cycles(serve, made, story)

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


def test_records_survive_in_the_configmap_with_each_result_explained(serve: Serve, made: Cluster, story: Story) -> None:
    two_cycles(serve, made, story)

    stored = made.plane.admin.get("/api/v1/namespaces/rebalancer/configmaps/rebalancer-efficiency")
    state = EfficiencyState.from_json(stored["data"][RECORDS_KEY], story.end)
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
    assert results["hot-1"].judged_at == results["hot-3"].judged_at == story.t1 + 15 * 60


def test_bounce_back_counted_when_the_guard_is_off(
    made: Cluster, story: Story, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", prometheus.url, "efficiency: {bounceBackGuard: false}\n")
    serve = Serve(kubeconfig, policy, story.t1)
    try:
        _, second = two_cycles(serve, made, story)
        assert evicted(second) == {"cart-9"}  # moved twice in half an hour: what the guard prevents
        m = serve.samples()
        assert sample(m, "rebalancer_efficiency_bounce_backs", pool="general") == 1.0
        assert sample(m, "rebalancer_bounce_backs_total", pool="general") == 1.0
    finally:
        serve.close()


def report(capsys: pytest.CaptureFixture[str], policy: Path, kubeconfig: Path, end: float, *extra: str) -> str:
    args = ["report", "--policy", str(policy), "--kubeconfig", str(kubeconfig), "--until", iso(end), "--period", "6h"]
    assert cli.main([*args, *extra]) == 0
    return capsys.readouterr().out


def test_report_reads_the_records_back_with_reasons_and_plots(
    serve: Serve,
    made: Cluster,
    story: Story,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    two_cycles(serve, made, story)
    capsys.readouterr()
    policy = write_policy(tmp_path / "policy.yaml", prometheus.url)

    doc = json.loads(report(capsys, policy, kubeconfig, story.end, "--output", "json"))
    cluster = next(p for p in doc["pools"] if p["pool"] == "*")
    assert (cluster["discovery"], cluster["eviction"], cluster["effective"]) == pytest.approx((0.75, 2 / 3, 0.5))
    assert cluster["missedNodes"] == ["cold-2"]
    assert cluster["unactedNodes"] == {"hot-2": "no-evictable-pod"}
    assert cluster["uncooled"] == {"landed-back": 1}
    assert doc["referenceProblem"] is None
    assert len(doc["timeline"]) == 6  # 6 h in 1 h buckets
    last = doc["timeline"][-1]["cluster"]
    assert (last["found"], last["acted"], last["evictions"]) == (3, 2, 2)
    spike_hour = next(t["cluster"] for t in doc["timeline"] if t["start"] <= story.spike[0] < t["end"])
    # rebalancer did not run in that hour: every node hot by the reference then was missed
    assert spike_hour["found"] == 0 and spike_hour["missedNodes"] == ["cold-2", "hot-1", "hot-2", "hot-3"]
    first = doc["timeline"][0]["cluster"]  # before the history starts: unknown, not "no hot node"
    assert first["reference"] is None and first["discovery"] is None

    plot = tmp_path / "efficiency.html"
    table = report(capsys, policy, kubeconfig, story.end, "--plot", str(plot))
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
