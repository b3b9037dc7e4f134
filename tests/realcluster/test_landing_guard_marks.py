"""The landing guard's marks end to end on a real API server (the ``api_server`` fixture: no controller, scheduler or
kubelet; nodes, workloads and running pods made through the API by tests/realcluster/api_made.py), with a real
Prometheus holding the efficiency story's history (efficiency_story.py): at T1 hot-1 and hot-3 are hot and relieved,
hot-2 hot with nothing evictable; at END hot-1 has cooled and hot-3 is hot again. serve's cycle object driven at
chosen times on a fake clock (the marks' holds run for 15 minutes); then serve itself, with its start-up sweep and
its graceful shutdown. The node patches, the order of the calls and the Events are read from the API server and its
audit log. That the real scheduler honours a mark is tests/realcluster/test_landing_guard.py."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.app.serve import serve
from rebalancer.domain.guard_marks import GUARD_KEY, Foreign, Mark, MarkReason, read_mark
from rebalancer.domain.model import Taint
from rebalancer.policy import load_policy
from rebalancer.service.runner import Trigger
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus, free_port
from tests.controlplane import USER, ControlPlane
from tests.realcluster import api_made
from tests.realcluster import objects as o
from tests.realcluster.efficiency_story import Cluster, Serve, Story, write_policy

STORY = Story(t1=1_700_000_000.0 - 1800)  # serve's clock only: the marks' holds, the history
T1, END = STORY.t1, STORY.end
GUARD = (
    "landingGuard: {pools: [{pool: general, maxMarkedFraction: 1.0}, "
    "{pool: batch, effect: NoSchedule, maxMarkedFraction: 0.5}]}\n"
)
DEDICATED = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
BY_HAND = {"key": GUARD_KEY, "value": "manual", "effect": "PreferNoSchedule"}  # the key, without the annotation


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(STORY.history())


def set_node(plane: ControlPlane, name: str, taints: list[dict[str, str]], mark: Mark | None = None) -> None:
    patch: dict[str, Any] = {"spec": {"taints": [*taints, *([_taint(mark.taint())] if mark else [])]}}
    if mark is not None:
        patch["metadata"] = {"annotations": {GUARD_KEY: mark.annotation()}}
    plane.admin.patch(f"/api/v1/nodes/{name}", patch)


def _taint(t: Taint) -> dict[str, str]:
    return {"key": t.key, "value": t.value, "effect": t.effect}


def build(plane: ControlPlane) -> Cluster:
    """The efficiency story's cluster, hot-2 with a foreign taint, and three nodes Prometheus knows nothing of."""
    made = Cluster(plane)
    admin = plane.admin
    set_node(plane, "hot-2", [DEDICATED])
    api_made.ready_node(admin, o.node("spare-1", labels={"pool": "other"}))
    api_made.ready_node(admin, o.node("spare-2", labels={"pool": "other"}))
    api_made.ready_node(admin, o.node("spare-3", labels={"pool": "general"}))
    set_node(plane, "spare-1", [BY_HAND])  # foreign: never touched
    set_node(plane, "spare-2", [], Mark("rebalancer/crashed", "NoSchedule", MarkReason.HOT, T1 + 600))  # no guard
    set_node(plane, "spare-3", [], Mark("rebalancer/crashed", "PreferNoSchedule", MarkReason.RELIEVED, T1 + 100))
    return made


@pytest.fixture
def plane(api_server: ControlPlane) -> Iterator[ControlPlane]:
    """The API server with the cluster built; the audit log read from here on; emptied after the test."""
    made = build(api_server)
    api_server.audit_from = api_server.audit_log.stat().st_size
    yield api_server
    made.clear()


@pytest.fixture
def kubeconfig(plane: ControlPlane, tmp_path: Path) -> Path:
    """rebalancer's own user (its requests are :data:`USER`'s in the audit log)."""
    return plane.user_kubeconfig(tmp_path / "kubeconfig")


def nodes(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in plane.admin.items("v1", "Node")}


def node(plane: ControlPlane, name: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.admin.get(f"/api/v1/nodes/{name}")
    return found


def marks(plane: ControlPlane) -> dict[str, Mark | Foreign | str]:
    out: dict[str, Mark | Foreign | str] = {}
    for name, made in nodes(plane).items():
        taints = tuple(Taint(t["key"], t.get("value", ""), t["effect"]) for t in made["spec"].get("taints", []))
        state = read_mark(taints, (made["metadata"].get("annotations") or {}).get(GUARD_KEY))
        if state is not None:
            out[name] = state if isinstance(state, Mark | Foreign) else "orphan"
    return out


def node_patches(plane: ControlPlane) -> int:
    return sum(1 for e in plane.audit(USER) if e.verb == "patch" and e.resource == "nodes")


def node_events(plane: ControlPlane) -> list[dict[str, Any]]:
    """The Events about nodes (the API server records its own start-up in ``default`` too)."""
    return [e for e in plane.admin.items("v1", "Event", "default") if e["involvedObject"].get("kind") == "Node"]


class Cycles(Serve):
    """serve's cycle object (the efficiency story's harness), run at chosen times, optionally on another policy."""

    def run(self, at: float, policy: Path | None = None) -> Any:
        self.clock.now = at
        return self.cycles(load_policy(policy) if policy else self.policy, Trigger("schedule", (0,)))

    def counted(self) -> dict[tuple[str, ...], float]:
        return {
            tuple(dict(labels)[k] for k in ("pool", "action", "reason", "result")): value
            for (name, labels), value in self.samples().items()
            if name == "rebalancer_landing_guard_marks_total"
        }


@pytest.fixture
def cycles(kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path) -> Iterator[Cycles]:
    one = Cycles(kubeconfig, write_policy(tmp_path / "policy.yaml", prometheus.url, GUARD), T1)
    yield one
    one.close()


def test_marks_set_kept_renewed_expired_and_cooled(
    cycles: Cycles, plane: ControlPlane, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    before = nodes(plane)
    cycles.run(T1)
    after = marks(plane)
    me = "rebalancer/test"
    # the relieved nodes are marked before their pods are evicted: a replacement comes within moments
    calls = [(e.verb, e.resource, e.name) for e in plane.audit(USER)]
    first_eviction = next(i for i, (verb, resource, _) in enumerate(calls) if resource == "pods/eviction")
    for relieved in ("hot-1", "hot-3"):
        assert calls.index(("patch", "nodes", relieved)) < first_eviction
    assert after["hot-1"] == Mark(me, "PreferNoSchedule", MarkReason.RELIEVED, T1 + 900)  # hot and relieved
    assert after["hot-3"] == Mark(me, "PreferNoSchedule", MarkReason.RELIEVED, T1 + 900)
    assert after["hot-2"] == Mark(me, "NoSchedule", MarkReason.HOT, T1 + 900)  # nothing evictable: hot
    assert isinstance(after["spare-1"], Foreign)  # the key set by hand: never touched
    assert "spare-2" not in after  # a pool without a guard keeps no mark
    assert after["spare-3"] == Mark("rebalancer/crashed", "PreferNoSchedule", MarkReason.RELIEVED, T1 + 100)
    assert set(after) == {"hot-1", "hot-2", "hot-3", "spare-1", "spare-3"}  # cold-1, cold-2 stay free
    hot2 = node(plane, "hot-2")
    assert hot2["spec"]["taints"] == [DEDICATED, {"key": GUARD_KEY, "value": "hot", "effect": "NoSchedule"}]
    assert node(plane, "spare-1")["metadata"]["resourceVersion"] == before["spare-1"]["metadata"]["resourceVersion"]
    events = {(e["involvedObject"]["name"], e["reason"]) for e in node_events(plane)}
    assert events == {("hot-1", "LandingGuardMarked"), ("hot-2", "LandingGuardMarked"),
                      ("hot-3", "LandingGuardMarked"), ("spare-2", "LandingGuardCleared")}  # fmt: skip
    [hot2_event] = [e for e in node_events(plane) if e["involvedObject"]["name"] == "hot-2"]
    assert (
        hot2_event["involvedObject"]["kind"] == "Node"
        and hot2_event["involvedObject"]["uid"] == hot2["metadata"]["uid"]
    )
    assert "rebalancer.io/landing-guard=hot:NoSchedule until" in hot2_event["message"]
    assert cycles.counted() == {
        ("general", "set", "relieved", "applied"): 2.0,
        ("batch", "set", "hot", "applied"): 1.0,
        ("other", "clear", "guard-off", "applied"): 1.0,
    }

    patches = node_patches(plane)
    cycles.run(T1 + 60)  # nothing new to write: relieved marks hold, hot-2's mark is fresh
    assert node_patches(plane) - patches <= 2  # hot-1/hot-3 may be relieved again (their hold restarts)
    assert marks(plane)["hot-2"] == after["hot-2"]

    cycles.run(END)  # hot-1 has cooled, its hold is over; hot-3 is hot again; spare-3's hold expired
    at_end = marks(plane)
    assert "hot-1" not in at_end and "spare-3" not in at_end
    hot3 = at_end["hot-3"]
    assert isinstance(hot3, Mark) and hot3.expires >= END + 600
    assert at_end["hot-2"] == Mark(me, "NoSchedule", MarkReason.HOT, END + 900)  # expired, still hot: renewed
    assert node(plane, "hot-1")["spec"].get("taints", []) == []

    cooler = write_policy(tmp_path / "cooler.yaml", prometheus.url, GUARD).read_text()
    (tmp_path / "cooler.yaml").write_text(cooler.replace("targetThresholds: {cpu: 70}", "targetThresholds: {cpu: 95}"))
    cycles.run(END + 60, tmp_path / "cooler.yaml")  # nothing above 95%: the hot mark goes at once
    final = marks(plane)
    assert "hot-2" not in final
    assert node(plane, "hot-2")["spec"]["taints"] == [DEDICATED]
    counted = cycles.counted()
    assert counted[("batch", "clear", "cooled", "applied")] == 1.0
    assert counted[("general", "clear", "expired", "applied")] == 2.0  # hot-1 and spare-3


def test_a_dry_run_patches_no_node(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    before = marks(plane)
    dry = Cycles(kubeconfig, write_policy(tmp_path / "policy.yaml", prometheus.url, GUARD), T1, DryRun.CLIENT)
    try:
        dry.run(T1)
    finally:
        dry.close()
    assert node_patches(plane) == 0 and marks(plane) == before
    assert dry.counted()[("batch", "set", "hot", "dry-run")] == 1.0


def run_serve(policy: Path, kubeconfig: Path, clock: Callable[[], float], done: Callable[[], bool]) -> None:
    """``rebalancer serve`` in this (main) thread until ``done`` holds (checked from another thread), then
    its graceful shutdown, as on SIGTERM."""
    from rebalancer.app.root import ClusterConnection

    stop = threading.Event()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        assert serve(policy, ClusterConnection(str(kubeconfig)), DryRun.OFF, clock, stop) == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def serve_policy(tmp_path: Path, prometheus: PrometheusServer, run_on_start: bool, watch_cache: bool = False) -> Path:
    path = write_policy(tmp_path / "serve.yaml", prometheus.url, GUARD)
    text = path.read_text().replace(
        "service: {watchCache: {enabled: false}}",
        f"service: {{host: 127.0.0.1, port: {free_port()}, metricsPort: {free_port()}, "
        f"webhook: {{allowUnauthenticated: true}}, runOnStart: {str(run_on_start).lower()}, "
        f"watchCache: {{enabled: {str(watch_cache).lower()}}}, leaderElection: {{enabled: false}}}}",
    )
    path.write_text(text)
    return path


def test_serve_sweeps_what_a_crashed_instance_left_at_start(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    crashed = "rebalancer/crashed"
    set_node(plane, "hot-1", [], Mark(crashed, "PreferNoSchedule", MarkReason.RELIEVED, T1 - 60))  # expired
    set_node(plane, "cold-1", [], Mark(crashed, "PreferNoSchedule", MarkReason.RELIEVED, T1 + 300))  # holds
    policy = serve_policy(tmp_path, prometheus, run_on_start=False)  # no cycle: only the start-up sweep acts

    run_serve(policy, kubeconfig, lambda: T1, lambda: "hot-1" not in marks(plane))

    left = marks(plane)
    assert "hot-1" not in left and "spare-2" not in left  # expired; pool without a guard
    assert left["cold-1"] == Mark(crashed, "PreferNoSchedule", MarkReason.RELIEVED, T1 + 300)  # its hold honoured,
    assert left["spare-3"] == Mark(crashed, "PreferNoSchedule", MarkReason.RELIEVED, T1 + 100)  # and not released
    assert isinstance(left["spare-1"], Foreign)


@pytest.mark.parametrize("watch_cache", [False, True], ids=["listing", "watch-cache"])
def test_serve_marks_hot_nodes_and_releases_its_marks_at_shutdown(
    watch_cache: bool, plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = serve_policy(tmp_path, prometheus, run_on_start=True, watch_cache=watch_cache)
    seen: dict[str, Any] = {}

    def marked() -> bool:
        seen.update(marks(plane))
        return {"hot-1", "hot-2", "hot-3"} <= set(seen)

    run_serve(policy, kubeconfig, lambda: T1, marked)

    assert all(isinstance(seen[n], Mark) and seen[n].owner.startswith("rebalancer/") for n in ("hot-1", "hot-3"))
    left = marks(plane)
    assert not {"hot-1", "hot-2", "hot-3"} & set(left)  # released at shutdown
    assert left["spare-3"].owner == "rebalancer/crashed"  # type: ignore[union-attr]  # another owner's: kept
    assert isinstance(left["spare-1"], Foreign)
    assert node(plane, "hot-2")["spec"]["taints"] == [DEDICATED]
