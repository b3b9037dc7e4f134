"""Nodes, workloads and running pods made through a real API server alone (the ``api_server`` fixture: no controller,
scheduler or kubelet), for tests whose story fixes every pod's name, node and load: the owners a Deployment or
DaemonSet controller would make, the pod bound to its node, and the status its kubelet would report. An
evicted pod goes at once (a grace period of 0), as its kubelet would confirm; nothing replaces it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.controlplane import Admin
from tests.controlplane.admin import collection_path, object_path
from tests.realcluster import objects as o

WORKLOADS = (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"), ("apps/v1", "DaemonSet"))


def ready_node(admin: Admin, node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node created (Ready by its status) without the ``node.kubernetes.io/not-ready`` taint the API server's
    admission puts on every new node, as the node lifecycle controller takes it off once the node is Ready."""
    made = admin.create(node)
    ready: dict[str, Any] = admin.patch(f"/api/v1/nodes/{made['metadata']['name']}", {"spec": {"taints": None}})
    return ready


def owner_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def deployment(admin: Admin, name: str, namespace: str, replicas: int) -> dict[str, Any]:
    """A Deployment and the ReplicaSet its controller would make; the owner reference of the ReplicaSet."""
    made = admin.create(o.deployment(name, namespace, replicas=replicas))
    template = made["spec"]["template"]
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-5f7d8", "namespace": namespace, "labels": template["metadata"]["labels"],
                     "ownerReferences": [owner_ref(made)]},
        "spec": {"replicas": replicas, "selector": made["spec"]["selector"], "template": template},
    }  # fmt: skip
    return owner_ref(admin.create(rs))


def daemon_set(admin: Admin, name: str, namespace: str) -> dict[str, Any]:
    template = o.deployment(name, namespace, replicas=1)["spec"]
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": template["selector"], "template": template["template"]},
    }
    return owner_ref(admin.create(ds))


def running_pod(
    admin: Admin,
    name: str,
    namespace: str,
    node: str,
    owner: Mapping[str, Any],
    labels: Mapping[str, str],
    *,
    cpu: str = "200m",
    memory: str = "256Mi",
) -> dict[str, Any]:
    """The pod bound to ``node``, Running and Ready since its creation."""
    pod = o.pod(name, namespace, node=node, cpu=cpu, memory=memory, labels=labels, owners=[owner])
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    made = admin.create(pod)
    started = made["metadata"]["creationTimestamp"]
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": started}
                  for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]  # fmt: skip
    status = {
        "phase": "Running",
        "conditions": conditions,
        "startTime": started,
        "containerStatuses": [
            {"name": "app", "image": "registry.example/app:1", "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": started}}}
        ],
    }  # fmt: skip
    running: dict[str, Any] = admin.patch(object_path(made) + "/status", {"status": status})
    return running


def clear(admin: Admin, namespaces: Iterable[str]) -> None:
    """Removes what a test made in ``namespaces`` (workloads, pods, Events, ConfigMaps but the service CA's), every
    node, and the Events of ``default`` (nodes' Events); the namespaces stay (no controller would empty them)."""
    for namespace in namespaces:
        for api_version, kind in WORKLOADS:
            for obj in admin.items(api_version, kind, namespace):
                admin.delete(
                    item_path(api_version, kind, obj), propagationPolicy="Background"
                )  # no collector to wait for
        for pod in admin.items("v1", "Pod", namespace):
            admin.delete(item_path("v1", "Pod", pod), gracePeriodSeconds=0)
        for config_map in admin.items("v1", "ConfigMap", namespace):
            if config_map["metadata"]["name"].startswith("rebalancer-"):
                admin.delete(item_path("v1", "ConfigMap", config_map))
        admin.delete(collection_path("v1", "Event", namespace))
    for node in admin.items("v1", "Node"):
        admin.delete(item_path("v1", "Node", node))
    admin.delete(collection_path("v1", "Event", "default"))


def item_path(api_version: str, kind: str, obj: Mapping[str, Any]) -> str:
    """The path of an item of a list (whose items carry no apiVersion or kind)."""
    meta = obj["metadata"]
    return f"{collection_path(api_version, kind, meta.get('namespace'))}/{meta['name']}"
