"""Loads a synthetic cluster into a real API server through its API, as the cluster's own controllers would
have written it: Nodes with their status, ReplicaSets, Pods bound to nodes and Running (the status written
through the status subresource, as a kubelet does), PodDisruptionBudgets. The objects are those of
``bench.cluster_gen`` (about 8 KB pods), less what the server assigns itself (uid, resourceVersion,
managedFields, creationTimestamp)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench import cluster_gen
from tests.controlplane import ControlPlane
from tests.controlplane.admin import Admin, ApiError, collection_path

SERVER_OWNED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generateName")
WORKERS = 16


@dataclass(frozen=True)
class Loaded:
    nodes: int
    replica_sets: int
    pods: int
    budgets: int
    seconds: float

    @property
    def per_second(self) -> float:
        writes = self.nodes * 2 + self.replica_sets + self.pods * 2 + self.budgets
        return writes / self.seconds if self.seconds else 0.0


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for key in SERVER_OWNED:
        out["metadata"].pop(key, None)
    out.pop("status", None)
    return out


def _node(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = cluster_gen.node(i)
    return _clean(raw), {"status": raw["status"]}


def _replica_set(raw: dict[str, Any]) -> dict[str, Any]:
    rs = _clean(raw)
    rs["metadata"].pop("ownerReferences", None)  # no Deployment object behind it
    labels = {"app": rs["metadata"]["name"].rsplit("-", 1)[0], "pod-template-hash": "5d8f9c7b6"}
    rs["spec"] = {
        "replicas": 7,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.example/team/app:v1"}]},
        },
    }
    return rs


def namespace_of(i: int) -> str:
    """Pod ``i``'s namespace: its ReplicaSet's (``cluster_gen`` names a ReplicaSet for seven pods in a row)."""
    return cluster_gen.NAMESPACES[(i // 7) % len(cluster_gen.NAMESPACES)]


def _pod(i: int, nodes: int, owner_uids: dict[tuple[str, str], str]) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = cluster_gen.pod(i, nodes)
    raw["metadata"]["namespace"] = namespace_of(i)
    pod = _clean(raw)
    spec = pod["spec"]
    # the token volume is the service-account admission's to add; init containers take no probes
    spec["volumes"] = [v for v in spec.get("volumes", ()) if not v["name"].startswith("kube-api-access")]
    spec["automountServiceAccountToken"] = False
    for container in spec.get("initContainers", ()) + spec["containers"]:
        container["volumeMounts"] = [m for m in container.get("volumeMounts", ()) if m["name"] != "kube-api-access"]
    for container in spec.get("initContainers", ()):
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            container.pop(probe, None)
    ref = pod["metadata"]["ownerReferences"][0]
    ref["uid"] = owner_uids[(pod["metadata"]["namespace"], ref["name"])]
    status = copy.deepcopy(raw["status"])
    status["phase"] = "Running"
    return pod, {"status": status}


class _Writer:
    def __init__(self, admin: Admin) -> None:
        self._admin = admin
        self._local = threading.local()

    def session(self) -> Admin:
        if not hasattr(self._local, "admin"):  # a connection pool per thread
            self._local.admin = Admin(self._admin.url, self._admin.session.headers["Authorization"].split()[1],
                                      str(self._admin.session.verify))  # fmt: skip
        admin: Admin = self._local.admin
        return admin

    def create(self, obj: dict[str, Any], status: dict[str, Any] | None = None) -> Any:
        admin = self.session()
        for attempt in range(5):
            try:
                created = admin.create(obj)
                break
            except ApiError as error:
                if error.status == 409:
                    return None
                if error.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        if status is not None:
            path = collection_path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
            admin.request("PATCH", f"{path}/{obj['metadata']['name']}/status", json=status,
                          headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        return created


def _parallel(writer: _Writer, items: Iterable[Callable[[], Any]]) -> list[Any]:
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda make: make(), items))


def load(plane: ControlPlane, nodes: int, pods: int, *, progress: Callable[[str], None] = print) -> Loaded:
    start = time.monotonic()
    writer = _Writer(plane.admin)
    for namespace in cluster_gen.NAMESPACES:
        plane.namespace(namespace)
    _parallel(writer, [lambda i=i: writer.create(*_node(i)) for i in range(nodes)])
    progress(f"load: {nodes} nodes in {time.monotonic() - start:.1f}s")
    sets: dict[tuple[str, str], dict[str, Any]] = {}
    for i in range(0, pods, 7):
        raw = cluster_gen.replica_set(i // 7)
        raw["metadata"]["name"] = cluster_gen.pod(i, nodes)["metadata"]["ownerReferences"][0]["name"]
        raw["metadata"]["namespace"] = namespace_of(i)
        sets.setdefault((raw["metadata"]["namespace"], raw["metadata"]["name"]), _replica_set(raw))
    created = _parallel(writer, [lambda rs=rs: writer.create(rs) for rs in sets.values()])
    owner_uids = {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c["metadata"]["uid"] for c in created if c is not None
    }
    progress(f"load: {len(sets)} ReplicaSets in {time.monotonic() - start:.1f}s")
    budgets = 0
    for (namespace, name), rs in list(sets.items())[:: max(1, len(sets) // 50)]:
        labels = rs["spec"]["selector"]["matchLabels"]
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}  # fmt: skip
        writer.create(pdb)
        budgets += 1
    chunk = 2000
    for first in range(0, pods, chunk):
        _parallel(
            writer,
            [lambda i=i: writer.create(*_pod(i, nodes, owner_uids)) for i in range(first, min(pods, first + chunk))],
        )
        progress(f"load: {min(pods, first + chunk)} pods in {time.monotonic() - start:.1f}s")
    return Loaded(nodes, len(sets), pods, budgets, time.monotonic() - start)
