"""Metrics: what one cycle records, read back through the text exposition (as Prometheus would)."""

from __future__ import annotations

import dataclasses

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.actions.steerer import SteeringReport, SteerOutcome, SteerResult
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.plan import EvictionPlan
from rebalancer.policy.cycle import plan_cycle
from rebalancer.service.metrics import Metrics
from tests.builders import node, pod, policy, usage

# predictPlacement off: in make_plan's cluster, big's replacement ties between cold, dark (no data) and b1
# (pool b) -- the scheduler would pick one at random, so prediction plans nothing; these tests are about metrics
LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
predictPlacement: false
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics) -> Samples:
    body, content_type = metrics.exposition()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def series(found: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in found.items() if n == name}


def make_plan(nodes=None, report: UsageReport | None = None) -> EvictionPlan:
    nodes = nodes or [node("hot", pool="a"), node("cold", pool="a"), node("dark", pool="a"), node("b1", pool="b")]
    pods = [pod("big", "hot", cpu_request_m=500), pod("small", "hot")]
    report = report or usage({"hot": 9000, "cold": 1000, "b1": 5000}, {"big": 2500, "small": 300})  # dark: no data
    facts = ClusterFacts(tuple(nodes), tuple(p for p in pods if p.node_name in {n.name for n in nodes}), ())
    return plan_cycle(facts, report, policy(LNU), 1_700_000_000.0)[1]


def test_a_cycle_records_classes_utilization_evictions_and_limiter_blocks():
    plan = make_plan()
    [planned] = plan.evictions
    assert (planned.name, planned.node, planned.pool) == ("big", "hot", "a")
    other = dataclasses.replace(planned, name="small")
    report = EvictorReport(
        (
            EvictionResult(planned, Outcome.EVICTED, "moved"),
            EvictionResult(other, Outcome.BLOCKED, "cooling down", limiter="node.cooldown"),
        )
    )
    metrics = Metrics()
    metrics.observe_cycle("schedule", 0.42, plan, report)
    found = samples(metrics)

    assert series(found, "rebalancer_nodes") == {
        frozenset({("class", "hot"), ("pool", "a")}): 1,
        frozenset({("class", "cold"), ("pool", "a")}): 1,
        frozenset({("class", "unknown"), ("pool", "a")}): 1,
        frozenset({("class", "normal"), ("pool", "a")}): 0,
        frozenset({("class", "hot"), ("pool", "b")}): 0,
        frozenset({("class", "cold"), ("pool", "b")}): 0,
        frozenset({("class", "unknown"), ("pool", "b")}): 0,
        frozenset({("class", "normal"), ("pool", "b")}): 1,
    }
    # ratios, not percent; the node without data has no series at all (missing is never zero)
    assert series(found, "rebalancer_node_cpu_utilization_ratio") == {
        frozenset({("node", "hot"), ("pool", "a")}): 0.9,
        frozenset({("node", "cold"), ("pool", "a")}): 0.1,
        frozenset({("node", "b1"), ("pool", "b")}): 0.5,
    }
    evicted = {"strategy": "LowNodeUtilization", "namespace": "default", "node": "hot", "pool": "a"}
    assert value(found, "rebalancer_pods_evicted_total", result="evicted", **evicted) == 1
    assert value(found, "rebalancer_pods_evicted_total", result="blocked", **evicted) == 1
    assert value(found, "rebalancer_limiter_blocked_total", limiter="node.cooldown") == 1
    assert value(found, "rebalancer_cycle_duration_seconds_count", trigger="schedule") == 1
    assert value(found, "rebalancer_cycle_duration_seconds_sum", trigger="schedule") == pytest.approx(0.42)
    assert value(found, "rebalancer_cycle_duration_seconds_bucket", trigger="schedule", le="0.5") == 1
    assert value(found, "rebalancer_cycle_duration_seconds_bucket", trigger="schedule", le="0.25") == 0
    assert series(found, "rebalancer_cycle_failures_total") == {}
    assert not any(name.endswith("_created") for name, _ in found)


def test_the_next_cycle_drops_nodes_that_disappeared_and_pools_left_empty():
    metrics = Metrics()
    metrics.observe_cycle("schedule", 1.0, make_plan(), None)
    smaller = make_plan([node("hot", pool="a"), node("cold", pool="a")], usage({"hot": 3000, "cold": 1000}))
    metrics.observe_cycle("schedule", 1.0, smaller, None)
    found = samples(metrics)
    assert series(found, "rebalancer_node_cpu_utilization_ratio") == {
        frozenset({("node", "hot"), ("pool", "a")}): 0.3,
        frozenset({("node", "cold"), ("pool", "a")}): 0.1,
    }
    nodes = series(found, "rebalancer_nodes")
    assert {dict(labels)["pool"] for labels in nodes} == {"a"}
    assert value(found, "rebalancer_nodes", **{"class": "normal", "pool": "a"}) == 1
    assert value(found, "rebalancer_nodes", **{"class": "hot", "pool": "a"}) == 0
    assert value(found, "rebalancer_nodes", **{"class": "unknown", "pool": "a"}) == 0


def test_a_node_whose_usage_becomes_unknown_loses_its_series():
    metrics = Metrics()
    metrics.observe_cycle("schedule", 1.0, make_plan(), None)
    metrics.observe_cycle("schedule", 1.0, make_plan(report=usage({"cold": 1000, "b1": 5000}, {})), None)
    ratios = series(samples(metrics), "rebalancer_node_cpu_utilization_ratio")
    assert {dict(labels)["node"] for labels in ratios} == {"cold", "b1"}


def test_a_partial_cycle_updates_only_the_nodes_it_saw():
    metrics = Metrics()
    metrics.observe_cycle("schedule", 1.0, make_plan(), None)
    focused = make_plan([node("hot", pool="a"), node("cold", pool="a")], usage({"hot": 3000, "cold": 1000}))
    metrics.observe_cycle("alert", 0.05, focused, None, partial=True)
    found = samples(metrics)
    ratios = series(found, "rebalancer_node_cpu_utilization_ratio")
    assert ratios[frozenset({("node", "hot"), ("pool", "a")})] == 0.3
    assert ratios[frozenset({("node", "b1"), ("pool", "b")})] == 0.5  # kept
    assert value(found, "rebalancer_nodes", **{"class": "unknown", "pool": "a"}) == 1  # "dark", kept
    assert value(found, "rebalancer_cycle_duration_seconds_count", trigger="alert") == 1


def test_blocked_plans_and_aborted_runs_count_as_failures_once():
    metrics = Metrics()
    blocked = make_plan(report=UsageReport({}, {}, failure="Prometheus timed out"))
    assert blocked.blocked
    metrics.observe_cycle("schedule", 1.0, blocked, EvictorReport(aborted=f"plan blocked: {blocked.blocked}"))
    metrics.observe_cycle("schedule", 1.0, make_plan(), EvictorReport(aborted="limiter state unreadable"))
    metrics.cycle_failed("KubeUnavailable")
    found = samples(metrics)
    assert series(found, "rebalancer_cycle_failures_total") == {
        frozenset({("reason", "plan_blocked")}): 1,
        frozenset({("reason", "evictor_aborted")}): 1,
        frozenset({("reason", "KubeUnavailable")}): 1,
    }


def test_free_text_never_becomes_a_label_value():
    metrics = Metrics()
    with pytest.raises(ValueError, match="one short word"):
        metrics.cycle_failed("connection refused by 10.0.0.1")
    with pytest.raises(ValueError, match="one short word"):
        metrics.observe_cycle("", 1.0, make_plan(), None)


def test_service_metrics():
    metrics = Metrics(version="1.2.3")
    found = samples(metrics)
    assert value(found, "rebalancer_build_info", version="1.2.3") == 1
    assert value(found, "rebalancer_policy_valid") == 1
    assert value(found, "rebalancer_leader") == 0
    assert value(found, "rebalancer_policy_reload_total", result="invalid") == 0
    assert value(found, "rebalancer_policy_restart_required") == 0
    metrics.policy_reload("invalid")
    metrics.set_leader(True)
    metrics.webhook_answered(202)
    metrics.webhook_answered(401)
    metrics.webhook_answered(401)
    metrics.alert_handled("firing", "queued")
    metrics.alert_handled("resolved", "resolved")
    found = samples(metrics)
    assert value(found, "rebalancer_policy_valid") == 0
    assert value(found, "rebalancer_policy_reload_total", result="invalid") == 1
    assert value(found, "rebalancer_leader") == 1
    assert value(found, "rebalancer_webhook_requests_total", code="401") == 2
    assert value(found, "rebalancer_alerts_total", status="firing", action="queued") == 1
    metrics.policy_reload("applied", restart_required=True)
    found = samples(metrics)
    assert value(found, "rebalancer_policy_valid") == 1
    assert value(found, "rebalancer_policy_restart_required") == 1
    metrics.policy_reload("refused")  # the restart still waits: the policy in force has not changed
    found = samples(metrics)
    assert (value(found, "rebalancer_policy_valid"), value(found, "rebalancer_policy_restart_required")) == (0, 1)
    assert value(found, "rebalancer_policy_reload_total", result="refused") == 1
    metrics.policy_reload("applied")
    assert value(samples(metrics), "rebalancer_policy_restart_required") == 0


def test_each_instance_has_its_own_registry():
    first, second = Metrics(), Metrics()
    first.webhook_answered(202)
    assert value(samples(first), "rebalancer_webhook_requests_total", code="202") == 1
    assert value(samples(second), "rebalancer_webhook_requests_total", code="202") is None
    assert prometheus_client.REGISTRY.get_sample_value("rebalancer_webhook_requests_total", {"code": "202"}) is None


def test_steering_outcomes_are_counted_and_node_classes_survive_a_steering_first_policy():
    steer_first = policy("kind: DeletionCostSteering\npoolCosts: {p: 10}")
    both = steer_first.model_copy(update={"strategies": (*steer_first.strategies, policy(LNU).strategies[0])})
    facts = ClusterFacts((node("n1", pool="p"), node("n2", pool="p")), (pod("a", "n1"), pod("b", "n2")))
    _, plan = plan_cycle(facts, usage({"n1": 9_000, "n2": 1_000}), both, 1_700_000_000.0)
    assert [r.strategy for r in plan.results] == ["DeletionCostSteering", "LowNodeUtilization"]
    metrics = Metrics()
    metrics.observe_cycle("schedule", 0.1, plan, None)
    results = tuple(
        SteerResult(p, o, "")
        for p, o in zip(plan.cost_patches, (SteerOutcome.PATCHED, SteerOutcome.FOREIGN), strict=True)
    )
    metrics.observe_steering(SteeringReport(results))
    found = samples(metrics)
    labels = {"strategy": "DeletionCostSteering", "namespace": "default", "pool": "p"}
    assert value(found, "rebalancer_deletion_cost_patches_total", result="patched", **labels) == 1
    assert value(found, "rebalancer_deletion_cost_patches_total", result="foreign", **labels) == 1
    assert found[("rebalancer_nodes", frozenset({("class", "hot"), ("pool", "p")}))] == 1
