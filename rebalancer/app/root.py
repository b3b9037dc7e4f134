"""Composition root: the one place that builds real clients and hands them to the pure core."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rebalancer.actions.evictor import DryRun, Evictor, EvictorReport
from rebalancer.actions.guard.applier import GuardReport
from rebalancer.actions.steerer import Steerer, SteeringReport, steering_rules
from rebalancer.actions.timed import TimedActions, TimedStore
from rebalancer.adapters.kube import ConfigMapStateStore, KubeActions, KubeSource, PodAnnotator, connect
from rebalancer.adapters.kube.workload_pods import WORKLOAD_KINDS, WorkloadPodsReader
from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.app import collector
from rebalancer.app.efficiency import RECORDS_KEY, Earlier, EfficiencyRecorder, Recorded
from rebalancer.app.explain import ScaleDownExplanation, explain
from rebalancer.app.guard import guard_after_cycle, guard_before_evictions, preview
from rebalancer.app.prediction import needs_prediction, predicted_load
from rebalancer.app.runtime import Clock, Focus, Runtime
from rebalancer.domain.errors import ConfigError, SourceError
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.domain.redaction import redact_url
from rebalancer.domain.timeline import Timeline
from rebalancer.planning.inflight import EarlierReliefs
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.predict.predictor import predict
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle, plan_prepared, pod_memory_nodes, prepare_cycle, with_pod_memory

log = logging.getLogger(__name__)
MAX_TARGETED_NODES = 20  # more alerted nodes at once: a full listing is cheaper than one per node
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    snapshot: ClusterSnapshot
    plan: EvictionPlan
    source: str
    facts: ClusterFacts | None = None  # what the Kubernetes API said (kept by the service for alerts)


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    kubeconfig: str | None = None
    context: str | None = None


def connect_runtime(
    policy: Policy, connection: ClusterConnection, dry_run: DryRun = DryRun.OFF, clock: Clock = time.time
) -> Runtime:
    """The runtime of one command: a new connection to the cluster, the usage source opened per cycle."""
    return Runtime(policy, connect(connection.kubeconfig, connection.context), clock, dry_run)


def plan_live(
    runtime: Runtime,
    focus: Focus | None = None,
    *,
    timeline: Timeline | None = None,
    earlier: Callable[[ClusterFacts, float], Earlier] | None = None,
) -> PlanOutcome:
    """Read the cluster and Prometheus (at once, when the cluster is listed), then plan. A failed usage
    read blocks evictions, not the plan.

    With the runtime's watch cache (``watched``) nothing is listed. Otherwise with a ``focus`` (an alert's
    nodes) and its recent facts, only those nodes are listed afresh. ``timeline`` receives the time of each
    step. ``earlier``: the bounce-back guard's pods for these facts and the earlier reliefs (read from the
    efficiency records; None: neither). The collector is paused while the cluster is listed and while the
    plan is made (:mod:`rebalancer.app.collector`)."""
    timeline = timeline or Timeline()
    policy = runtime.policy
    nodes = focus.nodes if focus is not None else None
    memory = policy.reads_memory
    now = runtime.clock()
    with contextlib.ExitStack() as opened:
        source = runtime.usage or opened.enter_context(PrometheusUsageSource(policy.prometheus))

        def usage_now() -> UsageReport:
            usage = read_usage(lambda at: source.read(at, nodes, memory=memory, pod_memory=False), now)
            collector.untrack_young()  # its per-pod keys, while in the CPU cache, if a listing paused the collector
            return usage

        if runtime.watched is not None:
            with timeline.step("facts"):
                facts = runtime.watched()
            with timeline.step("usage"):
                usage = usage_now()
        else:
            # Prometheus answers while the pods are listed and decoded; its errors still block evictions
            # (read_usage), anything else it raises is raised here, after the listing
            with ThreadPoolExecutor(1, thread_name_prefix="usage-read") as reader:
                pending = reader.submit(usage_now)
                with timeline.step("facts"):
                    kube = KubeSource(
                        runtime.api,
                        Protections.from_settings(policy.protections).annotations_read(),
                        list_mode=policy.kubernetes.list_mode,
                        encoding=policy.kubernetes.encoding,
                    )
                    with collector.paused():
                        facts = read_facts(kube, focus)
                    timeline.mark(f"pods-{kube.last_stats.modes.get('pods', 'paged')}")  # how the pods were read
                with timeline.step("usage"):  # only what the listing did not hide
                    usage = pending.result()
        predicted = None
        if needs_prediction(policy):
            with timeline.step("prediction"):
                predicted = predicted_load(policy, facts, now, runtime.history)
        guarded, reliefs = None, None
        if earlier is not None:
            with timeline.step("guard"):
                guarded, reliefs = earlier(facts, now)
        with collector.paused():  # planning makes little cyclic garbage; collections were 7% of a 150,000-pod plan
            snapshot = prepare_cycle(facts, usage, policy, now, nodes, predicted, timeline, guarded, reliefs)
            if memory:
                snapshot = read_pod_memory(snapshot, policy, source, timeline)
            plan = plan_prepared(snapshot, policy, timeline)
    return PlanOutcome(snapshot, plan, f"cluster, usage from {redact_url(policy.prometheus.url)}", facts)


def plan_now(policy: Policy, connection: ClusterConnection, clock: Clock = time.time) -> PlanOutcome:
    """``rebalancer plan``: what a cycle would plan now, with the efficiency records read (never written),
    so the plan counts the earlier reliefs and keeps the bounce-back guard's pods as a cycle would."""
    runtime = connect_runtime(policy, connection, clock=clock)
    earlier: Callable[[ClusterFacts, float], Earlier]
    try:
        namespace = state_namespace(policy.state.namespace)
    except ConfigError as exc:
        missing = f"the efficiency records cannot be found: {exc}"
        earlier = lambda facts, now: ({}, EarlierReliefs(missing=missing))  # noqa: E731
    else:
        store = ConfigMapStateStore(runtime.api, namespace, policy.state.efficiency_config_map, RECORDS_KEY)
        earlier = EfficiencyRecorder(store, policy.efficiency, policy.pools, write=False).earlier
    return plan_live(runtime, earlier=earlier)


def guard_preview(policy: Policy, planned: PlanOutcome) -> GuardReport | None:
    """The landing guard's marks if the plan's evictions happened (`rebalancer plan`; None: no guard, no mark)."""
    return preview(policy, planned.snapshot, planned.plan)


def read_facts(kube: KubeSource, focus: Focus | None) -> ClusterFacts:
    """The whole cluster; or, for an alert's few nodes when recent facts are at hand, only those nodes
    and their pods (field selector ``spec.nodeName``), the rest taken from the recent facts (destinations
    only receive load: their pods are never evicted in a focused cycle)."""
    if focus is None or focus.known is None or len(focus.nodes) > MAX_TARGETED_NODES:
        return kube.read_facts()
    known = focus.known
    fresh = kube.read_nodes_facts(sorted(focus.nodes))
    nodes = {n.name: n for n in known.nodes}
    nodes.update((n.name, n) for n in fresh.nodes)
    pods = [p for p in known.pods if p.node_name not in focus.nodes]
    pods += fresh.pods
    return ClusterFacts(tuple(nodes.values()), tuple(pods), fresh.budgets, known.resource_version)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    planned: PlanOutcome
    report: EvictorReport
    efficiency: Recorded = field(
        default_factory=lambda: Recorded(None)
    )  # the records after this cycle (None: off, or not written)
    steering: SteeringReport = field(default_factory=SteeringReport)  # pod-deletion-cost patches (steering)
    guard: GuardReport = field(default_factory=GuardReport)  # landing-guard marks set, renewed, cleared


def run_once(
    policy: Policy, connection: ClusterConnection, dry_run: DryRun = DryRun.OFF, clock: Clock = time.time
) -> RunOutcome:
    """One CronJob cycle: snapshot, plan, limits, evict, persist."""
    return run_cycle(connect_runtime(policy, connection, dry_run, clock), trigger="once")


def run_cycle(
    runtime: Runtime, trigger: str = "schedule", focus: Focus | None = None, timeline: Timeline | None = None
) -> RunOutcome:
    """Check that the state can be written, then snapshot, plan, limits, evict, persist, then the efficiency
    records, on the runtime's connection (CronJob and service alike); dry runs check the state too.

    ``trigger`` (schedule, alert, once) is kept in the efficiency records."""
    timeline = timeline or Timeline()
    policy, api, dry_run, may_act = runtime.policy, runtime.api, runtime.dry_run, runtime.may_act
    namespace = state_namespace(policy.state.namespace)
    with timeline.step("state-access"):
        runtime.access().check(policy, namespace)
    records = ConfigMapStateStore(api, namespace, policy.state.efficiency_config_map, RECORDS_KEY)
    recorder = EfficiencyRecorder(
        TimedStore(records, timeline, "efficiency"),
        policy.efficiency,
        policy.pools,
        write=dry_run is DryRun.OFF,  # a dry run changes nothing, the records included
    )
    planned = plan_live(runtime, focus, timeline=timeline, earlier=recorder.earlier)
    evictor = Evictor(
        actions=TimedActions(KubeActions(api), timeline),
        limits_store=TimedStore(ConfigMapStateStore(api, namespace, policy.state.config_map), timeline, "limits"),
        backoff_store=TimedStore(
            ConfigMapStateStore(api, namespace, policy.state.backoff_config_map), timeline, "backoff"
        ),
        settings=policy.limits,
        protections=Protections.from_settings(policy.protections),
        dry_run=dry_run,
        requester=runtime.requester,
        clock=runtime.clock,
        may_act=may_act,
    )
    with timeline.step("landing-guard"):
        early, marked = guard_before_evictions(runtime, planned.snapshot, planned.plan)
    with timeline.step("evictor"):
        report = evictor.apply(planned.plan, planned.snapshot)
    steering = SteeringReport()
    if planned.plan.cost_patches:
        steerer = Steerer(
            PodAnnotator(api),
            KubeActions(api),
            steering_rules(policy.strategies),
            Protections.from_settings(policy.protections),
            dry_run,
            may_act=may_act,
            buckets=runtime.steering_buckets,
        )
        with timeline.step("steerer"):
            steering = steerer.apply(planned.plan, planned.snapshot)
    with timeline.step("landing-guard"):
        late = guard_after_cycle(runtime, marked, planned.plan, report)
    guard = GuardReport(early.results + late.results, notes=late.notes)
    with timeline.step("efficiency"):
        recorded = _record(runtime, recorder, planned, report, trigger)
    return RunOutcome(planned, report, recorded, steering, guard)


def _record(
    runtime: Runtime, recorder: EfficiencyRecorder, planned: PlanOutcome, report: EvictorReport, trigger: str
) -> Recorded:
    if not runtime.policy.efficiency.enabled:
        return Recorded(None)
    if runtime.usage is not None:
        return recorder.record(planned.snapshot, planned.plan, report, trigger, planned.facts, runtime.usage.read)
    with PrometheusUsageSource(runtime.policy.prometheus) as source:  # opened only if a follow-up is overdue
        return recorder.record(planned.snapshot, planned.plan, report, trigger, planned.facts, source.read)


def state_namespace(configured: str | None) -> str:
    """The namespace of the state ConfigMaps: the policy's, else $POD_NAMESPACE, else the service account's."""
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        raise ConfigError(
            "policy",
            [
                (
                    "state.namespace",
                    f"not set, and neither $POD_NAMESPACE nor {SERVICE_ACCOUNT_NAMESPACE} says where rebalancer runs",
                )
            ],
        ) from None


def read_pod_memory(
    snapshot: ClusterSnapshot, policy: Policy, source: PrometheusUsageSource, timeline: Timeline
) -> ClusterSnapshot:
    """The snapshot with the memory of the pods on the nodes the strategies may relieve, read at the
    snapshot's time; a failed read fails the cycle's usage (no evictions), as a failed usage read does."""
    wanted = pod_memory_nodes(snapshot, policy)
    if not wanted:
        return snapshot
    with timeline.step("pod-memory"):
        try:
            found = source.pod_memory(snapshot.taken_at, wanted)
        except SourceError as exc:
            log.warning("usage source failed: %s", exc)
            return with_pod_memory(snapshot, f"{type(exc).__name__}: {exc}")
    return with_pod_memory(snapshot, found)


def read_usage(read: Callable[[float], UsageReport], now: float) -> UsageReport:
    try:
        return read(now)
    except SourceError as exc:
        log.warning("usage source failed: %s", exc)
        return UsageReport.failed(f"{type(exc).__name__}: {exc}")


def explain_scale_down(
    policy: Policy | None, connection: ClusterConnection, target: str, count: int, clock: Clock = time.time
) -> ScaleDownExplanation:
    """The pods a scale-down of ``target`` (``NAMESPACE/[KIND/]NAME``, KIND deployment by default, or replicaset)
    by ``count`` deletes now, and after the policy's DeletionCostSteering (its plan of this moment)."""
    namespace, kind, name = parse_workload(target)
    api = connect(connection.kubeconfig, connection.context)
    workload = WorkloadPodsReader(api).read(namespace, kind, name)
    now = clock()
    steering = [s for s in (policy.strategies if policy else ()) if s.kind == "DeletionCostSteering" and s.enabled]
    costs: dict[str, int] | None = None
    pools: dict[str, str] = {}
    note = "" if policy is not None else "no --policy given"
    if policy is not None and steering:
        only_steering = policy.model_copy(update={"strategies": tuple(steering)})
        planned = plan_live(Runtime(only_steering, api, lambda: now))
        pools = dict(planned.snapshot.pool_of)
        if planned.plan.blocked:
            note = f"the plan is blocked: {planned.plan.blocked}"
        else:
            costs = {p.name: p.cost for p in planned.plan.cost_patches if p.namespace == namespace}
            skipped = sum(
                1 for r in planned.plan.results for d in r.pod_decisions if d.namespace == namespace and not d.chosen
            )
            note = f"{len(costs)} pod(s) of the namespace get a new cost" + (
                f", {skipped} left as they are" if skipped else ""
            )
    elif policy is not None:
        note = "the policy has no enabled DeletionCostSteering strategy"
    return explain(f"{kind}/{namespace}/{name}", workload.replica_sets, workload.pods, count, now, costs, pools, note)


def parse_workload(target: str) -> tuple[str, str, str]:
    """``NAMESPACE/NAME`` (a Deployment) or ``NAMESPACE/KIND/NAME`` -> (namespace, Deployment|ReplicaSet, name)."""
    parts = target.split("/")
    if len(parts) == 2 and all(parts):
        return parts[0], "Deployment", parts[1]
    if len(parts) == 3 and all(parts) and parts[1].lower() in WORKLOAD_KINDS:
        return parts[0], WORKLOAD_KINDS[parts[1].lower()], parts[2]
    raise ConfigError(
        "explain-scale-down",
        [("WORKLOAD", f"{target!r}: expected NAMESPACE/NAME or NAMESPACE/KIND/NAME (KIND deployment or replicaset)")],
    )


def plan_demo(policy: Policy) -> PlanOutcome:
    """Plan on the embedded demo snapshot (no cluster, no Prometheus; an offline tool, imported here only)."""
    from rebalancer.offline.demo import load_demo, load_demo_history

    demo = load_demo()
    facts: ClusterFacts = demo.facts
    predicted = None
    if needs_prediction(policy):  # the demo ships its pods' daily peaks too
        history = load_demo_history()
        days = policy.predictor.days
        prediction = predict(facts, history.pod_history(days), policy.predictor, history.system_history(days))
        predicted = PredictedLoad.from_prediction(prediction, history.description)
    snapshot, plan = plan_cycle(facts, demo.usage(), policy, demo.taken_at, None, predicted)
    return PlanOutcome(snapshot, plan, f"embedded demo: {demo.description}")
