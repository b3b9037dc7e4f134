"""A descheduler policy as a rebalancer policy: YAML data in, policy data and notes out (pure).

Imported: LowNodeUtilization and HighNodeUtilization (CPU, memory and pods thresholds, classified by requests
unless ``metricsUtilization`` is set), the DefaultEvictor's arguments as protections, the eviction limits as
limiters, a Prometheus URL, and the chart's schedule. Everything else is a note naming the field and why;
nothing is dropped without one. Every protection of every imported profile is kept (they only tighten), and
what rebalancer does besides the descheduler through its own defaults is a note too. The caller validates
the result (:func:`rebalancer.policy.parse_policy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rebalancer.app.descheduler.evictor import protections_of
from rebalancer.app.descheduler.notes import Note, Notes
from rebalancer.app.descheduler.rebalancer_only import rebalancer_only
from rebalancer.app.descheduler.source import Profile, Source, SourceProblem, mapping, read_source, sequence
from rebalancer.app.descheduler.tighten import tightened
from rebalancer.app.descheduler.utilization import KINDS, strategy_of
from rebalancer.policy import API_VERSION

OTHER_PLUGINS = {
    "RemoveDuplicates": "spreads the replicas of a workload over nodes; rebalancer moves CPU load, not replica "
    "placement",
    "RemovePodsViolatingNodeTaints": "repairs a scheduling constraint; rebalancer moves load only",
    "RemovePodsViolatingNodeAffinity": "repairs a scheduling constraint; rebalancer moves load only",
    "RemovePodsViolatingInterPodAntiAffinity": "repairs a scheduling constraint; rebalancer moves load only",
    "RemovePodsViolatingTopologySpreadConstraint": "repairs a scheduling constraint; rebalancer moves load only",
    "RemovePodsHavingTooManyRestarts": "evicts by pod state, not by load",
    "PodLifeTime": "evicts by pod age, not by load",
    "RemoveFailedPods": "removes failed pods, which carry no load",
}
KEEP_DESCHEDULER = " (keep the descheduler for it, with LowNodeUtilization and HighNodeUtilization disabled there)"
LIMITS = {
    "maxNoOfPodsToEvictPerNode": ("node", "the evictor's cap per source node per cycle, over all strategies"),
    "maxNoOfPodsToEvictTotal": ("global", "the evictor's cap per cycle in the cluster, over all strategies"),
    "maxNoOfPodsToEvictPerNamespace": ("namespace", "the evictor's cap per namespace per cycle, over all strategies"),
}
TOP_UNSUPPORTED = {
    "evictionFailureEventNotification": "rebalancer records every refused eviction in its decision log and "
    "metrics (rebalancer_evictions_total by outcome)",
    "gracePeriodSeconds": "evictions use each pod's own terminationGracePeriodSeconds",
}
CHART_SCHEDULE_KEYS = ("kind", "schedule", "deschedulingInterval")
SAME_CHART_VALUES = frozenset(
    {"priorityClassName", "resources", "nodeSelector", "tolerations", "affinity", "podAnnotations", "podLabels",
     "imagePullSecrets", "serviceAccount", "rbac", "nameOverride", "fullnameOverride", "podSecurityContext",
     "securityContext", "livenessProbe", "serviceMonitor"}
)  # fmt: skip
REAL_USAGE = (
    "To classify by real usage instead: classifyBy current (LowNodeUtilization also predicted or max) and "
    "predictPlacement true. Nodes are then hot or cold by their measured CPU (prometheus: window and quantile), "
    "pods are chosen by their measured usage, and a pod whose replacement the scheduler would put back on its "
    "node is passed over."
)


@dataclass(frozen=True, slots=True)
class Conversion:
    shape: str  # what was read, for the header
    policy: dict[str, Any]
    notes: tuple[Note, ...]
    by_requests: bool  # some imported strategy classifies by requests


def convert(document: object) -> Conversion:
    """The rebalancer policy for a parsed descheduler document; SourceProblem when it is none, or when
    no strategy of it carries over (a policy needs one)."""
    notes = Notes()
    source = read_source(document, notes)
    strategies: list[dict[str, Any]] = []
    by_profile: list[tuple[Profile, dict[str, Any]]] = []
    for profile in source.profiles:
        found = _profile(profile, strategies, notes)
        if found is not None:
            by_profile.append((profile, found))
    if not strategies:
        raise SourceProblem("", "no LowNodeUtilization or HighNodeUtilization with a cpu threshold to import")
    protections = _whole_policy(by_profile, notes)
    policy: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "RebalancerPolicy"}
    prometheus = _prometheus(source.top, notes)
    if prometheus:
        policy["prometheus"] = prometheus
    if "evictableNamespaces" not in protections:
        notes.add(Note.differs("evictableNamespaces", "not set: rebalancer's default excludes kube-system (the "
                               "descheduler's evicted there too, all but system-critical pods)"))  # fmt: skip
    if protections:
        policy["protections"] = protections
    _schedule(source.chart, strategies, notes)
    policy["strategies"] = strategies
    limits = _limits(source.top, notes)
    if limits:
        policy["limits"] = limits
    _top_rest(source, notes)
    for note in rebalancer_only(strategies):
        notes.add(note)
    by_requests = any(s["classifyBy"] == "requests" for s in strategies)
    return Conversion(source.shape, policy, tuple(notes.found), by_requests)


def _profile(profile: Profile, strategies: list[dict[str, Any]], notes: Notes) -> dict[str, Any] | None:
    """The profile's strategies appended to ``strategies``; returns the protections they run under (None:
    the profile imports no strategy): their own namespace filters and the DefaultEvictor's, all kept."""
    protections: dict[str, Any] = {}
    imported = False
    for name in profile.enabled:
        at = profile.plugin_path(name)
        if name in KINDS:
            strategy, implied = strategy_of(name, profile.args.get(name, {}), at, notes)
            if strategy:
                strategies.append(strategy)
                protections = tightened(protections, implied, at)
                imported = True
        else:
            why = OTHER_PLUGINS.get(name, "no equivalent strategy")
            notes.add(Note.unsupported(profile.path if profile.single else at, why + KEEP_DESCHEDULER))
    evictor = profile.args.get("DefaultEvictor", {})
    if imported:
        path = f"{profile.path}.DefaultEvictor"
        return tightened(protections, protections_of(evictor, path, notes), path)
    if evictor and not profile.single:
        notes.add(Note.unsupported(f"{profile.path}.DefaultEvictor", "its profile imports no strategy"))
    return None


DESCHEDULER_DEFAULTS = {"evictLocalStoragePods": False, "evictPodsWithPVC": True}


def _whole_policy(by_profile: list[tuple[Profile, dict[str, Any]]], notes: Notes) -> dict[str, Any]:
    """One set of protections for the whole policy, protecting every pod some imported profile protects; each
    profile whose strategies it binds more than the descheduler did is named."""
    if len(by_profile) == 1:
        return by_profile[0][1]
    own = [(profile, {**DESCHEDULER_DEFAULTS, **found}) for profile, found in by_profile]
    combined: dict[str, Any] = {}
    for profile, found in own:
        combined = tightened(combined, found, profile.path)
    for profile, found in own:
        for key, value in combined.items():
            if found.get(key) != value:
                notes.add(Note.differs(f"{profile.path}: {key}", f"{value!r} binds this profile's strategies too: "
                                       "protections hold for the whole policy, combined from every profile's so "
                                       "that none is lost"))  # fmt: skip
    explicit = {key for _, found in by_profile for key in found}
    return {k: v for k, v in combined.items() if k in explicit or v != DESCHEDULER_DEFAULTS.get(k)}


def _limits(top: Mapping[str, Any], notes: Notes) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    for key, (scope, meaning) in LIMITS.items():
        value = top.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SourceProblem(key, f"expected a whole number, not {value!r}")
        if value == 0:
            notes.add(Note.unsupported(key, "0: the descheduler evicts nothing; rebalancer's caps start at 1, so "
                                       "disable the strategies (enabled: false) to the same effect"))  # fmt: skip
            continue
        limits[scope] = {"maxPerCycle": value}
        notes.add(Note.differs(key, f"limits.{scope}.maxPerCycle: {meaning}"))
    selector = top.get("nodeSelector")
    if selector:
        limits["lists"] = {"nodes": {"whiteSelectors": [_node_selector(selector)]}}
        notes.add(Note.differs("nodeSelector", "limits.lists.nodes.whiteSelectors: only these nodes are relieved or "
                               "emptied; destinations are not narrowed"))  # fmt: skip
    return limits


_SELECTOR_TERM = re.compile(r"^\s*(!?)([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*))?\s*$")


def _node_selector(text: object) -> dict[str, Any]:
    """``key=value,key!=value,key,!key`` as a label selector (set-based ``in (...)`` is refused)."""
    if not isinstance(text, str):
        raise SourceProblem("nodeSelector", f"expected a label selector string, not {text!r}")
    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for term in text.split(","):
        match = _SELECTOR_TERM.match(term)
        if match is None:
            raise SourceProblem("nodeSelector", f"{term.strip()!r}: only key=value, key!=value, key and !key are read")
        negated, key, op, value = match.groups()
        if op in ("=", "=="):
            labels[key] = value or ""
        elif op == "!=":
            expressions.append({"key": key, "operator": "NotIn", "values": [value or ""]})
        else:
            expressions.append({"key": key, "operator": "DoesNotExist" if negated else "Exists"})
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    if expressions:
        out["matchExpressions"] = expressions
    return out


def _prometheus(top: Mapping[str, Any], notes: Notes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, raw in enumerate(sequence(top.get("metricsProviders"), "metricsProviders")):
        provider = mapping(raw, f"metricsProviders.{i}")
        prometheus = mapping(provider.get("prometheus"), f"metricsProviders.{i}.prometheus")
        if provider.get("source") == "Prometheus" and prometheus.get("url"):
            out["url"] = prometheus["url"]
            if prometheus.get("authToken"):
                notes.add(Note.differs(f"metricsProviders.{i}.prometheus.authToken", "mount the Secret's token in "
                                       "rebalancer's pod and name the file in prometheus.bearerTokenFile"))  # fmt: skip
        elif provider.get("source") == "KubernetesMetrics":
            notes.add(Note.differs(f"metricsProviders.{i}", "rebalancer reads usage from Prometheus, not the metrics "
                                   "server: set prometheus.url"))  # fmt: skip
    if top.get("metricsCollector"):
        notes.add(Note.differs("metricsCollector", "rebalancer reads usage from Prometheus, not the metrics server: "
                               "set prometheus.url"))  # fmt: skip
    return out


def _schedule(chart: Mapping[str, Any], strategies: list[dict[str, Any]], notes: Notes) -> None:
    if not chart:
        return
    if chart.get("kind", "CronJob") == "Deployment":
        interval = chart.get("deschedulingInterval")
        if isinstance(interval, str) and re.match(r"^[1-9][0-9]*(s|m|h)$", interval):
            for strategy in strategies:
                strategy["schedule"] = {"interval": interval}
            notes.add(Note.differs("deschedulingInterval", "each strategy's schedule.interval, run by `rebalancer "
                                   "serve` (the chart's kind: Deployment)"))  # fmt: skip
        elif interval is not None:
            notes.add(Note.unsupported("deschedulingInterval", f"{interval!r}: write it as one number and unit "
                                       "(90m, not 1h30m) in each strategy's schedule.interval"))  # fmt: skip
    elif isinstance(chart.get("schedule"), str):
        for strategy in strategies:
            strategy["schedule"] = {"cron": chart["schedule"]}
        notes.add(Note.differs("schedule", "copied to each strategy's schedule.cron, which `rebalancer serve` follows "
                               "(the chart's kind: Deployment); with the chart's kind: CronJob, set the chart's "
                               "schedule: to it instead"))  # fmt: skip
    same = sorted(k for k in chart if k in SAME_CHART_VALUES)
    if same:
        notes.add(Note.differs("chart values", f"{', '.join(same)}: deployment settings of the same name in "
                               "rebalancer's chart values (its priorityClassName defaults to system-cluster-critical "
                               "too)"))  # fmt: skip
    rest = sorted(k for k in chart if k not in CHART_SCHEDULE_KEYS and k not in SAME_CHART_VALUES)
    if rest:
        notes.add(Note.unsupported("chart values", f"{', '.join(rest)}: no policy setting; the migration guide "
                                   "(docs/migrating-from-descheduler.md) maps the chart's values"))  # fmt: skip


def _top_rest(source: Source, notes: Notes) -> None:
    known = {"apiVersion", "kind", "profiles", "strategies", "nodeSelector", "metricsProviders", "metricsCollector"}
    known |= set(LIMITS) | {"evictLocalStoragePods", "evictSystemCriticalPods", "ignorePvcPods", "evictFailedBarePods"}
    for key in source.top:
        if key in TOP_UNSUPPORTED:
            notes.add(Note.unsupported(key, TOP_UNSUPPORTED[key]))
        elif key not in known:
            notes.add(Note.unsupported(key, "unknown top-level field: not imported"))
