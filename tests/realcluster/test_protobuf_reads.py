"""The full read in the Kubernetes protobuf encoding against a real kube-apiserver: the same domain objects as
the JSON read, object by object, for pods and nodes that use every field a snapshot reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from rebalancer.adapters.kube import KubeSource, connect, protobuf_lists, wire
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.domain.settings.shared import ProtectionSettings
from rebalancer.planning.protections import Protections
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
NAMESPACE = "wide"


def rich_pod(name: str, node: str, i: int) -> dict[str, Any]:
    """A pod with every field the snapshot reads set, some left out on odd pods."""
    pod = o.pod(name, NAMESPACE, node=node, labels={"app": "wide", "tier": f"t{i % 3}"},
                owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "wide-rs",
                         "uid": "0a6f5e36-9f9b-4f7c-8e3c-9a1f5c3f0001", "controller": True}])  # fmt: skip
    pod["metadata"]["annotations"] = {**dict.fromkeys(ANNOTATIONS, str(i)), "unread.example/big": "x" * 500}
    spec = pod["spec"]
    spec["containers"][0]["resources"]["limits"] = {"cpu": "500m", "memory": "128Mi"}
    spec["containers"].append({"name": "side", "image": "registry.example/side:1",
                               "resources": {"requests": {"cpu": "5m"}}, "env": [{"name": "A", "value": "b"}]})  # fmt: skip
    spec["initContainers"] = [{"name": "init", "image": "registry.example/init:1", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]  # fmt: skip
    spec["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "conf"}}]
    spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
                           {"operator": "Exists"}]  # fmt: skip
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    if i % 2 == 0:
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
                                             "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 7, "preference": term}]}}  # fmt: skip
        spec["priorityClassName"] = "wide-high"
    if i % 3 == 0:  # inter-pod terms: every field the scheduler model reads, selectors present and empty
        mine = {"labelSelector": {"matchLabels": {"app": "wide"}}, "topologyKey": "kubernetes.io/hostname"}
        near = {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["t1"]}]},
                "namespaces": [NAMESPACE, "other"], "topologyKey": "zone"}  # fmt: skip
        everywhere = {"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "zone"}
        affinity = spec.setdefault("affinity", {})
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [mine],
                                       "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "podAffinityTerm": near}]}  # fmt: skip
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": everywhere}]}  # fmt: skip
    return pod


@pytest.fixture(scope="module")
def wide(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The objects, with the controllers stopped: none changes while both encodings read them."""
    with control_plane.controllers_paused():
        created = populate(control_plane)
        yield control_plane
    admin = control_plane.admin
    admin.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/wide-leaving", {"metadata": {"finalizers": None}})
    for path in created:
        admin.delete(path, gracePeriodSeconds=0)


def populate(plane: ControlPlane) -> list[str]:
    admin = plane.admin
    created = []
    for i in range(3):
        node = o.node(f"wide-node-{i}", labels={"zone": "ab"[i % 2]})
        node["spec"] = {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
                        "unschedulable": i == 2}  # fmt: skip
        if i == 1:
            node["metadata"]["annotations"] = {GUARD_KEY: "until-2030", "unread.example/a": "b"}
        node["status"]["addresses"] = [{"type": "InternalIP", "address": f"10.9.0.{i}"}]
        admin.create(node)
        created.append(f"/api/v1/nodes/wide-node-{i}")
    plane.namespace(NAMESPACE)
    admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "wide-high"},
                  "value": 1000})  # fmt: skip
    created.append("/apis/scheduling.k8s.io/v1/priorityclasses/wide-high")
    for i in range(40):
        name = f"wide-{i:02d}"
        admin.create(rich_pod(name, f"wide-node-{i % 3}", i))
        created.append(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        if i % 2 == 0:
            status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"name": "app", "image": "registry.example/app:1", "imageID": "",
                                             "ready": True, "restartCount": 3, "state": {"running": {}}}]}  # fmt: skip
            admin.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status", {"status": status})
    held = o.pod("wide-leaving", NAMESPACE, node="wide-node-0")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    admin.create(held)
    admin.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/wide-leaving")  # stays, with a deletionTimestamp
    return created


def reader(plane: ControlPlane, tmp_path: Path, encoding: Any, page_size: int = 15) -> KubeSource:
    assert plane.pki is not None
    kubeconfig = plane.kubeconfig(tmp_path / "kubeconfig", plane.pki.admin_token)
    return KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, page_size=page_size, list_mode="paged",
                      encoding=encoding)  # fmt: skip


def test_protobuf_and_json_reads_give_the_same_objects(wide: ControlPlane, tmp_path: Path) -> None:
    protobuf_reader, json_reader = reader(wide, tmp_path, "protobuf"), reader(wide, tmp_path, "json")
    protobuf, json = protobuf_reader.read_facts(), json_reader.read_facts()
    assert protobuf_reader.last_stats.encodings == {"nodes": "protobuf", "replicasets": "protobuf",
                                                    "pods": "protobuf", "poddisruptionbudgets": "json"}  # fmt: skip
    assert set(json_reader.last_stats.encodings.values()) == {"json"}
    mine = [p for p in protobuf.pods if p.namespace == NAMESPACE]
    assert len(mine) == 41
    assert [p for p in json.pods if p.namespace == NAMESPACE] == mine
    assert protobuf.pods == json.pods
    assert protobuf.nodes == json.nodes
    assert protobuf.budgets == json.budgets
    assert protobuf.resource_version == json.resource_version
    wide_nodes = {n.name: n for n in protobuf.nodes if n.name.startswith("wide-node-")}
    assert wide_nodes["wide-node-1"].annotations == {GUARD_KEY: "until-2030"}
    assert wide_nodes["wide-node-2"].unschedulable
    leaving = next(p for p in mine if p.name == "wide-leaving")
    assert leaving.terminating
    sample = next(p for p in mine if p.name == "wide-00")
    assert (sample.owner_kind, sample.priority, sample.ready, sample.restarts) == ("ReplicaSet", 1000, True, 3)
    terms = sample.pod_affinity
    assert terms is not None and len(terms.required_anti) == len(terms.preferred_anti) == len(terms.preferred) == 1
    assert terms.preferred[0].term.namespaces is None  # an empty namespaceSelector: every namespace


def test_the_server_answers_protobuf_and_its_page_head_is_read_ahead(wide: ControlPlane, tmp_path: Path) -> None:
    """The pages come as protobuf (not JSON, which the request also accepts), their metadata read ahead."""
    assert wide.pki is not None
    api = connect(kubeconfig=str(wide.kubeconfig(tmp_path / "kubeconfig", wide.pki.admin_token)))
    call = ListCall("nodes", "node", CoreV1Api(api).list_node, wire.NODE_LIST, protobuf=protobuf_lists.node_list)
    raw = call.method(limit=2, _headers={"Accept": protobuf_lists.ACCEPT}, _preload_content=False).data
    assert protobuf_lists.is_protobuf(raw)
    head = call.head(raw)
    assert head is not None and head.continue_ and head.resource_version
    assert len(call.body(raw).items) == 2
    with pytest.raises(KubeUnavailable, match=r"list nodes: malformed protobuf response: not a NodeList"):
        call.body(raw[:-7])
