"""The shipped default policy with the landing guard in a closed loop: what follows the first cycle.

The shipped default alone (`run --once` three times, then serve's cycles) runs on real parts in
tests/realcluster/test_closed_loop.py: kube-apiserver, the real ReplicaSet controller and kube-scheduler,
hollow nodes, a real Prometheus scraping a live exporter, on the wall clock (about 7 minutes). The two
scenarios with config/landing-guard.yaml's guard stay here, on the Python test API server with a modelled
ReplicaSet controller and scheduler, because they need a virtual clock: each spans 5-10 minutes of usage
windows, which the real loop would spend on the wall clock too (another 15 minutes of a suite that must stay
well under 25). That the real scheduler honours the guard's mark is tests/realcluster/test_landing_guard.py.

Twelve nodes of 8 cores in one pool, requests flat (every pod 500m / 2Gi): three nodes run at 85 % real
CPU (seven pods of 0.4-1.3 cores), two at 43 %, seven at 10 % with one pod each (so the scheduler sends
replacements there). One eviction (1.3 cores) brings a hot node under 70 %, a second under the 60 % receive
threshold the shipped policy relieves it down to; the first covers 65 % of the excess over 60 %, clearing
its `minExpectedGain` (a node of pods under 1 core each, at most half that excess, would not be moved).
Usage is the P95 of the last 10 minutes, so a relieved node keeps reading hot for minutes after its load
has left.

The harness (:mod:`tests.service.closed_loop`): the test API server, a ReplicaSet controller that replaces
each evicted pod and binds it as the default scheduler would, cAdvisor-shaped usage following each pod
to its node, written into a real Prometheus on a virtual clock. The policy is
config/low-node-utilization.yaml as shipped (only prometheus.url and state.namespace set; serve adds
its 30 s schedule; one variant adds config/landing-guard.yaml's guard). ``run --once`` is the real
entry point with the virtual clock; serve's cycles are its own cycle object, driven every 30 s of the
virtual clock (APScheduler only runs on the wall clock), with the watch cache as serve keeps it.

Asserted after every scenario: at most the fewest evictions that bring each hot node under target, plus
one; no eviction from a node that was not hot; no relieved node below the cold threshold; a landing-guard
``hot`` mark only on a node that really is hot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.guard.applier import GuardReport
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app import root as app
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import CycleObservers, _ClusterCache, _Cycles, _KnownNodes
from rebalancer.app.serve_efficiency import EfficiencyPublisher
from rebalancer.policy import Policy, load_policy
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import Trigger
from strategies.low_node_utilization import LowNodeUtilizationSettings
from tests.adapters.prom_fixture import StartPrometheus
from tests.kubeapi import TestApiServer
from tests.service.closed_loop import ClosedLoop, NodeLoad

ROOT = Path(__file__).resolve().parents[2]
T1 = 1_700_000_000.0  # the first cycle
HISTORY = 30 * 60  # samples before it: the usage window and the rate window are full
HOT = (1.3, 1.2, 1.0, 1.0, 1.0, 0.6, 0.4)
LAYOUT = (
    *(NodeLoad(f"node-0{i}", 8, 0.3, HOT) for i in (1, 2, 3)),
    *(NodeLoad(f"node-0{i}", 8, 0.3, (0.45,) * 7) for i in (4, 5)),
    *(NodeLoad(f"node-{i:02d}", 8, 0.3, (0.5,)) for i in range(6, 13)),
)
SERVE_MINUTES = 12


def shipped_policy(path: Path, prometheus_url: str, *, schedule: str | None = None, guard: bool = False) -> Policy:
    """config/low-node-utilization.yaml with prometheus.url and state.namespace set; serve's schedule, and
    config/landing-guard.yaml's pools and guard, when asked for."""
    policy: dict[str, Any] = yaml.safe_load((ROOT / "config/low-node-utilization.yaml").read_text())
    policy["prometheus"]["url"] = prometheus_url
    policy["state"] = {"namespace": "rebalancer"}
    if schedule is not None:
        policy["strategies"][0]["schedule"] = {"interval": schedule}
    if guard:
        guarded = yaml.safe_load((ROOT / "config/landing-guard.yaml").read_text())
        policy["pools"], policy["landingGuard"] = guarded["pools"], guarded["landingGuard"]
    path.write_text(yaml.safe_dump(policy))
    return load_policy(path)


@dataclass(frozen=True)
class Thresholds:
    cold: float
    target: float

    @classmethod
    def of(cls, policy: Policy) -> Thresholds:
        strategy = policy.strategies[0]
        assert isinstance(strategy, LowNodeUtilizationSettings)
        return cls(strategy.thresholds.cpu, strategy.target_thresholds.cpu)


class Observer:
    """What happened, against the truth: evictions per node, how low relieved nodes went, guard marks."""

    def __init__(self, loop: ClosedLoop, thresholds: Thresholds) -> None:
        self.loop, self.thresholds = loop, thresholds
        self.hot = {n.name for n in loop.layout if loop.percent(n.name) > thresholds.target}
        self.needed = {n: loop.fewest_evictions(n, thresholds.target) for n in self.hot}
        self.lowest: dict[str, float] = {}  # relieved node -> its lowest real CPU % after a cycle
        self.bad_marks: list[str] = []
        self.log: list[str] = []

    def cycle(self, run: Callable[[], GuardReport | None]) -> None:
        """Run one cycle at the clock's time, then let the controller replace what it evicted."""
        loop = self.loop
        before = {n: loop.percent(n) for n in loop.nodes}
        guard = run()
        done = loop.reconcile()
        minute = (loop.clock.now - T1) / 60
        for node, reason in loop.marks().items():
            self._check_mark(node, reason, before, f"after the cycle at +{minute:g} min")
        for result in guard.results if guard is not None else ():
            change = result.change
            if change.reason == "hot" and change.action.value in ("set", "refresh"):
                self._check_mark(change.node, "hot", before, f"{change.action.value} at +{minute:g} min")
        for node in {e.node for e in loop.evictions}:
            self.lowest[node] = min(self.lowest.get(node, 100.0), loop.percent(node))
        moves = ", ".join(f"{e.pod.split('-5f7d8')[0]} {e.node}->{e.replacement_node}" for e in done)
        usage = " ".join(f"{n[-2:]}:{loop.percent(n):.0f}" for n in loop.nodes)
        self.log.append(f"+{minute:4.1f} min  {len(done)} evicted [{moves}]  real CPU % {usage}")

    def _check_mark(self, node: str, reason: str, before: dict[str, float], when: str) -> None:
        hot_then = before[node] > self.thresholds.target
        if reason == "hot" and not hot_then:
            self.bad_marks.append(f"{node}: hot mark {when}, real CPU {before[node]:.1f} %")
        if reason != "hot" and not any(e.node == node for e in self.loop.evictions):
            self.bad_marks.append(f"{node}: {reason} mark {when}, nothing was evicted from it")

    def problems(self) -> list[str]:
        out = []
        per_node: dict[str, int] = {}
        for eviction in self.loop.evictions:
            per_node[eviction.node] = per_node.get(eviction.node, 0) + 1
        for node, count in sorted(per_node.items()):
            if node not in self.hot:
                out.append(f"{node} was not hot, yet {count} pod(s) were evicted from it")
            elif count > self.needed[node] + 1:
                out.append(f"{node}: {count} evictions, {self.needed[node]} bring it under target (at most "
                           f"{self.needed[node] + 1} allowed)")  # fmt: skip
        for node, lowest in sorted(self.lowest.items()):
            if lowest < self.thresholds.cold:
                out.append(f"{node} relieved down to {lowest:.1f} % real CPU, below the cold threshold "
                           f"{self.thresholds.cold:g} %")  # fmt: skip
        return out + self.bad_marks

    def verdict(self) -> None:
        problems = self.problems()
        assert not problems, "\n".join(["", *problems, "cycles:", *self.log])


@pytest.fixture
def start_loop(kube_server: TestApiServer, start_prometheus: StartPrometheus) -> Callable[[], ClosedLoop]:
    def start() -> ClosedLoop:
        prometheus = start_prometheus(extra_args=["--web.enable-remote-write-receiver"])
        loop = ClosedLoop(kube_server, prometheus.url, LAYOUT, T1 - HISTORY)
        loop.advance(T1)
        return loop

    return start


def run_once(policy: Policy, kubeconfig: Path, loop: ClosedLoop) -> GuardReport:
    outcome = app.run_once(policy, app.ClusterConnection(str(kubeconfig)), clock=loop.clock)
    assert outcome.report.aborted is None, outcome.report.aborted
    return outcome.guard


class ServeCycles:
    """serve's cycle object with its watch cache, driven at chosen instants of the virtual clock."""

    def __init__(self, loop: ClosedLoop, kubeconfig: Path, policy: Policy) -> None:
        self.loop, self.policy = loop, policy
        api = connect(kubeconfig=str(kubeconfig))
        self.cache = _ClusterCache(api)
        metrics = Metrics()
        self.guard: list[GuardReport] = []
        runtime = Runtime(policy, api, loop.clock, DryRun.OFF, requester="rebalancer/closed-loop")
        known = _KnownNodes(KubeSource(api, frozenset()), self.cache, loop.clock)
        observers = CycleObservers(efficiency=EfficiencyPublisher(metrics), on_guard=self.guard.append)
        self.cycles = _Cycles(runtime, known, self.cache, observers)

    def __call__(self) -> GuardReport | None:
        self._wait_for_the_watches()
        self.guard.clear()
        result = self.cycles(self.policy, Trigger("schedule", (0,)))
        assert result.report is not None and result.report.aborted is None
        assert not result.plan.blocked, result.plan.blocked
        return self.guard[0] if self.guard else None

    def _wait_for_the_watches(self) -> None:
        """The cache has seen the controller's pods and the guard's taints (the watches run on the wall clock)."""
        cache = self.cache.ensure(self.policy)
        assert cache is not None and cache.wait_synced(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            facts = cache.facts()
            pods = {(p.namespace, p.name) for p in facts.pods}
            taints = {n.name: sorted((t.key, t.value) for t in n.taints) for n in facts.nodes}
            if (pods, taints) == self.loop.api_view():
                return
            time.sleep(0.01)
        raise AssertionError("the watch cache did not catch up with the API server within 10 s")

    def close(self) -> None:
        self.cycles.close()
        self.cache.stop()


@pytest.fixture
def serve_loop(
    start_loop: Callable[[], ClosedLoop], kubeconfig: Path, tmp_path: Path
) -> Iterator[Callable[[bool], tuple[ClosedLoop, ServeCycles]]]:
    made: list[ServeCycles] = []

    def make(guard: bool) -> tuple[ClosedLoop, ServeCycles]:
        loop = start_loop()
        policy = shipped_policy(tmp_path / "policy.yaml", loop.prometheus_url, schedule="30s", guard=guard)
        made.append(ServeCycles(loop, kubeconfig, policy))
        return loop, made[-1]

    yield make
    for cycles in made:
        cycles.close()


def test_serve_with_the_landing_guard_on_a_30s_schedule(
    serve_loop: Callable[[bool], tuple[ClosedLoop, ServeCycles]],
) -> None:
    loop, cycles = serve_loop(True)
    observer = Observer(loop, Thresholds.of(cycles.policy))
    for step in range(SERVE_MINUTES * 2 + 1):
        loop.advance(T1 + 30 * step)
        observer.cycle(cycles)
    assert loop.evictions, "the first cycle relieved nothing: the scenario does not exercise the loop"
    observer.verdict()


def test_a_guarded_run_once_five_minutes_after_serve(
    serve_loop: Callable[[bool], tuple[ClosedLoop, ServeCycles]], kubeconfig: Path, tmp_path: Path
) -> None:
    """serve with the shipped default for 5 minutes, then one `run --once` of the same policy with
    config/landing-guard.yaml's guard: the usage window still covers the time before the evictions."""
    loop, cycles = serve_loop(False)
    observer = Observer(loop, Thresholds.of(cycles.policy))
    for step in range(10):
        loop.advance(T1 + 30 * step)
        observer.cycle(cycles)
    guarded = shipped_policy(tmp_path / "guarded.yaml", loop.prometheus_url, guard=True)
    loop.advance(T1 + 300)
    observer.cycle(lambda: run_once(guarded, kubeconfig, loop))
    assert loop.evictions, "the first cycle relieved nothing: the scenario does not exercise the loop"
    observer.verdict()
