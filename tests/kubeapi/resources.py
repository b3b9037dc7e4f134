"""The resource types the test API server knows, with the field labels each one supports.

Adding a type is one :class:`ResourceType` entry; the router builds its list/get paths from it,
and create (POST), update (PUT) and delete paths for a ``writable`` one. Field labels follow the
real server (pkg/registry/*/strategy.go): an unsupported one answers 400
``field label not supported: <label>``. ``create_on_update`` and ``unconditional_update`` are the
registry strategy's ``AllowCreateOnUpdate`` / ``AllowUnconditionalUpdate`` of that type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FieldGetter = Callable[[dict[str, Any]], str]


def _path(*keys: str, default: str = "") -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return default
            value = value[key]
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


_META = {"metadata.name": _path("metadata", "name"), "metadata.namespace": _path("metadata", "namespace")}


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    field_labels: Mapping[str, FieldGetter] = field(default_factory=dict)
    writable: bool = False  # POST, PUT and DELETE are served
    create_on_update: bool = False  # PUT of a missing object creates it (Leases, Events)
    unconditional_update: bool = True  # PUT without metadata.resourceVersion is allowed (not for Leases)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """URL prefix of the group version: /api/v1 or /apis/apps/v1."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def key(self, namespace: str | None, name: str) -> str:
        """Storage key, ordered as etcd orders /registry/<plural>/<namespace>/<name>."""
        return f"{namespace}/{name}" if self.namespaced else name


def _namespaced(group: str, version: str, plural: str, kind: str, **labels: FieldGetter) -> ResourceType:
    return ResourceType(group, version, plural, kind, True, {**_META, **labels})


def _writable(
    group: str, plural: str, kind: str, *, create_on_update: bool, unconditional_update: bool, **labels: FieldGetter
) -> ResourceType:
    return ResourceType(
        group, "v1", plural, kind, True, {**_META, **labels}, True, create_on_update, unconditional_update
    )


_EVENT_LABELS: dict[str, FieldGetter] = {
    **{f"involvedObject.{k}": _path("involvedObject", k) for k in
       ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": _path("reason"),
    "reportingComponent": _path("reportingComponent"),
    "source": _path("source", "component"),
    "type": _path("type"),
}  # fmt: skip


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        {"metadata.name": _path("metadata", "name"), "status.phase": _path("status", "phase")},
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        {
            "metadata.name": _path("metadata", "name"),
            "spec.unschedulable": _path("spec", "unschedulable", default="false"),
        },
    ),
    _namespaced(
        "",
        "v1",
        "pods",
        "Pod",
        **{
            "spec.nodeName": _path("spec", "nodeName"),
            "spec.restartPolicy": _path("spec", "restartPolicy"),
            "spec.schedulerName": _path("spec", "schedulerName"),
            "spec.serviceAccountName": _path("spec", "serviceAccountName"),
            "spec.hostNetwork": _path("spec", "hostNetwork", default="false"),
            "status.phase": _path("status", "phase"),
            "status.podIP": _path("status", "podIP"),
            "status.nominatedNodeName": _path("status", "nominatedNodeName"),
        },
    ),
    _namespaced(
        "apps", "v1", "replicasets", "ReplicaSet", **{"status.replicas": _path("status", "replicas", default="0")}
    ),
    _namespaced("apps", "v1", "deployments", "Deployment"),
    _namespaced("apps", "v1", "statefulsets", "StatefulSet"),
    _namespaced("apps", "v1", "daemonsets", "DaemonSet"),
    _namespaced("batch", "v1", "jobs", "Job"),
    _namespaced("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    _writable("", "configmaps", "ConfigMap", create_on_update=False, unconditional_update=True),
    _writable("", "events", "Event", create_on_update=True, unconditional_update=True, **_EVENT_LABELS),
    _writable("coordination.k8s.io", "leases", "Lease", create_on_update=True, unconditional_update=False),
)

BY_PLURAL: Mapping[str, ResourceType] = {r.plural: r for r in RESOURCES}
BY_KIND: Mapping[tuple[str, str], ResourceType] = {(r.api_version, r.kind): r for r in RESOURCES}


def of(obj: Mapping[str, Any]) -> ResourceType:
    """The resource type of a raw object, from its apiVersion and kind."""
    key = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if key not in BY_KIND:
        raise ValueError(f"test API server does not serve {key[0]} {key[1]}")
    return BY_KIND[key]
