"""The policies compared side by side, each a production :class:`Policy` plus the usage it is fed (pure).

Every variant runs the production LowNodeUtilization strategies, limiters and evictor of one base policy;
they differ in what "usage" the snapshot carries, in ``classifyBy``, in ``predictPlacement`` (where the
planner expects a replacement to land) and in the landing guard (taints that steer replacements away):

* ``none``: no rebalancing (the reference for every other row).
* ``requests-lnu``: the community descheduler's LowNodeUtilization, which classifies nodes by the
  *requests* of their pods: the snapshot's node usage is its pods' CPU requests, a pod's usage its request.
* ``instant-lnu``: the descheduler's Prometheus mode: one instant value per node (the last sample, no
  window statistic) and no per-pod usage; a pod is credited with the node's instant usage in proportion to
  its CPU request (a documented modelling choice: that mode has no figure of its own for a pod).
  Both descheduler variants run without placement prediction, as the descheduler does.
* ``current-unguarded``: rebalancer's P95 window per node and pod, ``predictPlacement: false`` and no
  landing guard: any cold node with room is enough, the scheduler places the replacement where it will
  (the "before" of the landing-control comparison).
* ``current-predicted``: the same with ``predictPlacement: true`` (the default): a pod is only evicted when
  the scheduler model sends its replacement to a cold node with room.
* ``current-guard``: ``current-unguarded`` with the landing guard on every pool (the base policy's
  ``landingGuard`` when it sets one, else the defaults): hot and relieved nodes carry the guard's taint.
* ``current-predicted-guard``: both (the "after" of the landing-control comparison). Placement prediction sees the guard's
  taints through the scheduler model, as it does in production.
* ``predictive``: ``current-predicted`` with a predictive LowNodeUtilization run first in the same policy
  (``classifyBy: predicted`` with the ``predicted`` thresholds of :data:`BEFORE_PEAK`, from the simulation's
  own history of the pods, and ``beforePeak``): from 2 hours before a node's predicted peak hour until it
  ends, it moves the pods that make the node's coincident peak off it when that peak is over target, onto
  nodes whose predicted peak with the pod's replacement stays under it; the reactive strategy after it
  relieves what is hot now and never takes a node past its predicted target.
* ``predictive-guard``: ``predictive`` with the landing guard (as ``current-predicted-guard``).
* ``current-ideal``: ``current-unguarded`` with every replacement bound on the node the plan counted room on
  (when its filters allow): not something the default scheduler does, the upper bound of landing control.

The ``shipped`` group runs the shipped default policy as it is (``config/low-node-utilization.yaml``,
packaged as ``shipped-policy.yaml``: its landing guard on the default pool, no limits, so no node
cooldown), each variant at its own cycle interval:

* ``shipped-10m``, ``shipped-5m``, ``shipped-1m``: a cycle every 10 minutes (the chart's CronJob schedule),
  5 minutes (serve's default schedule) and every minute.
* ``shipped-alert``: serve with alerts: the 5-minute schedule, plus a focused cycle on the nodes an
  Alertmanager notification names, for the rule "node above targetThresholds for 2 minutes"
  (:class:`~rebalancer.offline.simulate.alert_rule.AlertRule`, :mod:`rebalancer.offline.simulate.alerts`).
* ``chart-5m``: the chart's default policy (the same strategy with ``limits.global.maxPerCycle: 10`` and
  ``limits.node.maxPerPeriod: [{count: 2, period: 1h}]``) on serve's 5-minute schedule, what a Helm install
  runs.

To compare another mechanism, add a :class:`Variant` with the ``overrides`` its policy needs (any policy
field, in the YAML's spelling) to :data:`VARIANTS`, or pass a list to
:func:`rebalancer.offline.simulate.engine.simulate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from rebalancer.domain.errors import ConfigError
from rebalancer.offline.simulate.alert_rule import AlertRule
from rebalancer.planning.predicted import ClassifyBy
from rebalancer.policy import Policy, load_policy, validation_problems

UsageMode = Literal["requests", "instant", "window"]


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    description: str
    usage: UsageMode | None  # None: the policy never runs
    classify_by: ClassifyBy = "current"
    ideal_placement: bool = False  # replacements bound on the node the plan chose (an upper bound, not real)
    predict_placement: bool | None = None  # every LowNodeUtilization's predictPlacement (None: as the policy says)
    guard: bool = False  # the landing guard: the base policy's landingGuard, or its defaults on every pool
    # (a shipped variant keeps the shipped policy's own, whatever this says)
    overrides: Mapping[str, Any] = field(default_factory=dict)  # merged into the policy (YAML spelling)
    shipped: bool = False  # derives from the shipped default policy instead of the simulation's base policy
    interval_seconds: int | None = None  # a scheduled cycle every this long (None: the command's --interval)
    alert: AlertRule | None = None  # alert-driven: a focused cycle on the nodes each notification names
    before_peak: bool = False  # a predictive LowNodeUtilization (BEFORE_PEAK) runs first, beside the base ones


VARIANTS: tuple[Variant, ...] = (
    Variant("none", "no rebalancing", None),
    Variant("requests-lnu", "LowNodeUtilization on requests (descheduler)", "requests", predict_placement=False),
    Variant("instant-lnu", "LowNodeUtilization on one instant node value (descheduler Prometheus mode)", "instant",
            predict_placement=False),
    Variant("current-unguarded", "rebalancer: P95 window, no placement prediction, no guard", "window",
            predict_placement=False),
    Variant("current-predicted", "rebalancer: P95 window, placement prediction (the default)", "window",
            predict_placement=True),
    Variant("current-guard", "rebalancer: P95 window, landing guard, no placement prediction", "window",
            predict_placement=False, guard=True),
    Variant("current-predicted-guard", "rebalancer: P95 window, placement prediction and landing guard",
            "window", predict_placement=True, guard=True),
    Variant("predictive", "rebalancer: predicted coincident peaks relieved first, then the P95 window, placement "
            "prediction", "window", predict_placement=True, before_peak=True),
    Variant("predictive-guard", "rebalancer: predictive, placement prediction and landing guard", "window",
            predict_placement=True, guard=True, before_peak=True),
    Variant("current-ideal", "rebalancer unguarded, replacements land where planned (upper bound)", "window",
            ideal_placement=True, predict_placement=False),
)  # fmt: skip
BEFORE, AFTER = "current-unguarded", "current-predicted-guard"  # the landing-control comparison

BEFORE_PEAK: dict[str, Any] = {
    "classifyBy": "predicted",
    "predicted": {"thresholds": {"cpu": 65}, "targetThresholds": {"cpu": 70}},
    "beforePeak": "2h",
}  # merged into a copy of the base policy's first LowNodeUtilization, run before the others

SHIPPED_POLICY = Path(__file__).with_name("shipped-policy.yaml")  # config/low-node-utilization.yaml, byte for byte
CHART_LIMITS = {  # charts/rebalancer/values.yaml (a test keeps the two equal)
    "global": {"maxPerCycle": 10},
    "node": {"maxPerPeriod": [{"count": 2, "period": "1h"}]},
}
SHIPPED: tuple[Variant, ...] = (
    VARIANTS[0],
    Variant("shipped-10m", "shipped default policy, a cycle every 10 minutes (the chart's CronJob)", "window",
            shipped=True, interval_seconds=600),
    Variant("shipped-5m", "shipped default policy, a cycle every 5 minutes (serve's default schedule)", "window",
            shipped=True, interval_seconds=300),
    Variant("shipped-1m", "shipped default policy, a cycle every minute", "window", shipped=True,
            interval_seconds=60),
    Variant("shipped-alert", "shipped default policy in serve: 5-minute schedule and alert-driven focused cycles",
            "window", shipped=True, interval_seconds=300, alert=AlertRule()),
    Variant("chart-5m", "the chart's default policy (10 a cycle, 2 a node an hour), 5-minute schedule",
            "window", shipped=True, interval_seconds=300, overrides={"limits": CHART_LIMITS}),
)  # fmt: skip
GROUPS: dict[str, tuple[Variant, ...]] = {"base": VARIANTS, "shipped": SHIPPED, "all": VARIANTS + SHIPPED[1:]}


def variant_named(name: str) -> Variant:
    known = GROUPS["all"]
    for variant in known:
        if variant.name == name:
            return variant
    raise ConfigError("--variant", [("", f"unknown variant {name!r}; known: {', '.join(v.name for v in known)}")])


@cache
def shipped_policy() -> Policy:
    return load_policy(SHIPPED_POLICY)


def cpu_thresholds(policy: Policy) -> tuple[float, float] | None:
    """(thresholds.cpu, targetThresholds.cpu) of the policy's first strategy with both in percent (None:
    no such strategy)."""
    for strategy in policy.strategies:
        low, high = getattr(strategy, "thresholds", None), getattr(strategy, "target_thresholds", None)
        if low is None or high is None or getattr(strategy, "use_deviation_thresholds", False):
            continue
        if getattr(low, "cpu", None) is not None and getattr(high, "cpu", None) is not None:
            return float(low.cpu), float(high.cpu)
    return None


def variant_base(base: Policy, variant: Variant) -> Policy:
    """The policy a variant derives from: the shipped default policy or the simulation's ``base``."""
    return shipped_policy() if variant.shipped else base


def variant_policy(base: Policy, variant: Variant, pools: Sequence[str] = ()) -> Policy:
    """The base policy with the variant's overrides, every LowNodeUtilization set to its ``classifyBy`` (and
    ``predictPlacement`` when the variant sets it). The landing guard: a shipped variant's is the shipped
    policy's own; otherwise off unless the variant has one; then
    the base policy's ``landingGuard`` when it guards some pool, else the defaults on each of ``pools`` (the
    pools the simulated nodes belong to)."""
    data = base.model_dump(by_alias=True, exclude_unset=False)
    if not variant.guard and not variant.shipped:  # a shipped variant keeps the shipped policy's guard
        data["landingGuard"] = {"pools": []}
    elif variant.guard and not base.landing_guard.enabled:
        data["landingGuard"] = {"pools": [{"pool": pool} for pool in sorted(set(pools))]}
    _merge(data, dict(variant.overrides))
    for strategy in data["strategies"]:
        if strategy.get("kind") == "LowNodeUtilization":
            strategy["classifyBy"] = variant.classify_by
            if variant.predict_placement is not None:
                strategy["predictPlacement"] = variant.predict_placement
    if variant.before_peak:
        first = next(s for s in data["strategies"] if s.get("kind") == "LowNodeUtilization")
        data["strategies"] = [{**first, **BEFORE_PEAK}, *data["strategies"]]
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"variant {variant.name}", validation_problems(exc)) from exc


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
