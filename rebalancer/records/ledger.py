"""What each cycle adds to the efficiency records (pure: the snapshot's time is the only clock).

* :func:`observe_cycle`, after the evictor: the hot nodes found (extending each node's hot episode), for
  each one not acted on the reason, one :class:`Relief` per node pods were evicted from, bounce-backs, and
  a per-cycle summary (found, evicted, blocked by limiter).
* :func:`judge_followups`, on every later snapshot: a pending relief is *cooled* as soon as a snapshot
  within its follow-up window shows the node under the strategy's target in every resource that was over
  its target when the node was relieved (CPU, memory, pod count); when the window has closed it is judged
  on the snapshot given, with the reason it did not cool (on the first snapshot not focused on other nodes:
  an alert's cycle reads the usage of its nodes' pods only, and the reason weighs the pods' usage). A judged
  resource with unknown usage is unknown: the relief is not cooled, and at the window's close it is judged
  unknown, never as zero usage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import msgspec

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.domain.efficiency_records import (
    COOLED,
    CPU,
    LANDED_BACK,
    NEW_PODS,
    NODE_GONE,
    OTHERS_GREW,
    TOO_LITTLE_MOVED,
    UNKNOWN,
    BounceBack,
    CycleSummary,
    EfficiencyState,
    EvictedPod,
    Relief,
    ResourceAtRelief,
    Sighting,
)
from rebalancer.domain.model import Pod
from rebalancer.domain.settings.efficiency import EfficiencySettings
from rebalancer.planning.plan import EvictionPlan, NodeClass, NodeDecision
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.records.moves import is_replacement, last_evictions
from strategies.resources import amount_text, node_amount, pod_amount

UID_CHARS = 12  # enough to tell a node's pods apart, a third of the record's size


def observe_cycle(
    state: EfficiencyState,
    snapshot: ClusterSnapshot,
    plan: EvictionPlan,
    report: EvictorReport,
    trigger: str,
    settings: EfficiencySettings,
) -> EfficiencyState:
    now = snapshot.taken_at
    hot = _hot_nodes(plan, snapshot)
    evicted = _evicted_by_node(report)
    reasons = _reasons(plan, report, hot, evicted)
    sightings = _sighted(state.sightings, hot, evicted, reasons, now, settings.episode_gap.total_seconds())
    pending = {r.node for r in state.reliefs if r.result is None and r.at < now}
    reliefs = [
        _relief(node, results, hot, snapshot, now, settings, node in pending)
        for node, results in sorted(evicted.items())
    ]
    bounces = _bounce_backs(state, evicted, snapshot, now, settings.bounce_back_memory.total_seconds())
    summary = CycleSummary(
        at=now,
        trigger=trigger,
        found=dict(Counter(d.pool for d in hot.values())),
        evicted=dict(Counter(r.eviction.pool for rs in evicted.values() for r in rs)),
        blocked=dict(Counter(r.limiter for r in report.results if r.outcome is Outcome.BLOCKED and r.limiter)),
        **_avoided(plan, snapshot),
    )
    return EfficiencyState(
        sightings=sightings,
        reliefs=state.reliefs + tuple(reliefs),
        bounce_backs=state.bounce_backs + tuple(bounces),
        cycles=(*state.cycles, summary),
    )


def _avoided(plan: EvictionPlan, snapshot: ClusterSnapshot) -> dict[str, dict[str, int]]:
    """Per pool, the candidates passed over so as not to bounce back (each pod once per cycle)."""
    back: dict[str, str] = {}
    moved: dict[str, str] = {}
    for result in plan.results:
        for d in result.pod_decisions:
            key = f"{d.namespace}/{d.name}"
            if d.chosen:
                continue
            if d.lands_back:
                back.setdefault(key, snapshot.pool_of.get(d.node, ""))
            elif (d.namespace, d.name) in snapshot.moved:
                moved.setdefault(key, snapshot.pool_of.get(d.node, ""))
    return {"lands_back": dict(Counter(back.values())), "recently_moved": dict(Counter(moved.values()))}


def _hot_nodes(plan: EvictionPlan, snapshot: ClusterSnapshot) -> dict[str, NodeDecision]:
    """Nodes some strategy classified hot (the first such decision per node); in an alert's cycle only
    the alerted nodes (the others are left to the scheduled cycles)."""
    hot: dict[str, NodeDecision] = {}
    for result in plan.results:
        for decision in result.node_decisions:
            wanted = snapshot.focus is None or decision.node in snapshot.focus
            if wanted and decision.node_class is NodeClass.HOT and decision.node not in hot:
                hot[decision.node] = decision
    return hot


def _evicted_by_node(report: EvictorReport) -> dict[str, list[EvictionResult]]:
    out: dict[str, list[EvictionResult]] = {}
    for result in report.results:
        if result.outcome is Outcome.EVICTED:
            out.setdefault(result.eviction.node, []).append(result)
    return out


_OUTCOME_REASONS = {
    Outcome.REJECTED: "disruption-budget",
    Outcome.BACKOFF: "disruption-budget",
    Outcome.DRY_RUN: "dry-run",
    Outcome.SERVER_DRY_RUN: "dry-run",
}


def outcome_reason(result: EvictionResult) -> str:
    """Why a planned eviction did not happen, as a reason code (``limiter:<name>`` for a limiter)."""
    if result.outcome is Outcome.BLOCKED:
        return f"limiter:{result.limiter}" if result.limiter else "limiter"
    return _OUTCOME_REASONS.get(result.outcome, f"eviction-{result.outcome.value}")


def _reasons(
    plan: EvictionPlan,
    report: EvictorReport,
    hot: Mapping[str, NodeDecision],
    evicted: Mapping[str, list[EvictionResult]],
) -> dict[str, str]:
    """For each hot node no pod was evicted from: why (the evictor's outcome when something was planned
    for it, else the strategy's reason for planning nothing)."""
    by_node: dict[str, str] = {}
    for result in report.results:
        node = result.eviction.node
        if node in hot and node not in evicted and node not in by_node:
            by_node[node] = outcome_reason(result)
    for strategy_result in plan.results:
        for node, code in strategy_result.unrelieved.items():
            if node in hot and node not in evicted:
                by_node.setdefault(node, code.value)
    if report.aborted:
        for node in hot:
            if node not in evicted:
                by_node.setdefault(node, "cycle-aborted")
    return {node: by_node.get(node, "not-planned") for node in hot if node not in evicted}


def _sighted(
    sightings: tuple[Sighting, ...],
    hot: Mapping[str, NodeDecision],
    evicted: Mapping[str, list[EvictionResult]],
    reasons: Mapping[str, str],
    now: float,
    gap: float,
) -> tuple[Sighting, ...]:
    latest = {s.node: i for i, s in enumerate(sightings)}
    out = list(sightings)
    for node, decision in hot.items():
        acted = node in evicted
        why = reasons.get(node)
        index = latest.get(node)
        if index is not None and now - out[index].last <= gap and now >= out[index].last:
            s = out[index]
            counts = dict(s.reasons)
            if why is not None:
                counts[why] = counts.get(why, 0) + 1
            out[index] = msgspec.structs.replace(
                s, last=now, cycles=s.cycles + 1, acted=s.acted or acted, reasons=counts
            )
        else:
            out.append(Sighting(node, decision.pool, now, now, 1, acted, {why: 1} if why else {}))
    return tuple(out)


def _relief(
    node: str,
    results: list[EvictionResult],
    hot: Mapping[str, NodeDecision],
    snapshot: ClusterSnapshot,
    now: float,
    settings: EfficiencySettings,
    repeat: bool,
) -> Relief:
    first = results[0].eviction
    decision = hot.get(node)
    gone = {r.eviction.uid for r in results}
    pods = {p.uid: p for p in snapshot.pods_on(node)}
    remaining = _stayed(pods, gone, snapshot.usage_of)
    others = () if decision is None else tuple(ResourceAtRelief(u.resource, u.pct, u.high_pct) for u in decision.others)
    return Relief(
        node=node,
        pool=first.pool,
        strategy=first.strategy,
        at=now,
        target_pct=_target(decision, snapshot, node),
        usage_pct=(decision.usage_pct if decision and decision.usage_pct is not None else _pct(snapshot, node)) or 0.0,
        evicted=tuple(
            EvictedPod(
                r.eviction.namespace,
                r.eviction.name,
                None if r.eviction.workload is None else str(r.eviction.workload),
                r.eviction.usage_m,
                pods[r.eviction.uid].created if r.eviction.uid in pods else 0.0,
                predicted=r.eviction.landing,
                memory=_memory_at_eviction(snapshot, node, pods.get(r.eviction.uid)),
            )
            for r in results
        ),
        deadline=now + settings.follow_up_window.total_seconds(),
        remaining=remaining,
        measured_m=snapshot.measured_usage(node),
        cold_pct=decision.low_pct if decision is not None else None,
        repeat=repeat,
        others=others,
        remaining_memory=_stayed(pods, gone, snapshot.memory_of)
        if any(o.over and o.resource == "memory" for o in others)
        else None,
        measured_memory=snapshot.measured_memory(node),
    )


def _memory_at_eviction(snapshot: ClusterSnapshot, node: str, pod: Pod | None) -> int | None:
    """The evicted pod's working set for the in-flight correction: -1 unknown, None when the cycle read no
    memory for its node (nothing to correct)."""
    load = snapshot.load.get(node)
    if load is None or (load.memory_usage is None and load.memory_unknown_reason is None):
        return None
    found = None if pod is None else snapshot.memory_of(pod)
    return -1 if found is None else found


def _target(decision: NodeDecision | None, snapshot: ClusterSnapshot, node: str) -> float:
    if decision is not None and decision.high_pct is not None:
        return decision.high_pct
    return 100.0  # evicted from a node no strategy called hot (HighNodeUtilization): cooled when not full


def _stayed(pods: Mapping[str, Pod], gone: set[str], amount: Callable[[Pod], int | None]) -> dict[str, int]:
    """Short uid -> ``amount`` (CPU usage, working set; -1 unknown) of the pods that stayed on the node."""
    out = {}
    for uid, pod in pods.items():
        if uid not in gone:
            value = amount(pod)
            out[uid[:UID_CHARS]] = -1 if value is None else value
    return out


def _pct(snapshot: ClusterSnapshot, node: str) -> float | None:
    """The node's measured usage (a follow-up judges what happened, not the in-flight correction)."""
    n = snapshot.nodes.get(node)
    usage = snapshot.measured_usage(node)
    if n is None or usage is None or n.allocatable_cpu_m <= 0:
        return None
    return 100.0 * usage / n.allocatable_cpu_m


def _bounce_backs(
    state: EfficiencyState,
    evicted: Mapping[str, list[EvictionResult]],
    snapshot: ClusterSnapshot,
    now: float,
    memory: float,
) -> Iterable[BounceBack]:
    earlier = last_evictions(state, now, memory)
    for node, results in evicted.items():
        pods = {p.uid: p for p in snapshot.pods_on(node)}
        for result in results:
            e = result.eviction
            workload = None if e.workload is None else str(e.workload)
            previous = earlier.get(workload) if workload else None
            pod = pods.get(e.uid)
            if workload and previous is not None and pod is not None and is_replacement(pod.created, previous):
                yield BounceBack(now, workload, node, e.pool, previous.node, previous.at)


# -- follow-up ------------------------------------------------------------------------------------


def judge_followups(
    state: EfficiencyState, snapshot: ClusterSnapshot, only: Callable[[Relief], bool] | None = None
) -> EfficiencyState:
    """Judge the pending reliefs this snapshot can decide (see the module docstring); ``only``: just those
    (a snapshot at a past time, built for some nodes, says nothing about the others)."""
    if not any(r.result is None for r in state.reliefs):
        return state
    reliefs = tuple(r if only is not None and not only(r) else _judged(r, snapshot) for r in state.reliefs)
    return msgspec.structs.replace(state, reliefs=reliefs)


def overdue(state: EfficiencyState, now: float, grace: float) -> dict[float, frozenset[str]]:
    """Pending reliefs whose window closed more than ``grace`` ago, by deadline: their nodes. (A CronJob
    runs rarely: they are judged on the usage read at their deadline, not on today's.)"""
    out: dict[float, set[str]] = {}
    for r in state.reliefs:
        if r.result is None and r.deadline < now - grace:
            out.setdefault(r.deadline, set()).add(r.node)
    return {deadline: frozenset(nodes) for deadline, nodes in sorted(out.items())}


def _judged(relief: Relief, snapshot: ClusterSnapshot) -> Relief:
    now = snapshot.taken_at
    if relief.result is not None or now <= relief.at:
        return relief
    closed = now >= relief.deadline
    if relief.node not in snapshot.nodes:
        return _closed(relief, NODE_GONE, now, None, "the node left the cluster") if closed else relief
    pct = _pct(snapshot, relief.node)
    readings = [_Reading(r, target, _resource_pct(snapshot, relief.node, r)) for r, target in relief.judged_on]
    if all(reading.under for reading in readings):
        return _closed(relief, COOLED, now, pct, "; ".join(str(reading) for reading in readings))
    if not closed:
        return relief
    if snapshot.focus is not None and relief.node not in snapshot.focus:
        return relief  # an alert's cycle read the pods' usage of its nodes only: a full cycle tells why
    unknown = [reading.resource for reading in readings if reading.pct is None]
    if unknown:
        why = "; ".join(f"{_label(r)}: {_unknown_reason(snapshot, relief.node, r)}" for r in unknown)
        return _closed(relief, UNKNOWN, now, pct, f"usage unknown when the window closed: {why}")
    over = [reading for reading in readings if not reading.under]
    reason, detail = _why_not_cooled(relief, snapshot, over[0].resource)
    return _closed(relief, reason, now, pct, f"{', '.join(str(reading) for reading in over)}: {detail}")


@dataclass(frozen=True, slots=True)
class _Reading:
    """One judged resource of a relieved node at its follow-up."""

    resource: str
    target_pct: float
    pct: float | None

    @property
    def under(self) -> bool:
        return self.pct is not None and self.pct < self.target_pct

    def __str__(self) -> str:
        sign = "<" if self.under else ">="
        return f"{_label(self.resource)} {self.pct or 0.0:.1f}% {sign} target {self.target_pct:.1f}%"


def _label(resource: str) -> str:
    return "CPU" if resource == CPU else resource


def _resource_pct(snapshot: ClusterSnapshot, node: str, resource: str) -> float | None:
    """The node's measured use of ``resource`` in percent of its allocatable amount (None: unknown)."""
    if resource == CPU:
        return _pct(snapshot, node)
    used, allocatable, _ = node_amount(snapshot, node, resource)
    if resource == "memory":
        used = snapshot.measured_memory(node)  # what happened, not the in-flight correction
    return None if used is None or allocatable <= 0 else 100.0 * used / allocatable


def _unknown_reason(snapshot: ClusterSnapshot, node: str, resource: str) -> str:
    if resource == CPU:
        return snapshot.load[node].unknown_reason or "usage unknown"
    used, _, why = node_amount(snapshot, node, resource)
    return why or ("usage unknown" if used is None else f"node reports no allocatable {resource}")


def close_oldest_pending(state: EfficiencyState, now: float, count: int, detail: str) -> EfficiencyState:
    """The oldest ``count`` pending reliefs closed now as unknown (their lists of the pods that stayed go),
    ``detail`` saying why; every other record as it is."""
    pending = sorted((r for r in state.reliefs if r.result is None), key=lambda r: (r.at, r.node))
    closing = {(r.node, r.at) for r in pending[:count]}
    reliefs = tuple(_closed(r, UNKNOWN, now, None, detail) if (r.node, r.at) in closing else r for r in state.reliefs)
    return msgspec.structs.replace(state, reliefs=reliefs)


def _closed(relief: Relief, result: str, now: float, pct: float | None, detail: str) -> Relief:
    return msgspec.structs.replace(
        relief,
        result=result,
        judged_at=now,
        usage_pct_after=pct,
        remaining=None,
        remaining_memory=None,
        detail=detail,
    )


def _why_not_cooled(relief: Relief, snapshot: ClusterSnapshot, resource: str) -> tuple[str, str]:
    """Why ``resource`` of the node is still over its target: the evicted workload came back, new pods, the
    pods that stayed grew, or the evictions took too little off."""
    stayed = relief.remaining or {}
    before = relief.remaining_memory if resource == "memory" else stayed
    workloads = {e.workload for e in relief.evicted if e.workload is not None}
    evicted = {(e.namespace, e.name) for e in relief.evicted}
    landed: list[str] = []
    new_amount = grown = 0
    new_count = new_unknown = 0  # new pods, and those of them whose usage is unknown (too young to be read)
    for pod in snapshot.pods_on(relief.node):
        if (pod.namespace, pod.name) in evicted:  # still terminating: neither new nor its own replacement
            continue
        amount = pod_amount(snapshot, pod, resource)
        uid = pod.uid[:UID_CHARS]
        if uid not in stayed:
            new_count += 1
            new_unknown += amount is None
            new_amount += amount or 0
            if pod.workload is not None and str(pod.workload) in workloads and pod.created >= relief.at - 1.0:
                landed.append(f"{pod.namespace}/{pod.name}")
        elif resource != "pods" and before is not None:
            was = before.get(uid)
            if was is not None and was >= 0 and amount is not None:
                grown += amount - was
    if landed:
        return LANDED_BACK, f"the evicted workload came back: {', '.join(sorted(landed))}"
    if new_amount <= 0 and grown <= 0 and not new_unknown:
        return TOO_LITTLE_MOVED, "no pod came and the others did not grow: the evictions took too little off"
    new_text, grown_text = amount_text(resource, new_amount), amount_text(resource, grown)
    if new_unknown:
        new_text += f", {new_unknown} of them not measured yet"
    if new_amount >= grown or (new_unknown and grown <= 0):
        return NEW_PODS, f"{new_count} pod(s) scheduled onto it since use {new_text} (the others grew {grown_text})"
    return OTHERS_GREW, f"the pods that stayed grew {grown_text} (new pods use {new_text})"
