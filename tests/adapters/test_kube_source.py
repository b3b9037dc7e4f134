"""KubeSource with the real ``kubernetes`` client against the test API server (tests/kubeapi)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import urllib3

from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.adapters.kube.lister import MAX_RELISTS
from rebalancer.domain.errors import ConfigError, KubeForbidden, KubeUnavailable, RebalancerError
from rebalancer.domain.labels import (
    LabelSelector,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PreferredTerm,
    Requirement,
    WeightedPodAffinityTerm,
)
from rebalancer.domain.model import ClusterFacts, Pod, Taint, Toleration, WorkloadRef
from rebalancer.domain.settings.shared import ProtectionSettings
from rebalancer.planning.protections import Protections
from tests.kubeapi import Fault, Request, TestApiServer, status
from tests.kubeapi import builders as b

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
PODS = "/api/v1/pods"


def read(kubeconfig: Path, node_name: str | None = None, **options: Any) -> ClusterFacts:
    return KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, **options).read_facts(node_name)


def by_name(facts: ClusterFacts) -> dict[str, Pod]:
    return {p.name: p for p in facts.pods}


def add_many_pods(server: TestApiServer, count: int, nodes: int = 20) -> None:
    server.add(*(b.node(f"node-{i}") for i in range(nodes)))
    server.add(b.deployment("big"), b.replica_set("big-7f9c", deployment="big", replicas=count))
    for i in range(count):
        server.add(
            b.pod(
                f"big-7f9c-{i:05d}",
                namespace=f"ns-{i % 7}",
                node=f"node-{i % nodes}",
                owners=[b.owner("ReplicaSet", "big-7f9c")],
            )
        )


# --- paging ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("page_size", "pages"), [(500, 3), (97, 13), (5000, 1)])
def test_paging_returns_every_pod_exactly_once(
    kube_server: TestApiServer, kubeconfig: Path, page_size: int, pages: int
) -> None:
    add_many_pods(kube_server, 1234)
    source = KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, page_size=page_size, list_mode="paged")

    facts = source.read_facts()

    assert len(facts.pods) == 1234
    assert len({p.uid for p in facts.pods}) == 1234
    assert len({p.key for p in facts.pods}) == 1234
    assert len(facts.nodes) == 20
    requests = kube_server.requests_to(PODS)
    assert len(requests) == pages == source.last_stats.pages["pods"]
    assert all(r.query["limit"] == str(page_size) for r in requests)
    assert "continue" not in requests[0].query
    assert all(r.query.get("continue") for r in requests[1:])
    assert facts.resource_version == str(kube_server.store.revision)


def test_expired_continue_token_restarts_the_list(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_many_pods(kube_server, 1234)
    added: list[dict[str, Any]] = []

    def compact_mid_list(request: Request) -> None:
        # Between two pages a pod is created and etcd compacts: the token of page 1 is gone.
        if request.path == PODS and request.query.get("continue") and not added:
            added.append(kube_server.store.create(b.pod("late-arrival", node="node-3")))
            kube_server.store.expire_continue_tokens()

    kube_server.on_request(compact_mid_list)
    source = KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, page_size=500, list_mode="paged")

    facts = source.read_facts()

    assert len(facts.pods) == 1235
    assert len({p.key for p in facts.pods}) == 1235
    assert "late-arrival" in by_name(facts)
    assert source.last_stats.relists["pods"] == 1
    queries = [r.query for r in kube_server.requests_to(PODS)]
    assert ["continue" in q for q in queries] == [False, True, False, True, True]


def test_a_list_that_keeps_expiring_fails_after_bounded_relists(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_many_pods(kube_server, 30, nodes=2)
    kube_server.expire_continue_on(PODS, times=100)

    with pytest.raises(KubeUnavailable, match="continue token expired") as caught:
        read(kubeconfig, page_size=10, list_mode="paged")

    assert caught.value.status == 410
    assert caught.value.reason == "Expired"
    assert len(kube_server.requests_to(PODS)) == 2 * (MAX_RELISTS + 1)


def test_a_cached_list_the_cache_cannot_continue_is_listed_in_consistent_pages(
    kube_server: TestApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Over etcd 3.4 a quiet collection's cache stays at its last change; compacted, its pages cannot go on."""
    add_many_pods(kube_server, 30, nodes=2)
    kube_server.expire_continue_on(PODS, times=1)

    with caplog.at_level(logging.WARNING, logger="rebalancer.adapters.kube.lister"):
        source = KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, page_size=10, list_mode="cached")
        facts = source.read_facts()

    assert len({p.key for p in facts.pods}) == 30
    assert source.last_stats.modes == {"nodes": "cached", "replicasets": "cached", "pods": "paged",
                                       "poddisruptionbudgets": "cached"}  # fmt: skip
    queries = [r.query for r in kube_server.requests_to(PODS)]
    assert [q.get("resourceVersionMatch") for q in queries] == ["NotOlderThan", None, None, None, None]
    assert "list pods: the watch cache could not continue its list (list pods: HTTP 410 Expired" in caplog.text
    assert "listing consistent pages" in caplog.text


def test_node_name_reads_one_node_and_its_pods_by_field_selector(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_many_pods(kube_server, 100, nodes=4)

    facts = read(kubeconfig, node_name="node-2")

    assert [n.name for n in facts.nodes] == ["node-2"]
    assert len(facts.pods) == 25
    assert {p.node_name for p in facts.pods} == {"node-2"}
    assert kube_server.requests_to(PODS)[0].query["fieldSelector"] == "spec.nodeName=node-2"
    assert kube_server.requests_to("/api/v1/nodes")[0].query["fieldSelector"] == "metadata.name=node-2"


def test_empty_cluster(kube_server: TestApiServer, kubeconfig: Path) -> None:
    facts = read(kubeconfig)
    assert (facts.nodes, facts.pods, facts.budgets) == ((), (), ())


# --- pods ------------------------------------------------------------------------------------


def test_workloads_are_resolved_through_replica_sets(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(*b.deployment_chain("web", "shop", replicas=2))
    kube_server.add(b.replica_set("orphan-rs", "shop"))  # a ReplicaSet nobody controls
    controlled = [
        ("db-0", b.owner("StatefulSet", "db")),
        ("agent-x1", b.owner("DaemonSet", "agent")),
        ("migrate-abc", b.owner("Job", "migrate")),
        ("orphan-rs-1", b.owner("ReplicaSet", "orphan-rs")),
        ("unlisted-rs-1", b.owner("ReplicaSet", "unlisted-rs")),  # its ReplicaSet is not (yet) listed
        ("rollout-1", b.owner("Rollout", "canary", api_version="argoproj.io/v1alpha1")),
    ]
    for name, ref in controlled:
        kube_server.add(b.pod(name, namespace="shop", owners=[ref]))
    kube_server.add(b.pod("bare", namespace="shop"))
    kube_server.add(b.pod("gc-only", namespace="shop", owners=[b.owner("ConfigMap", "cm", controller=False)]))

    pods = by_name(read(kubeconfig))

    web = [p for p in pods.values() if p.name.startswith("web-")]
    assert len(web) == 2
    assert {p.workload for p in web} == {WorkloadRef("Deployment", "shop", "web")}
    assert {p.owner_kind for p in web} == {"ReplicaSet"}
    expected = {
        "db-0": ("StatefulSet", "db"),
        "agent-x1": ("DaemonSet", "agent"),
        "migrate-abc": ("Job", "migrate"),
        "orphan-rs-1": ("ReplicaSet", "orphan-rs"),
        "unlisted-rs-1": ("ReplicaSet", "unlisted-rs"),
        "rollout-1": ("Rollout", "canary"),
    }
    for name, (kind, owner) in expected.items():
        assert pods[name].workload == WorkloadRef(kind, "shop", owner), name
        assert pods[name].owner_kind == kind
    assert pods["bare"].workload is None and pods["bare"].owner_kind is None
    assert pods["gc-only"].workload is None and pods["gc-only"].owner_kind is None


def test_requests_count_init_containers_sidecars_and_overhead(kube_server: TestApiServer, kubeconfig: Path) -> None:
    app = [b.container("a", cpu="100m", memory="100Mi"), b.container("b", cpu="200m", memory="50Mi")]
    kube_server.add(
        # max(300m, 500m) + 50m overhead; memory max(150Mi, 64Mi) + 10Mi.
        b.pod("init", containers=app, init_containers=[b.container("i", cpu="500m", memory="64Mi")],
              overhead={"cpu": "50m", "memory": "10Mi"}),
        # A sidecar (restartPolicy Always) adds to the app containers and to later init containers.
        b.pod("sidecar", containers=app, init_containers=[
            b.container("mesh", cpu="100m", memory="20Mi", restart_policy="Always"),
            b.container("setup", cpu="350m", memory="10Mi"),
        ]),
        # Limits only: the API server defaults the requests to the limits.
        b.pod("limits", containers=[b.container(limit_cpu="1", limit_memory="1Gi")]),
        b.pod("best-effort", containers=[b.container()]),
        b.pod("decimal", containers=[b.container(cpu="0.25", memory="1G")]),
    )  # fmt: skip

    pods = by_name(read(kubeconfig))

    assert (pods["init"].cpu_request_m, pods["init"].memory_request) == (550, 160 * 2**20)
    assert (pods["sidecar"].cpu_request_m, pods["sidecar"].memory_request) == (450, 170 * 2**20)
    assert (pods["limits"].cpu_request_m, pods["limits"].memory_request, pods["limits"].qos) == (
        1000,
        2**30,
        "Guaranteed",
    )
    assert (pods["best-effort"].cpu_request_m, pods["best-effort"].qos) == (0, "BestEffort")
    assert (pods["decimal"].cpu_request_m, pods["decimal"].memory_request) == (250, 10**9)
    assert pods["init"].qos == "Burstable"


def test_pod_facts(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        b.pod(
            "full",
            namespace="team-a",
            node="node-7",
            labels={"app": "full", "tier": "web"},
            annotations={
                "controller.kubernetes.io/pod-deletion-cost": "-5",
                "rebalancer.io/evict": "false",
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}",
                "prometheus.io/scrape": "true",
            },
            priority=1000,
            priority_class="high",
            phase="Running",
            ready=False,
            restarts=[2, 3],
            containers=[b.container("a", cpu="10m"), b.container("b", cpu="10m")],
            created="2024-05-01T08:00:00.5+02:00",
            volumes=[
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                {"name": "conf", "configMap": {"name": "conf"}},
            ],
        ),
        b.pod("going", deleting=True, phase="Running"),
        b.pod("pending", node=None, phase="Pending", ready=False, priority=None),
    )

    pods = by_name(read(kubeconfig))
    full = pods["full"]

    assert (full.namespace, full.node_name, full.phase, full.ready) == ("team-a", "node-7", "Running", False)
    assert (full.priority, full.priority_class, full.restarts) == (1000, "high", 5)
    assert full.created == 1714543200.5
    assert full.labels == {"app": "full", "tier": "web"}
    assert dict(full.annotations) == {
        "controller.kubernetes.io/pod-deletion-cost": "-5",
        "rebalancer.io/evict": "false",
    }
    assert full.deletion_cost == -5
    assert full.volume_kinds == {"emptyDir", "persistentVolumeClaim", "configMap", "projected"}
    assert len(full.uid) == 36
    assert not full.terminating and not full.mirror
    assert pods["going"].terminating
    assert (pods["pending"].node_name, pods["pending"].priority) == (None, 0)


def test_mirror_pods_are_recognised_even_when_the_annotation_is_not_kept(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.add(
        b.pod(
            "kube-apiserver-node-1",
            namespace="kube-system",
            annotations={
                "kubernetes.io/config.mirror": "d41d8cd98f00b204e9800998ecf8427e",
                "kubernetes.io/config.source": "file",
            },
            owners=[b.owner("Node", "node-1")],
            priority=2000001000,
            priority_class="system-node-critical",
        )
    )

    source = KubeSource(connect(kubeconfig=str(kubeconfig)), frozenset())
    pod = source.read_facts().pods[0]

    assert pod.mirror
    assert pod.annotations == {}
    assert pod.owner_kind == "Node"
    assert pod.priority == 2000001000


def test_tolerations_node_selector_and_node_affinity(kube_server: TestApiServer, kubeconfig: Path) -> None:
    tolerations: list[dict[str, Any]] = [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "spot", "value": "true"},  # operator defaults to Equal, effect to all
        {"operator": "Exists"},
        *b.DEFAULT_TOLERATIONS,
    ]
    affinity = b.required_affinity(
        [("pool", "In", ["gpu", "batch"]), ("kubernetes.io/arch", "NotIn", ["arm64"])],
        [("node.kubernetes.io/instance-type", "Exists", [])],
    )
    kube_server.add(
        b.pod("a", tolerations=tolerations, node_selector={"pool": "gpu"}, affinity=affinity),
        b.pod("b", tolerations=tolerations, node_selector={"pool": "gpu"}, affinity=affinity),
    )

    pods = by_name(read(kubeconfig))
    a = pods["a"]

    assert a.tolerations == (
        Toleration("dedicated", "Equal", "gpu", "NoSchedule"),
        Toleration("spot", "Equal", "true", ""),
        Toleration("", "Exists", "", ""),
        Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
        Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    )
    assert a.node_selector == {"pool": "gpu"}
    assert a.required_affinity == (
        NodeSelectorTerm(
            match_expressions=(
                Requirement("pool", "In", ("gpu", "batch")),
                Requirement("kubernetes.io/arch", "NotIn", ("arm64",)),
            )
        ),
        NodeSelectorTerm(match_expressions=(Requirement("node.kubernetes.io/instance-type", "Exists"),)),
    )
    # the builder's preferred term (the scheduler's NodeAffinity score)
    assert a.preferred_affinity == (
        PreferredTerm(10, NodeSelectorTerm(match_expressions=(Requirement("zone", "In", ("a",)),))),
    )
    # Identical values are shared between pods, not repeated.
    assert pods["b"].tolerations is a.tolerations
    assert pods["b"].required_affinity is a.required_affinity
    assert pods["b"].preferred_affinity is a.preferred_affinity
    assert pods["b"].node_selector is a.node_selector


def test_inter_pod_affinity_terms_with_their_namespaces_resolved(kube_server: TestApiServer, kubeconfig: Path) -> None:
    front = {"labelSelector": {"matchLabels": {"app": "front"}}, "topologyKey": "kubernetes.io/hostname"}
    affinity = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [front]},
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {**front, "namespaces": ["other"], "topologyKey": "zone"},
                {"topologyKey": "zone", "namespaceSelector": {}},  # no labelSelector: matches no pod
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "podAffinityTerm": {**front, "namespaceSelector": {"matchLabels": {"team": "x"}}}},
                {"weight": 0, "podAffinityTerm": front},  # no effect: left out
            ],
        },
    }
    kube_server.add(b.pod("a", namespace="shop", affinity=affinity), b.pod("b", namespace="shop", affinity=affinity))

    pods = by_name(read(kubeconfig))

    selector = LabelSelector(match_labels=(("app", "front"),))
    assert pods["a"].pod_affinity == PodAffinity(
        required=(
            PodAffinityTerm("zone", selector, frozenset({"other"})),
            PodAffinityTerm("zone", None, None),  # an empty namespaceSelector: every namespace
        ),
        required_anti=(PodAffinityTerm("kubernetes.io/hostname", selector, frozenset({"shop"})),),
        preferred=(
            WeightedPodAffinityTerm(
                30,
                PodAffinityTerm(
                    "kubernetes.io/hostname", selector, frozenset(), LabelSelector(match_labels=(("team", "x"),))
                ),
            ),
        ),
    )
    assert pods["b"].pod_affinity is pods["a"].pod_affinity  # decoded once per namespace and text


def test_a_malformed_inter_pod_term_names_the_pod_and_the_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.pod("a", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 5}}))

    with pytest.raises(KubeUnavailable, match=r"pod default/a: spec\.affinity\.podAntiAffinity"):
        read(kubeconfig)


# --- nodes and budgets -----------------------------------------------------------------------


def test_node_facts(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        b.node("ok", cpu="16", memory="64Gi", allocatable={"cpu": "15890m", "memory": "62Gi", "pods": "110"}),
        b.node("cordoned", unschedulable=True, taints=[b.taint("node.kubernetes.io/unschedulable")]),
        b.node("tainted", taints=[b.taint("dedicated", "NoExecute", "gpu"), b.taint("spot", "PreferNoSchedule")]),
        b.node("not-ready", ready=False),
        b.node("never-reported", ready=None),
        b.node("no-allocatable", cpu="4", allocatable={}),
    )

    nodes = {n.name: n for n in read(kubeconfig).nodes}

    ok = nodes["ok"]
    assert (ok.allocatable_cpu_m, ok.allocatable_memory, ok.allocatable_pods) == (15890, 62 * 2**30, 110)
    assert ok.ready and not ok.unschedulable and ok.taints == ()
    assert ok.labels["kubernetes.io/hostname"] == "ok"
    assert nodes["cordoned"].unschedulable
    assert nodes["cordoned"].taints == (Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),)
    assert nodes["tainted"].taints == (Taint("dedicated", "gpu", "NoExecute"), Taint("spot", "", "PreferNoSchedule"))
    assert not nodes["not-ready"].ready
    assert not nodes["never-reported"].ready
    assert nodes["no-allocatable"].allocatable_cpu_m == 4000  # falls back to capacity


def test_disruption_budgets(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        b.pdb("labels", "shop", selector={"matchLabels": {"app": "web"}}, min_available=2),
        b.pdb("percent", "shop", selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]},
              max_unavailable="25%", disruptions_allowed=0, current_healthy=3, desired_healthy=3, expected_pods=4),
        b.pdb("everything", "shop", selector={}, min_available="100%"),
        b.pdb("nothing", "shop"),
    )  # fmt: skip
    kube_server.add(b.pod("web-1", namespace="shop", labels={"app": "web"}), b.pod("web-1", namespace="other"))

    facts = read(kubeconfig)
    budgets = {d.name: d for d in facts.budgets}
    shop_pod, other_pod = sorted(facts.pods, key=lambda p: p.namespace, reverse=True)

    labels = budgets["labels"]
    assert labels.selector == LabelSelector(match_labels=(("app", "web"),))
    assert (labels.min_available, labels.max_unavailable) == (2, None)
    assert labels.selects(shop_pod) and not labels.selects(other_pod)
    percent = budgets["percent"]
    assert percent.selector == LabelSelector(match_expressions=(Requirement("tier", "In", ("db",)),))
    assert (percent.min_available, percent.max_unavailable) == (None, "25%")
    assert (percent.disruptions_allowed, percent.current_healthy, percent.desired_healthy, percent.expected_pods) == (
        0,
        3,
        3,
        4,
    )
    assert budgets["everything"].selector == LabelSelector()
    assert budgets["everything"].selects(shop_pod) and not budgets["everything"].selects(other_pod)
    assert budgets["everything"].min_available == "100%"
    assert budgets["nothing"].selector is None
    assert not budgets["nothing"].selects(shop_pod)


# --- errors ----------------------------------------------------------------------------------


def test_forbidden_names_the_missing_permission(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.set_fault(PODS, Fault(error=status.forbidden(kube_server.user, "list", "pods", "")))

    with pytest.raises(KubeForbidden) as caught:
        read(kubeconfig)

    assert caught.value.status == 403
    assert caught.value.reason == "Forbidden"
    text = str(caught.value)
    assert text.startswith("list pods: HTTP 403 Forbidden: pods is forbidden: ")
    assert 'cannot list resource "pods" in API group "" at the cluster scope' in text
    assert isinstance(caught.value.__cause__, kubernetes.client.ApiException)


@pytest.mark.parametrize(
    ("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable"), (429, "TooManyRequests")]
)
def test_server_errors(kube_server: TestApiServer, kubeconfig: Path, code: int, reason: str) -> None:
    kube_server.add(b.node("node-1"))
    kube_server.set_fault("/apis/policy/v1/poddisruptionbudgets", Fault(code=code, message="etcd leader changed"))

    with pytest.raises(KubeUnavailable) as caught:
        read(kubeconfig)

    assert not isinstance(caught.value, KubeForbidden)
    assert (caught.value.status, caught.value.reason) == (code, reason)
    assert str(caught.value) == f"list poddisruptionbudgets: HTTP {code} {reason}: etcd leader changed"


def test_wrong_credentials(kube_server: TestApiServer, tmp_path: Path) -> None:
    config = b.write_kubeconfig(tmp_path / "kubeconfig", kube_server.url, token="stale-token")

    with pytest.raises(KubeUnavailable, match="list nodes: HTTP 401 Unauthorized: Unauthorized") as caught:
        read(config)
    assert caught.value.status == 401


def test_server_down(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.stop()

    with pytest.raises(KubeUnavailable, match=f"list nodes: cannot reach the Kubernetes API at {kube_server.url}: "):
        read(kubeconfig)


def test_server_stopping_between_reads(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"))
    source = KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS)
    assert len(source.read_facts().nodes) == 1  # pooled keep-alive connections now exist
    kube_server.stop()

    with pytest.raises(KubeUnavailable, match="cannot reach"):
        source.read_facts()


def test_timeout(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.set_fault("/api/v1/nodes", Fault(delay=30.0))  # held until the test ends
    started = time.monotonic()

    with pytest.raises(
        KubeUnavailable, match=r"list nodes: no answer from http://127\.0\.0\.1:\d+ within 0\.3s"
    ) as caught:
        read(kubeconfig, request_timeout=0.3)

    assert caught.value.reason == "Timeout"
    assert len(kube_server.requests_to("/api/v1/nodes")) <= 2  # one read retry at most
    assert time.monotonic() - started < 6.0  # 0.3 s twice, never the server's 30 s; 5 s for a loaded machine


def test_dropped_connection(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.set_fault("/apis/apps/v1/replicasets", Fault(drop=True))

    with pytest.raises(KubeUnavailable, match="list replicasets: cannot reach the Kubernetes API"):
        read(kubeconfig)


def test_a_dropped_connection_is_retried_once(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"))
    kube_server.set_fault("/api/v1/nodes", Fault(drop=True, times=1))

    assert [n.name for n in read(kubeconfig).nodes] == ["node-1"]


def test_malformed_quantity_names_pod_and_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        b.pod("fine"), b.pod("bad", namespace="team-b", containers=[b.container(), b.container("x", cpu="2 cores")])
    )

    with pytest.raises(KubeUnavailable) as caught:
        read(kubeconfig)

    assert str(caught.value) == "pod team-b/bad: spec.containers[1].resources.requests.cpu: not a quantity '2 cores'"


def test_malformed_timestamp_names_pod_and_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.pod("bad", created="yesterday"))

    with pytest.raises(KubeUnavailable, match=r"^pod default/bad: metadata.creationTimestamp: not an RFC 3339 time"):
        read(kubeconfig)


def test_wrong_json_type_names_object_and_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    bad = b.node("node-9")
    bad["status"]["allocatable"]["cpu"] = 4  # a number where the API always writes a string
    kube_server.add(b.node("node-1"), bad)

    with pytest.raises(KubeUnavailable) as caught:
        read(kubeconfig)

    # msgspec names a map's key as [...]
    assert str(caught.value) == "node node-9: status.allocatable[...]: Expected `str`, got `int`"


def test_a_kept_annotation_that_is_not_a_string_names_pod_and_key(kube_server: TestApiServer, kubeconfig: Path) -> None:
    bad = b.pod("bad", namespace="team-c")
    bad["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": 5}  # the API always writes strings
    kube_server.add(b.pod("fine"), bad)

    with pytest.raises(KubeUnavailable) as caught:
        read(kubeconfig)

    assert str(caught.value) == (
        "pod team-c/bad: metadata.annotations[controller.kubernetes.io/pod-deletion-cost]: Expected `str`, got `int`"
    )
    assert caught.value.reason == "Malformed"


def test_an_annotation_not_kept_is_never_read(kube_server: TestApiServer, kubeconfig: Path) -> None:
    odd = b.pod("odd")
    odd["metadata"]["annotations"] = {"example.com/not-kept": {"nested": [1, 2]}, "rebalancer.io/evict": "true"}
    kube_server.add(odd)

    assert dict(read(kubeconfig).pods[0].annotations) == {"rebalancer.io/evict": "true"}


def test_a_body_that_is_not_json(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.set_fault("/api/v1/nodes", Fault(body=b"<html><body>502 Bad Gateway</body></html>"))

    with pytest.raises(KubeUnavailable, match="list nodes: malformed response: JSON is malformed"):
        read(kubeconfig)


FAULTS: dict[str, Fault] = {
    "forbidden": Fault(error=status.forbidden("u", "list", "pods", "")),
    "internal": Fault(code=500),
    "unavailable": Fault(code=503, retry_after=1),
    "throttled": Fault(code=429, retry_after=1),
    "not-found": Fault(code=404),
    "drop": Fault(drop=True),
    "timeout": Fault(delay=3.0),
    "html": Fault(body=b"<html/>"),
    "wrong-type": Fault(body=b'{"kind":"PodList","items":[{"metadata":{"name":1}}]}'),
    "expired": Fault(error=status.expired_continue(None)),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_no_library_exception_leaks(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    kube_server.set_fault(PODS, fault)

    with pytest.raises(RebalancerError) as caught:
        read(kubeconfig, request_timeout=0.3)

    assert isinstance(caught.value, KubeUnavailable)
    assert not isinstance(caught.value, kubernetes.client.exceptions.OpenApiException | urllib3.exceptions.HTTPError)


def test_no_library_exception_leaks_when_nothing_listens(tmp_path: Path) -> None:
    with TestApiServer() as server:
        url = server.url
    config = b.write_kubeconfig(tmp_path / "kubeconfig", url)

    with pytest.raises(KubeUnavailable):
        read(config)


# --- connect ---------------------------------------------------------------------------------


def test_connect_uses_the_requested_context(kube_server: TestApiServer, tmp_path: Path) -> None:
    kube_server.add(b.node("from-test-server"))
    config = b.write_kubeconfig(
        tmp_path / "kubeconfig", "http://127.0.0.1:9", context="broken", extra_contexts={"good": kube_server.url}
    )
    client = connect(kubeconfig=str(config), context="good")

    assert client.configuration.host == kube_server.url
    assert [n.name for n in KubeSource(client, ANNOTATIONS).read_facts().nodes] == ["from-test-server"]
    assert kube_server.requests[0].headers["user-agent"].startswith("rebalancer/")


def test_connect_reads_kubeconfig_env(
    kube_server: TestApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    assert connect().configuration.host == kube_server.url


def test_connect_never_touches_the_client_default_configuration(kubeconfig: Path) -> None:
    before = kubernetes.client.Configuration.get_default_copy().host
    connect(kubeconfig=str(kubeconfig))
    assert kubernetes.client.Configuration.get_default_copy().host == before


@pytest.mark.parametrize(
    ("content", "context", "problem"),
    [
        (None, None, "no such file"),
        ("clusters: [unclosed", None, "kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", None, "kubeconfig"),
        ("", "missing", "missing"),
    ],
    ids=["missing-file", "bad-yaml", "no-contexts", "unknown-context"],
)
def test_connect_config_problems(
    tmp_path: Path, kube_server: TestApiServer, content: str | None, context: str | None, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content == "":
        b.write_kubeconfig(path, kube_server.url)
    elif content is not None:
        path.write_text(content)

    with pytest.raises(ConfigError, match=problem):
        connect(kubeconfig=str(path), context=context)


def test_connect_in_cluster_without_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")

    with pytest.raises(ConfigError, match="in-cluster configuration"):
        connect()
