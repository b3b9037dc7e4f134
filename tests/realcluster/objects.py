"""Objects for the real API server, written as a user would write them (the server fills in the rest)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def node(name: str, *, cpu: str = "4", memory: str = "16Gi", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node made through the API (no kubelet behind it): Ready, with its capacity, as a kubelet reports."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
        },
    }


def pod(
    name: str,
    namespace: str,
    *,
    node: str | None = None,
    cpu: str = "100m",
    memory: str = "64Mi",
    labels: Mapping[str, str] | None = None,
    owners: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "automountServiceAccountToken": False,
    }
    if node is not None:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})}
    if owners:
        meta["ownerReferences"] = [dict(o) for o in owners]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def deployment(
    name: str,
    namespace: str,
    *,
    replicas: int,
    cpu: str = "100m",
    memory: str = "64Mi",
    labels: Mapping[str, str] | None = None,
    pod_spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    selector = {"app": name}
    template_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        **(pod_spec or {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": {**selector, **(labels or {})}}, "spec": template_spec},
        },
    }


def pdb(
    name: str, namespace: str, *, app: str, max_unavailable: int | None = None, min_available: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": app}}}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
