"""Nodes, workloads and running pods made through a real API server alone (the ``api_server`` fixture: no controller,
scheduler or kubelet), for tests whose story fixes every pod's name, node and load: the owners a Deployment or
DaemonSet controller would make, the pod bound to its node, and the status its kubelet would report. An
evicted pod goes at once (a grace period of 0), as its kubelet would confirm; nothing replaces it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from tests.controlplane import USER, Admin, ApiError, ControlPlane
from tests.controlplane.admin import collection_path, object_path
from tests.controlplane.cluster import AuditEvent
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


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def clear(admin: Admin, namespaces: Iterable[str] | None = None) -> None:
    """Removes what a test made in ``namespaces`` (default: all but the system ones): workloads, pods, Events,
    Leases, rebalancer's ConfigMaps; every node, and the Events of ``default`` (nodes' Events). The namespaces stay (no
    controller would empty them)."""
    if namespaces is None:
        names = [n["metadata"]["name"] for n in admin.items("v1", "Namespace")]
        namespaces = [n for n in names if n not in SYSTEM_NAMESPACES]
    for namespace in namespaces:
        for api_version, kind in WORKLOADS:
            for obj in admin.items(api_version, kind, namespace):
                admin.delete(
                    item_path(api_version, kind, obj), propagationPolicy="Background"
                )  # no collector to wait for
        for pod in admin.items("v1", "Pod", namespace):
            admin.delete(item_path("v1", "Pod", pod), gracePeriodSeconds=0)
        for lease in admin.items("coordination.k8s.io/v1", "Lease", namespace):
            admin.delete(item_path("coordination.k8s.io/v1", "Lease", lease))
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


SERVER_SET = ("uid", "creationTimestamp", "resourceVersion", "managedFields", "generation", "selfLink")
KINDS = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1", "Deployment": "apps/v1"}


def add(plane: ControlPlane, *objs: Mapping[str, Any]) -> None:
    """Objects as tests/kubeapi/builders.py writes them (as a server stores them), made through the real API
    server: what the server sets itself left out, owner references pointed at the owners' real uids (an owner
    not made yet is made, as its controller would be there), a pod's priority given through a PriorityClass,
    a node's taints as written (the admission's not-ready one lifted), a pod's status written as its kubelet
    would report it. A namespace not made yet (or without its default service account) is made first."""
    admin = plane.admin
    for obj in objs:
        made = json.loads(json.dumps(obj))
        meta = made["metadata"]
        for key in SERVER_SET:
            meta.pop(key, None)
        namespace = meta.get("namespace")
        if namespace is not None and not admin.exists(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"):
            plane.namespace(namespace)  # with the service account pods need (no controller makes it)
        if meta.get("ownerReferences"):
            meta["ownerReferences"] = [_resolved(admin, ref, namespace, made) for ref in meta["ownerReferences"]]
        status = made.pop("status", None)
        kind = made["kind"]
        if kind == "Node":
            made["status"] = status
            taints = made["spec"].get("taints")
            admin.create(made)
            admin.patch(f"/api/v1/nodes/{meta['name']}", {"spec": {"taints": taints}})
        elif kind == "Pod":
            _priority(admin, made["spec"])
            made["spec"]["terminationGracePeriodSeconds"] = 0  # evicted, gone: no kubelet here to confirm it
            created = _create_pod(admin, made)
            if status:
                status.pop("qosClass", None)
                admin.patch(object_path(created) + "/status", {"status": status})
        else:
            if kind in KINDS:
                _templated(made)
            created = admin.create(made)
            if status and kind in KINDS:  # as its controller reports it
                admin.patch(object_path(created) + "/status", {"status": status})


def _templated(workload: dict[str, Any]) -> None:
    """A pod template where the builder wrote none (the API server requires one matching the selector)."""
    spec = workload["spec"]
    if "template" not in spec:
        labels = spec["selector"]["matchLabels"]
        pod_spec = o.deployment("x", "x", replicas=1)["spec"]["template"]["spec"]
        spec["template"] = {"metadata": {"labels": dict(labels)}, "spec": pod_spec}


def _resolved(admin: Admin, ref: Mapping[str, Any], namespace: str | None, child: Mapping[str, Any]) -> dict[str, Any]:
    api_version = ref.get("apiVersion") or KINDS[ref["kind"]]
    path = f"{collection_path(api_version, ref['kind'], namespace)}/{ref['name']}"
    if not admin.exists(path):
        labels = child["metadata"].get("labels") or {"app": ref["name"]}
        template = {
            "metadata": {"labels": labels},
            "spec": o.deployment("x", "x", replicas=1)["spec"]["template"]["spec"],
        }
        spec: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": template}
        if ref["kind"] == "ReplicaSet":
            spec["replicas"] = 1
        admin.create({"apiVersion": api_version, "kind": ref["kind"],
                      "metadata": {"name": ref["name"], "namespace": namespace}, "spec": spec})  # fmt: skip
    owner = admin.get(path)
    return {**ref, "apiVersion": api_version, "uid": owner["metadata"]["uid"]}


def _create_pod(admin: Admin, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod created, once the priority admission has seen a PriorityClass made just before (it reads them
    from its informer's cache, a moment behind)."""

    def create() -> dict[str, Any] | None:
        try:
            made: dict[str, Any] = admin.create(pod)
        except ApiError as error:
            if error.status == 403 and "no PriorityClass" in str(error):
                return None
            raise
        return made

    return admin.wait_for("the pod admitted with its PriorityClass", create, timeout=10)


def _priority(admin: Admin, spec: dict[str, Any]) -> None:
    """The priority admission computes a pod's priority from its class and refuses one written in the spec."""
    value = spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    name = spec.get("priorityClassName")
    if name is None and value:
        name = spec["priorityClassName"] = f"priority-{value}"
    if name is not None and not admin.exists(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}"):
        admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                      "value": value or 0})  # fmt: skip


def evictions(plane: ControlPlane) -> list[AuditEvent]:
    """rebalancer's evictions the API server granted (dry runs included), from its audit log."""
    return [e for e in plane.audit(USER) if e.resource == "pods/eviction" and e.code == 201]
