"""One planning cycle: facts and usage -> snapshot -> strategies -> plan (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from rebalancer.actions.guard.decide import decide, guarded_nodes, pool_sizes
from rebalancer.actions.guard.inputs import with_changes
from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.domain.model import ClusterFacts, PodKey, UsageReport
from rebalancer.domain.settings.node_sources import POD_SUM
from rebalancer.domain.timeline import Timeline
from rebalancer.planning.inflight import (
    Correction,
    EarlierReliefs,
    MemoryCorrection,
    Moves,
    Reading,
    corrected,
    corrected_memory,
    describe,
    in_flight,
    memory_in_flight,
)
from rebalancer.planning.plan import EvictionPlan, NodeClass, StrategyResult
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot, NodeLoad, after_evictions, build_snapshot
from rebalancer.policy import Policy
from rebalancer.records.landings import observe_landings
from strategies import build
from strategies.base import ClassifiesNodes, ReadsPodMemory


def plan_cycle(
    facts: ClusterFacts,
    usage: UsageReport,
    policy: Policy,
    taken_at: float,
    focus: frozenset[str] | None = None,
    predicted: PredictedLoad | None = None,
    timeline: Timeline | None = None,
    moved: Mapping[PodKey, str] | None = None,
    reliefs: EarlierReliefs | None = None,
) -> tuple[ClusterSnapshot, EvictionPlan]:
    """``focus``: the nodes an alert named; only they are relieved (None: every hot node).
    ``predicted``: the next-peak load, for strategies that classify by prediction. ``moved``: pods the
    bounce-back guard keeps in place (``rebalancer.records.recently_moved``), with the reason. ``reliefs``: the earlier
    reliefs from the efficiency records; a node's usage is corrected by those its reading still covers
    (:mod:`rebalancer.planning.inflight`), so every strategy and the landing guard plan on the same corrected usage
    (None: no records, no correction). The pods' memory is the usage's (a live cycle reads only the hot
    nodes' between :func:`prepare_cycle` and :func:`plan_prepared`)."""
    timeline = timeline or Timeline()
    snapshot = prepare_cycle(facts, usage, policy, taken_at, focus, predicted, timeline, moved, reliefs)
    return snapshot, plan_prepared(snapshot, policy, timeline)


def prepare_cycle(
    facts: ClusterFacts,
    usage: UsageReport,
    policy: Policy,
    taken_at: float,
    focus: frozenset[str] | None = None,
    predicted: PredictedLoad | None = None,
    timeline: Timeline | None = None,
    moved: Mapping[PodKey, str] | None = None,
    reliefs: EarlierReliefs | None = None,
) -> ClusterSnapshot:
    """The snapshot :func:`plan_cycle` plans on (the arguments are its)."""
    with (timeline or Timeline()).step("snapshot"):
        snapshot = build_snapshot(facts, usage, policy.pools, taken_at, focus)
        if reliefs is not None:
            reliefs = with_landings(reliefs, facts, taken_at, policy.efficiency.follow_up_window.total_seconds())
            reading, memory_reading = usage_reading(policy), usage_reading(policy, gauge=True)
            snapshot = with_in_flight(snapshot, reliefs, reading, memory_reading)
        if predicted is not None:
            snapshot = replace(snapshot, predicted=predicted)
        if moved:
            snapshot = replace(snapshot, moved=moved)
        return with_marks_ahead(snapshot, policy)


MODEL_OWNER = "rebalancer/landing-model"  # the owner of the marks the landing prediction assumes (never written)


def with_marks_ahead(snapshot: ClusterSnapshot, policy: Policy) -> ClusterSnapshot:
    """The snapshot with the landing guard's marks as its pass ahead of the evictions will leave them: the
    guard's own decision (:func:`rebalancer.actions.guard.decide.decide`), made once, before planning, on the
    classes of the strategies whose landing prediction weighs the marks, with every hot node as one the plan
    may relieve. The pass ahead of the evictions ranks the same nodes the same way, so the marks the
    prediction assumes are the marks set (``maxMarkedFraction`` may leave some relieved nodes unmarked)."""
    guard = policy.landing_guard
    if not guard.enabled:
        return snapshot
    results: list[StrategyResult] = []
    for settings in policy.strategies:
        strategy = build(settings) if settings.enabled else None
        if isinstance(strategy, ClassifiesNodes):
            results.append(StrategyResult(strategy.name, (), strategy.node_decisions(snapshot), ()))
    if not results:
        return snapshot
    blocked = None if snapshot.usage_failure is None else f"usage source failed: {snapshot.usage_failure}"
    classified = EvictionPlan(snapshot.taken_at, tuple(results), blocked)
    relievable = frozenset(d.node for r in results for d in r.node_decisions if d.node_class is NodeClass.HOT)
    nodes = guarded_nodes(snapshot, classified, (), relievable=relievable)
    decision = decide(nodes, guard, MODEL_OWNER, snapshot.taken_at, pool_sizes(snapshot))
    marked = with_changes(snapshot, decision.changes).nodes
    ahead = {c.node: marked[c.node] for c in decision.changes if c.node in marked}
    return replace(snapshot, marks_ahead=MappingProxyType(ahead), relievable=relievable)


def pod_memory_nodes(snapshot: ClusterSnapshot, policy: Policy) -> frozenset[str]:
    """The nodes whose pods' memory the policy's strategies need on this snapshot (those they may relieve:
    a destination is weighed by its node's own reading). Empty when no strategy reads memory; when one
    does, those of every strategy that evicts, memory thresholds or not: the records keep each evicted
    pod's memory, so that the nodes it left and landed on stay known to the in-flight correction."""
    enabled = [settings for settings in policy.strategies if settings.enabled]
    if snapshot.usage_failure or not any(settings.reads_memory_usage() for settings in enabled):
        return frozenset()
    wanted: set[str] = set()
    for settings in enabled:
        strategy = build(settings)
        if isinstance(strategy, ReadsPodMemory):
            wanted |= strategy.memory_sources(snapshot)
    return frozenset(wanted)


def with_pod_memory(snapshot: ClusterSnapshot, found: Mapping[PodKey, int] | str) -> ClusterSnapshot:
    """The snapshot with the pods' memory read after it was made, or, when that read failed (``found`` is
    the cause), with the cycle's usage failed: no evictions on what the plan could not know."""
    if isinstance(found, str):
        return replace(snapshot, usage_failure=found)
    return replace(snapshot, pod_memory=MappingProxyType({**snapshot.pod_memory, **found}))


def plan_prepared(snapshot: ClusterSnapshot, policy: Policy, timeline: Timeline | None = None) -> EvictionPlan:
    """Every enabled strategy in order, each on what the previous ones moved."""
    protections = Protections.from_settings(policy.protections)
    results = []
    seen = snapshot
    with (timeline or Timeline()).step("plan"):
        for settings in policy.strategies:
            if not settings.enabled:
                continue
            result = build(settings).plan(seen, protections)
            results.append(result)
            seen = after_evictions(seen, result.evictions, result.emptied)  # the next one plans on these moves
            if result.peak_caps and seen.predicted is not None:  # a node relieved before its peak stays so
                seen = replace(seen, predicted=seen.predicted.with_caps(result.peak_caps))
    failure = snapshot.usage_failure
    blocked = f"usage source failed, no evictions this cycle: {failure}" if failure else None
    corrections = tuple(snapshot.in_flight.values())
    return EvictionPlan(snapshot.taken_at, tuple(results), blocked, corrections, snapshot.in_flight_off)


def usage_reading(policy: Policy, gauge: bool = False) -> Reading:
    """The statistic a node's usage reading is (:class:`rebalancer.planning.reading_model.Reading`): the
    policy's quantile over its window of samples of a rate over ``rateWindow``; ``gauge``: the memory working
    set's, the same statistic without a rate window."""
    p = policy.prometheus
    window, rate_window, step = (d.total_seconds() for d in (p.window, p.rate_window, p.step))
    return Reading(window, p.quantile, 0.0 if gauge else rate_window, step)


def with_landings(reliefs: EarlierReliefs, facts: ClusterFacts, now: float, window_seconds: float) -> EarlierReliefs:
    """The earlier reliefs with the replacements these facts show bound (the records learn them only after
    the cycle): a pod whose replacement is back on its node has not left it."""
    if not reliefs.known:
        return reliefs
    seen = observe_landings(EfficiencyState(reliefs=reliefs.known), facts, now, window_seconds)
    return replace(reliefs, known=seen.reliefs)


def with_in_flight(
    snapshot: ClusterSnapshot, reliefs: EarlierReliefs, reading: Reading, memory_reading: Reading | None = None
) -> ClusterSnapshot:
    """The snapshot with each node's usage corrected by the earlier reliefs its reading does not show yet:
    CPU by ``reading``, the memory working set (when read) by ``memory_reading`` (None: memory not
    corrected). A node's CPU usage summed from its pods' (the podSum node source) already leaves out an
    evicted pod and counts its replacement where it runs: nothing to correct there (its memory is still a
    node reading)."""
    if reliefs.missing is not None:
        return replace(snapshot, in_flight_off=reliefs.missing)
    if not reliefs.known:
        return snapshot
    now = snapshot.taken_at
    started = replacements_started(snapshot, reliefs)
    flights = in_flight(reliefs.known, now, reading, started)
    memory = {} if memory_reading is None else memory_in_flight(reliefs.known, now, memory_reading, started)
    load = dict(snapshot.load)
    corrections: dict[str, Correction] = {}
    for name in sorted(flights.keys() | memory.keys()):
        node, current = snapshot.nodes.get(name), load.get(name)
        if node is None or current is None or current.usage_m is None:
            continue  # gone, or unknown (its memory with it): unknown stays unknown
        flight = None if current.usage_source == POD_SUM else flights.get(name)
        value = current.usage_m if flight is None else corrected(current.usage_m, flight)
        assert value is not None
        on_memory = _memory_correction(current, memory.get(name))
        if value == current.usage_m:
            if on_memory is None:
                continue
            flight = None  # the CPU reading stands
        note = describe(flight, current.usage_m, value, node.allocatable_cpu_m, now, on_memory, node.allocatable_memory)
        corrections[name] = Correction(name, current.usage_m, value, flight, note, on_memory)
        load[name] = _corrected_load(current, value, on_memory)
    if not corrections:
        return snapshot
    return replace(snapshot, load=MappingProxyType(load), in_flight=MappingProxyType(corrections))


def replacements_started(snapshot: ClusterSnapshot, reliefs: EarlierReliefs) -> dict[str, float | None]:
    """The replacements the reliefs saw landing ("namespace/name") that are still on that node, with when
    each started: its creation when it runs, None while it is bound but not started (Pending)."""
    wanted: dict[str, set[str]] = {}
    for relief in reliefs.known:
        for evicted in relief.evicted:
            if evicted.landed is not None and evicted.replacement is not None and evicted.landed != relief.node:
                wanted.setdefault(evicted.landed, set()).add(evicted.replacement)
    started: dict[str, float | None] = {}
    for node, names in wanted.items():
        for pod in snapshot.pods_on(node):
            name = f"{pod.namespace}/{pod.name}"
            if name in names:
                started[name] = pod.created if pod.phase == "Running" else None
    return started


def _memory_correction(current: NodeLoad, moves: Moves | None) -> MemoryCorrection | None:
    """The node's memory reading corrected by ``moves`` (None: not read, unknown, or unchanged)."""
    if moves is None or current.memory_usage is None:
        return None
    value = corrected_memory(current.memory_usage, moves)
    return None if value == current.memory_usage else MemoryCorrection(current.memory_usage, value, moves)


def _corrected_load(current: NodeLoad, usage_m: int, memory: MemoryCorrection | None) -> NodeLoad:
    if memory is None:
        return replace(current, usage_m=usage_m)
    why = None
    if memory.corrected is None:
        why = f"the memory of moved pod {memory.moves.unknown} is unknown: the reading cannot be corrected until it shows the move"
    return replace(current, usage_m=usage_m, memory_usage=memory.corrected, memory_unknown_reason=why)
