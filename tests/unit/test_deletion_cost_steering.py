"""DeletionCostSteering's planner (pure) and the steerer's rules, with an in-memory cluster (a plain class)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import DryRun, EvictorReport
from rebalancer.actions.steerer import Steerer, SteerOutcome, steering_rules, steering_summary
from rebalancer.app.prediction import needs_prediction
from rebalancer.app.render import plan_table, run_summary
from rebalancer.domain.errors import PatchError
from rebalancer.domain.model import DELETION_COST_ANNOTATION, INT32_MAX, Pod
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.protections import DELETION_COST_OWNER_ANNOTATION, STEERING_OPT_OUT_ANNOTATION, Protections
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies import build
from tests import builders as b

STEER = """kind: DeletionCostSteering
poolCosts: {payg: 0, reserved: 100000}
utilizationWeight: 10
"""


def plan(snapshot: ClusterSnapshot, yaml: str = STEER, extra: str = "") -> EvictionPlan:
    policy = b.policy(yaml, extra)
    result = build(policy.strategies[0]).plan(snapshot, Protections.from_settings(policy.protections))
    return EvictionPlan(snapshot.taken_at, (result,))


def cluster(*pods: Pod, usage: Mapping[str, int] | None = None) -> ClusterSnapshot:
    nodes = [
        b.node("hot", 10_000, pool="payg"),
        b.node("cool", 10_000, pool="payg"),
        b.node("res", 10_000, pool="reserved"),
    ]
    loads = usage or {"hot": 9_000, "cool": 2_000, "res": 5_000}
    return b.snapshot(nodes, pods, b.usage(loads), pools=PoolSettings(label="pool"))


def costs(p: EvictionPlan) -> dict[str, int]:
    return {c.name: c.cost for c in p.cost_patches}


def test_costs_follow_pool_then_hotness() -> None:
    snap = cluster(b.pod("on-hot", "hot"), b.pod("on-cool", "cool"), b.pod("on-res", "res"))
    assert costs(plan(snap)) == {"on-hot": 100, "on-cool": 800, "on-res": 100_500}
    patch = next(c for c in plan(snap).cost_patches if c.name == "on-hot")
    assert patch.reason == "pool payg base 0 + 10 x (100 - 90.0% CPU used) = 100"
    assert patch.current is None and not patch.owned and not plan(snap).evictions


def test_cost_label_picks_the_base_cost_and_costs_clamp_to_int32() -> None:
    nodes = [b.node("n1", 10_000, labels={"billing": "spot"}), b.node("n2", 10_000, labels={"billing": "ri"})]
    snap = b.snapshot(nodes, [b.pod("a", "n1"), b.pod("b", "n2")], b.usage({"n1": 0, "n2": 0}))
    yaml = f"kind: DeletionCostSteering\ncostLabel: billing\npoolCosts: {{spot: -5, ri: {INT32_MAX}}}\nutilizationWeight: 100"
    assert costs(plan(snap, yaml)) == {"a": -5 + 10_000, "b": INT32_MAX}


def test_an_unchanged_cost_is_not_patched_and_min_change_holds_small_moves() -> None:
    mine = {DELETION_COST_ANNOTATION: "100", DELETION_COST_OWNER_ANNOTATION: "100"}
    near = {DELETION_COST_ANNOTATION: "95", DELETION_COST_OWNER_ANNOTATION: "95"}
    snap = cluster(b.pod("same", "hot", annotations=mine), b.pod("near", "hot", annotations=near))
    assert costs(plan(snap)) == {"near": 100}
    assert costs(plan(snap, STEER + "minChange: 10")) == {}
    patch = plan(snap).cost_patches[0]
    assert patch.owned and patch.current == "95"


def test_foreign_costs_are_left_alone_unless_configured() -> None:
    theirs = {DELETION_COST_ANNOTATION: "7"}
    changed_by_someone = {DELETION_COST_ANNOTATION: "8", DELETION_COST_OWNER_ANNOTATION: "100"}
    snap = cluster(b.pod("theirs", "hot", annotations=theirs), b.pod("edited", "hot", annotations=changed_by_someone))
    result = plan(snap)
    assert costs(result) == {}
    reasons = {d.name: d.reason for d in result.results[0].pod_decisions}
    assert reasons["theirs"] == "pod-deletion-cost '7' was set by someone else (overwriteForeign is off)"
    assert costs(plan(snap, STEER + "overwriteForeign: true")) == {"theirs": 100, "edited": 100}


def test_opted_out_workloads_are_skipped_whole() -> None:
    out = {STEERING_OPT_OUT_ANNOTATION: "false"}
    snap = cluster(
        b.pod("api-1", "hot", workload="api", annotations=out),
        b.pod("api-2", "cool", workload="api"),  # same workload, no annotation (an older template): skipped too
        b.pod("evict-out", "hot", workload="batch", annotations={"rebalancer.io/evict": "false"}),
        b.pod("web-1", "hot", workload="web"),
    )
    result = plan(snap)
    assert costs(result) == {"web-1": 100}
    reasons = {d.name: d.reason for d in result.results[0].pod_decisions if not d.chosen}
    assert reasons["api-2"].startswith("workload Deployment/default/api opted out: default/api-1: opted out")
    assert reasons["evict-out"] == "opted out by annotation rebalancer.io/evict=false"


def test_a_workload_opted_out_by_a_pod_the_cycle_does_not_steer_is_skipped_whole() -> None:
    # the pod that opted out runs on a node an alert's cycle does not steer, or is new and not running yet (a
    # rollout's new template carries the annotation): the workload's other pods are left alone all the same
    out = {STEERING_OPT_OUT_ANNOTATION: "false"}
    elsewhere = cluster(b.pod("api-1", "cool", workload="api", annotations=out), b.pod("api-2", "hot", workload="api"))
    focused = dataclasses.replace(elsewhere, focus=frozenset({"hot"}))
    for snap in (focused, dataclasses.replace(focused, by_workload=None)):
        result = plan(snap)
        assert costs(result) == {}
        assert "opted out" in next(d.reason for d in result.results[0].pod_decisions if d.name == "api-2")
    for phase, node in (("Pending", "cool"), ("Pending", None)):
        new = b.pod("api-new", node, workload="api", annotations=out, phase=phase)
        snap = cluster(new, b.pod("api-old", "hot", workload="api"), b.pod("web-1", "hot", workload="web"))
        assert costs(plan(snap)) == {"web-1": 100}


def test_scope_unknown_usage_and_non_replica_set_pods() -> None:
    snap = cluster(
        b.pod("sys", "hot", namespace="kube-system"),
        b.pod("other-ns", "hot", namespace="batch"),
        b.pod("sts-0", "hot", workload="db", kind="StatefulSet"),
        b.pod("pending", "hot", phase="Pending"),
        b.pod("blind", "res"),
        b.pod("web", "hot", labels={"app": "web", "tier": "front"}),
        usage={"hot": 9_000, "cool": 2_000},  # res unknown
    )
    result = plan(snap, STEER + "namespaces: {exclude: [batch]}\nlabelSelector: {matchLabels: {tier: front}}")
    assert costs(result) == {"web": 100}
    reasons = {d.name: d.reason for d in result.results[0].pod_decisions if not d.chosen}
    assert reasons == {}  # out of scope pods are not steered at all; blind is out of the label selector
    wide = plan(snap)
    skipped = {d.name: d.reason for d in wide.results[0].pod_decisions if not d.chosen}
    assert skipped["sys"] == "namespace kube-system in evictableNamespaces.exclude"
    assert skipped["blind"].startswith("usage of node res unknown (no usage data for this node)")
    assert "sts-0" not in skipped and "pending" not in skipped


def test_predicted_load_steers_when_classify_by_asks_for_it_and_a_failed_prediction_patches_nothing() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "cool"), b.pod("c", "res"))
    # at the next peak "cool" is the hot one (95%) and "hot" cools down (20%); "res" has no prediction
    peak = PredictedLoad(
        MappingProxyType({"hot": 2_000, "cool": 9_500}),
        MappingProxyType({"res": "prediction unknown: no history for default/c"}),
        MappingProxyType({}),
    )
    with_peak = dataclasses.replace(snap, predicted=peak)
    assert costs(plan(with_peak)) == {"a": 100, "b": 800, "c": 100_500}  # current: the prediction is not read
    predicted = plan(with_peak, STEER + "classifyBy: predicted")
    assert costs(predicted) == {"a": 800, "b": 50}
    skipped = {d.name: d.reason for d in predicted.results[0].pod_decisions if not d.chosen}
    assert skipped == {"c": "usage of node res unknown (prediction unknown: no history for default/c): its cost is left "
                       "as it is"}  # fmt: skip
    assert costs(plan(with_peak, STEER + "classifyBy: max")) == {"a": 100, "b": 50}
    for load, words in ((PredictedLoad.failed("predictor history: MetricsUnavailable: down"), "down"), (None, "no "
                        "prediction was made")):  # fmt: skip
        failed = plan(dataclasses.replace(snap, predicted=load), STEER + "classifyBy: predicted")
        assert not failed.cost_patches
        assert any(words in note for note in failed.results[0].notes), failed.results[0].notes
    assert needs_prediction(b.policy(STEER + "classifyBy: max"))
    assert not needs_prediction(b.policy(STEER))


def test_a_focused_cycle_steers_only_the_alerted_nodes() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "cool"), b.pod("c", "res"))
    assert costs(plan(dataclasses.replace(snap, focus=frozenset({"hot", "gone"})))) == {"a": 100}


def test_the_cycle_cap_keeps_the_largest_changes() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "cool"), b.pod("c", "res"))
    result = plan(snap, STEER + "maxPatchesPerCycle: 2")
    assert costs(result) == {"c": 100_500, "b": 800}
    assert "1 change(s) left for later cycles (maxPatchesPerCycle 2)" in result.results[0].notes


# -- the steerer -----------------------------------------------------------------------------------------


@dataclass
class _Live:
    uid: str
    resource_version: str
    annotations: dict[str, str]


@dataclass
class MemoryPods:
    """Pods' metadata by (namespace, name); counts the writes; ``refuse`` answers a status for a pod."""

    pods: dict[tuple[str, str], _Live]
    writes: list[tuple[str, str, dict[str, str | None], bool]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    refuse: dict[str, int] = field(default_factory=dict)
    written_at: list[float] = field(default_factory=list)
    clock: Clock | None = None  # set: each write is stamped, and takes ``work`` seconds of it
    work: float = 0.0

    def read(self, namespace: str, name: str) -> _Live | None:
        return self.pods.get((namespace, name))

    def set_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str,
        dry_run: bool = False,
    ) -> _Live:
        self.writes.append((namespace, name, dict(annotations), dry_run))
        if self.clock is not None:
            self.written_at.append(self.clock.now)
            self.clock.now += self.work
        if name in self.refuse:
            raise PatchError(f"refused {name}", status=self.refuse[name])
        live = self.pods[(namespace, name)]
        assert live.resource_version == resource_version
        if not dry_run:
            live.annotations.update({k: v for k, v in annotations.items() if v is not None})
        return live

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool:
        self.events.append(f"{pod.name} {reason}")
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def memory(snap: ClusterSnapshot) -> MemoryPods:
    pods = [p for node in snap.nodes for p in snap.pods_on(node)]
    return MemoryPods({p.key: _Live(p.uid, "1", dict(p.annotations)) for p in pods})


def steer(
    snap: ClusterSnapshot,
    cluster_: MemoryPods,
    yaml: str = STEER,
    dry_run: DryRun = DryRun.OFF,
    clock: Clock | None = None,
):  # type: ignore[no-untyped-def]
    policy = b.policy(yaml)
    clock = clock or Clock()
    steerer = Steerer(cluster_, cluster_, steering_rules(policy.strategies), Protections.from_settings(policy.protections),
                      dry_run, clock, clock.sleep)  # fmt: skip
    return steerer.apply(plan(snap, yaml), snap)


def test_the_steerer_sets_cost_and_ownership_once() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "res"))
    pods = memory(snap)
    report = steer(snap, pods)
    assert [r.outcome for r in report.results] == [SteerOutcome.PATCHED, SteerOutcome.PATCHED]
    assert pods.pods[("default", "a")].annotations == {
        DELETION_COST_ANNOTATION: "100",
        DELETION_COST_OWNER_ANNOTATION: "100",
    }
    assert pods.events == ["b DeletionCostSet", "a DeletionCostSet"]
    again = steer(snap, pods)  # the snapshot is stale: the re-read finds the cost already there
    assert [r.outcome for r in again.results] == [SteerOutcome.UNCHANGED, SteerOutcome.UNCHANGED]
    assert len(pods.writes) == 2


def test_the_steerer_rechecks_the_live_pod() -> None:
    snap = cluster(
        b.pod("gone", "hot"), b.pod("new", "hot"), b.pod("out", "hot"), b.pod("theirs", "hot"), b.pod("busy", "hot")
    )
    pods = memory(snap)
    del pods.pods[("default", "gone")]
    pods.pods[("default", "new")].uid = "another"
    pods.pods[("default", "out")].annotations[STEERING_OPT_OUT_ANNOTATION] = "false"
    pods.pods[("default", "theirs")].annotations[DELETION_COST_ANNOTATION] = "3"
    pods.refuse["busy"] = 409
    outcomes = {r.patch.name: r.outcome for r in steer(snap, pods).results}
    assert outcomes == {"gone": SteerOutcome.GONE, "new": SteerOutcome.REPLACED, "out": SteerOutcome.OPTED_OUT,
                        "theirs": SteerOutcome.FOREIGN, "busy": SteerOutcome.CONFLICT}  # fmt: skip
    assert [w[1] for w in pods.writes] == ["busy"]


def test_dry_runs() -> None:
    snap = cluster(b.pod("a", "hot"))
    pods = memory(snap)
    assert steer(snap, pods, dry_run=DryRun.CLIENT).results[0].outcome is SteerOutcome.DRY_RUN
    assert pods.writes == []
    assert steer(snap, pods, dry_run=DryRun.SERVER).results[0].outcome is SteerOutcome.SERVER_DRY_RUN
    assert pods.writes == [
        ("default", "a", {DELETION_COST_ANNOTATION: "100", DELETION_COST_OWNER_ANNOTATION: "100"}, True)
    ]
    assert DELETION_COST_ANNOTATION not in pods.pods[("default", "a")].annotations and pods.events == []


def test_the_token_bucket_paces_the_writes() -> None:
    snap = cluster(*(b.pod(f"p{i}", "hot") for i in range(5)))
    pods, clock = memory(snap), Clock()
    report = steer(snap, pods, STEER + "rate: {perSecond: 2, burst: 2}", clock=clock)
    assert report.count(SteerOutcome.PATCHED) == 5
    assert clock.slept == [0.5, 0.5, 0.5]  # two at once, then one every half second
    assert clock.now == 1.5


# -- properties --------------------------------------------------------------------------------------------

ANNOTATIONS = st.sampled_from([
    {}, {STEERING_OPT_OUT_ANNOTATION: "false"}, {"rebalancer.io/evict": "false"}, {DELETION_COST_ANNOTATION: "5"},
    {DELETION_COST_ANNOTATION: "5", DELETION_COST_OWNER_ANNOTATION: "5"}, {DELETION_COST_ANNOTATION: "+5"},
    {DELETION_COST_ANNOTATION: "5", DELETION_COST_OWNER_ANNOTATION: "6"},
])  # fmt: skip


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterSnapshot, str, list[dict[str, str]]]:
    count = draw(st.integers(0, 12))
    pods = [
        b.pod(f"p{i}", draw(st.sampled_from(["hot", "cool", "res"])), workload=draw(st.sampled_from(["a", "b", "c"])),
              annotations=draw(ANNOTATIONS))
        for i in range(count)
    ]  # fmt: skip
    loads = {n: draw(st.integers(0, 12_000)) for n in ("hot", "cool", "res") if draw(st.booleans())}
    cap = draw(st.integers(1, 5))
    yaml = STEER + f"maxPatchesPerCycle: {cap}\nminChange: {draw(st.integers(1, 50))}\n"
    live_changes = [draw(ANNOTATIONS) for _ in range(count)]  # what the pods carry when the steerer re-reads
    return cluster(*pods, usage=loads), yaml, live_changes


def _opted_out(annotations: Mapping[str, str]) -> bool:
    return annotations.get(STEERING_OPT_OUT_ANNOTATION) == "false" or annotations.get("rebalancer.io/evict") == "false"


def _foreign(annotations: Mapping[str, str]) -> bool:
    cost = annotations.get(DELETION_COST_ANNOTATION)
    return cost is not None and annotations.get(DELETION_COST_OWNER_ANNOTATION) != cost


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_never_patches_opted_out_or_foreign_pods_and_never_exceeds_the_cap(
    scenario: tuple[ClusterSnapshot, str, list[dict[str, str]]],
) -> None:
    snap, yaml, live_changes = scenario
    cap = b.policy(yaml).strategies[0].max_patches_per_cycle  # type: ignore[union-attr]
    planned = plan(snap, yaml)
    workloads_out = {p.workload for n in snap.nodes for p in snap.pods_on(n) if _opted_out(p.annotations)}
    for patch in planned.cost_patches:
        pod = next(p for p in snap.pods_on(patch.node) if p.key == patch.key)
        assert not _opted_out(pod.annotations) and pod.workload not in workloads_out
        assert not _foreign(pod.annotations)
    assert len(planned.cost_patches) <= cap
    pods = memory(snap)
    for live, change in zip(sorted(pods.pods), live_changes, strict=False):
        pods.pods[live].annotations = dict(change)  # the pods changed between the plan and the steerer
    before = {k: dict(v.annotations) for k, v in pods.pods.items()}
    steer(snap, pods, yaml)
    assert len(pods.writes) <= cap
    for namespace, name, written, _ in pods.writes:
        seen = before[(namespace, name)]
        assert not _opted_out(seen) and not _foreign(seen)
        assert set(written) == {DELETION_COST_ANNOTATION, DELETION_COST_OWNER_ANNOTATION}


def test_buckets_kept_between_cycles_hold_the_rate_across_them() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "cool"))
    yaml = STEER + "rate: {perSecond: 1, burst: 2}"
    policy = b.policy(yaml)
    rules = steering_rules(policy.strategies)
    protections = Protections.from_settings(policy.protections)
    clock, kept = Clock(), {}  # type: ignore[var-annotated]
    for _ in range(2):  # two cycles at the same moment: the second finds the bucket empty
        pods = memory(snap)
        Steerer(pods, pods, rules, protections, DryRun.OFF, clock, clock.sleep, buckets=kept).apply(
            plan(snap, yaml), snap
        )
    assert clock.slept == [1.0, 1.0]
    fresh = Clock()
    for _ in range(2):  # without kept buckets each cycle starts with a full burst
        pods = memory(snap)
        Steerer(pods, pods, rules, protections, DryRun.OFF, fresh, fresh.sleep).apply(plan(snap, yaml), snap)
    assert fresh.slept == []


def test_plan_table_and_run_summary_show_the_steering() -> None:
    snap = cluster(b.pod("a", "hot"), b.pod("b", "res"))
    planned = plan(snap)
    table = plan_table(planned, "test")
    assert "-- DeletionCostSteering: 2 planned pod-deletion-cost patch(es)" in table
    assert "pool reserved base 100000 + 10 x (100 - 50.0% CPU used) = 100500" in table
    pods = memory(snap)
    pods.refuse["b"] = 422
    report = steer(snap, pods)
    assert steering_summary(report) == "1 patched, 1 failed"
    line = run_summary(planned, EvictorReport(), DryRun.OFF, report)
    assert "0 planned" in line and "pod-deletion-cost: 1 patched, 1 failed" in line


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.sampled_from([0.5, 1.0, 3.0, 10.0]), st.integers(0, 15), st.floats(0, 2))
def test_the_patch_rate_never_exceeds_the_bucket(burst: int, per_second: float, count: int, work: float) -> None:
    """In any stretch of time the writes number at most burst + perSecond x its length, whatever each write costs."""
    snap = cluster(*(b.pod(f"p{i}", "hot") for i in range(count)))
    pods, clock = memory(snap), Clock()
    pods.clock, pods.work = clock, work  # the request itself takes time
    steer(snap, pods, STEER + f"rate: {{perSecond: {per_second}, burst: {burst}}}", clock=clock)
    written = pods.written_at
    assert len(written) == count
    for i, start in enumerate(written):
        for j in range(i, len(written)):
            assert j - i + 1 <= burst + per_second * (written[j] - start) + 1e-9
