"""The evictor with the real adapters (KubeActions, ConfigMapStateStore) against tests/kubeapi: what the
limiter state's ConfigMap answering badly, a slow re-read, or a node limit against a node emptied whole
does to a run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.adapters.kube import ConfigMapStateStore, KubeActions, connect
from rebalancer.planning.plan import EvictionPlan, PlannedEviction, StrategyResult
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy import Policy, parse_policy_warning
from tests.builders import node, policy, snapshot, usage
from tests.fake_clock import FakeClock
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.server import Request

NS, STATE_NS, LIMITS = "shop", "rebalancer", "rebalancer-limits"
LIMITS_PATH = f"/api/v1/namespaces/{STATE_NS}/configmaps/{LIMITS}"
NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
LNU = "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 50}\n"


def scene(
    server: TestApiServer,
    kubeconfig: Path,
    pol: Policy,
    evicted: int,
    clock: Callable[[], float] = lambda: NOW,
    strategy: str = "LowNodeUtilization",
) -> tuple[Evictor, EvictionPlan, ClusterSnapshot, list[str]]:
    """Three pods of "web" on node-1, a plan evicting the first ``evicted``, and the evictor on the server."""
    server.add(b.node("node-1"), *b.deployment_chain("web", NS, replicas=3))
    api = connect(kubeconfig=str(kubeconfig))
    actions = KubeActions(api, 5.0)
    names = [p["metadata"]["name"] for p in server.objects("pods", NS)]
    pods = [p for p in (actions.get_pod(NS, name, frozenset()) for name in names) if p is not None]
    snap = snapshot([node("node-1")], pods, usage({"node-1": 9_000}), taken_at=NOW)
    evictions = tuple(
        PlannedEviction(strategy, NS, p.name, p.uid, "node-1", "", p.workload, 100, "planned", "")
        for p in pods[:evicted]
    )
    plan = EvictionPlan(NOW, (StrategyResult(strategy, evictions, (), ()),))
    evictor = Evictor(
        actions,
        ConfigMapStateStore(api, STATE_NS, LIMITS),
        ConfigMapStateStore(api, STATE_NS, "rebalancer-backoff"),
        pol.limits,
        Protections.from_settings(pol.protections),
        DryRun.OFF,
        clock=clock,
    )
    return evictor, plan, snap, names


def test_an_unanswered_reload_after_a_conflict_stops_the_run_and_keeps_its_report(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """The second reservation loses to another writer (409) and the state cannot be read again (503): the
    run stops there, reporting the eviction it made, instead of raising and losing that report."""
    evictor, plan, snap, names = scene(kube_server, kubeconfig, policy(LNU), evicted=2)
    saves: list[str] = []

    def second_save_conflicts(request: Request) -> None:
        if request.path == LIMITS_PATH and request.method == "PUT":
            saves.append(request.method)
            if len(saves) == 1:  # another instance wrote first, then the API server stops answering
                kube_server.set_fault(LIMITS_PATH, Fault(code=409, method="PUT", times=1))
                kube_server.set_fault(LIMITS_PATH, Fault(code=503, method="GET", times=1))

    kube_server.on_request(second_save_conflicts)

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.EVICTED, Outcome.SKIPPED]
    assert report.aborted is not None and "limiter state" in report.aborted
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names[1:]  # the first only


def test_an_eviction_sent_without_an_answer_says_so_and_keeps_its_reservation(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """The API server takes the eviction and the connection drops before its answer: the evictor cannot tell
    whether it happened. It reports that (not "not attempted"), stops the run, and keeps the reservation,
    so the node's cap still counts the eviction in the next run."""
    node_cap = "limits: {node: {maxPerPeriod: [{count: 1, period: 1h}]}}\n"
    evictor, plan, snap, names = scene(kube_server, kubeconfig, policy(LNU, node_cap), evicted=2)
    first = kube_server.eviction_path(NS, names[0])

    def taken_then_dropped(request: Request) -> None:
        if request.path == first and request.method == "POST":
            kube_server.delete("pods", names[0], NS)

    kube_server.on_request(taken_then_dropped)
    kube_server.set_fault(first, Fault(drop=True, method="POST", times=1))

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.UNANSWERED, Outcome.SKIPPED]
    assert "sent without a clear answer" in report.results[0].detail
    assert report.results[1].detail.startswith("not attempted: ")
    assert report.aborted is not None and "no clear answer" in report.aborted
    assert len(kube_server.requests_to(first)) == 1  # sent once, never again
    second = EvictionPlan(NOW, (StrategyResult("LowNodeUtilization", plan.evictions[1:], (), ()),))
    again = evictor.apply(second, snap)
    assert [(r.outcome, r.limiter) for r in again.results] == [(Outcome.BLOCKED, "node.maxPerPeriod[1h]")]
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names[1:]


def test_the_limiters_judge_the_time_after_the_re_read(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """A blackout begins while the pod is re-read (a slow API server): the limiters judge the moment the
    reservation is made, after the re-read, so nothing is evicted inside the blackout."""
    blackout = 'limits: {windows: {blackout: [{start: "22:14", end: "23:00"}]}}\n'
    clock = FakeClock(NOW)  # 22:13:20, outside the blackout
    evictor, plan, snap, names = scene(kube_server, kubeconfig, policy(LNU, blackout), evicted=1, clock=clock)

    def slow_read(request: Request) -> None:
        if request.method == "GET" and request.path == f"/api/v1/namespaces/{NS}/pods/{names[0]}":
            clock.now = NOW + 60  # the answer comes at 22:14:20

    kube_server.on_request(slow_read)

    report = evictor.apply(plan, snap)

    assert [(r.outcome, r.limiter) for r in report.results] == [(Outcome.BLOCKED, "window.blackout")]
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names


HNU = "kind: HighNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 70}\n"


def test_a_node_cooldown_blocks_every_node_emptied_whole_and_the_policy_says_so(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """HighNodeUtilization empties a node in one go; a node cooldown lets one eviction a node through, so a
    node of three pods is never emptied, and nothing of it is evicted. Loading the policy warns of it."""
    limits = "limits: {node: {cooldown: 10m}}"
    pol = policy(HNU, limits)
    evictor, plan, snap, names = scene(kube_server, kubeconfig, pol, evicted=3, strategy="HighNodeUtilization")

    report = evictor.apply(plan, snap)

    assert [(r.outcome, r.limiter) for r in report.results] == [(Outcome.BLOCKED, "node.cooldown")] * 3
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names
    text = f"pools: {{label: pool}}\n{limits}\nstrategies:\n- {{{HNU.strip().replace(chr(10), ', ')}}}\n"
    [warning] = parse_policy_warning(text)[1]
    assert warning.startswith("limits.node.cooldown: HighNodeUtilization evicts all of a node's movable pods")
    assert "more than 1 movable pod is never emptied" in warning
    assert parse_policy_warning(text.replace("HighNodeUtilization", "LowNodeUtilization"))[1] == []


@pytest.mark.parametrize(
    ("limits", "field", "counted"),
    [
        ("{global: {maxPerCycle: 2}}", "limits.global.maxPerCycle", "more than 2 movable pods is never emptied"),
        (
            "{global: {maxPerPeriod: [{count: 2, period: 1h}]}}",
            "limits.global.maxPerPeriod[0]",
            "more than 2 movable pods",
        ),
        ("{global: {rate: {perMinute: 1, burst: 2}}}", "limits.global.rate.burst", "more than 2 movable pods"),
        ("{namespace: {maxPerCycle: 2}}", "limits.namespace.maxPerCycle", "more than 2 movable pods of one namespace"),
        ("{workload: {maxPerCycle: 2}}", "limits.workload.maxPerCycle", "more than 2 movable pods of one workload"),
        ("{workload: {minInterval: 10m}}", "limits.workload.minInterval", "more than 1 movable pod of one workload"),
        ("{workload: {maxPerPeriod: [{count: 2, period: 1d}]}}", "limits.workload.maxPerPeriod[0]", "of one workload"),
        ("{workload: {maxUnavailable: 2}}", "limits.workload.maxUnavailable", "more than 2 ready pods of one workload"),
    ],
)
def test_every_cap_below_a_nodes_group_blocks_it_and_the_policy_says_so(
    kube_server: TestApiServer, kubeconfig: Path, limits: str, field: str, counted: str
) -> None:
    """Not only node limits: any cap that lets fewer pods through at once than a node's group holds blocks
    HighNodeUtilization's group of three pods of one workload and namespace; the policy's warning names it."""
    pol = policy(HNU, f"limits: {limits}")
    evictor, plan, snap, names = scene(kube_server, kubeconfig, pol, evicted=3, strategy="HighNodeUtilization")

    report = evictor.apply(plan, snap)

    assert {r.outcome for r in report.results} == {Outcome.BLOCKED}
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names
    text = f"limits: {limits}\nstrategies:\n- {{{HNU.strip().replace(chr(10), ', ')}}}\n"
    [warning] = parse_policy_warning(text)[1]
    assert warning.startswith(f"{field}: HighNodeUtilization evicts all of a node's movable pods"), warning
    assert counted in warning, warning
