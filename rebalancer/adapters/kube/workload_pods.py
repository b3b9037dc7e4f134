"""WorkloadPodsReader: a Deployment's (or a ReplicaSet's) ReplicaSets and pods, with what the ReplicaSet
controller looks at when it scales down (for ``rebalancer explain-scale-down``).

The snapshot's pods leave out the Ready condition's transition time and per-container restart counts
(150,000 pods are decoded for every cycle); this reader lists one namespace's pods and keeps them, as
:class:`rebalancer.planning.scale_down.RankedPod`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import kubernetes.client
import msgspec

from rebalancer.adapters.kube.calls import decode, http_error, send
from rebalancer.adapters.kube.decode import timestamp
from rebalancer.adapters.kube.lister import ListCall, list_all
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.model import DELETION_COST_ANNOTATION
from rebalancer.planning.scale_down import RankedPod

PAGE_SIZE = 500


class _Owner(msgspec.Struct, rename="camel", gc=False):
    kind: str = ""
    name: str = ""
    controller: bool = False


class _Meta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    annotations: dict[str, str] = {}
    owner_references: list[_Owner] = []


class _Condition(msgspec.Struct, rename="camel", gc=False):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None


class _ContainerStatus(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    restart_count: int = 0


class _Status(msgspec.Struct, rename="camel", gc=False):
    phase: str = ""
    conditions: list[_Condition] = []
    container_statuses: list[_ContainerStatus] = []
    init_container_statuses: list[_ContainerStatus] = []


class _InitContainer(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    restart_policy: str | None = None


class _Spec(msgspec.Struct, rename="camel", gc=False):
    node_name: str = ""
    init_containers: list[_InitContainer] = []


class _Pod(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


class _ListMeta(msgspec.Struct, rename="camel", gc=False):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _PodList(msgspec.Struct, gc=False):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[_Pod] = []


class _RsSpec(msgspec.Struct, gc=False):
    replicas: int | None = None


class _ReplicaSet(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _RsSpec = msgspec.field(default_factory=_RsSpec)


class _ReplicaSetList(msgspec.Struct, gc=False):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[_ReplicaSet] = []


@dataclass(frozen=True, slots=True)
class WorkloadPods:
    """``replica_sets``: (name, spec.replicas) of the workload's ReplicaSets; ``pods``: each ReplicaSet's pods."""

    kind: str  # Deployment | ReplicaSet
    namespace: str
    name: str
    replica_sets: tuple[tuple[str, int], ...]
    pods: dict[str, tuple[RankedPod, ...]]


WORKLOAD_KINDS = {"deployment": "Deployment", "deploy": "Deployment", "replicaset": "ReplicaSet", "rs": "ReplicaSet"}


class WorkloadPodsReader:
    def __init__(self, api_client: kubernetes.client.ApiClient, request_timeout: float = 30.0) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout

    def read(self, namespace: str, kind: str, name: str) -> WorkloadPods:
        """``kind`` Deployment or ReplicaSet. Raises KubeUnavailable (status 404) when it has no ReplicaSet."""
        if kind == "ReplicaSet":
            sets = [self._replica_set(namespace, name)]
        else:
            sets = [rs for rs in self._list_replica_sets(namespace) if _controller(rs.metadata) == ("Deployment", name)]
            if not sets:
                raise KubeUnavailable(f"Deployment {namespace}/{name}: no ReplicaSet controlled by it", status=404)
        names = {rs.metadata.name for rs in sets}
        pods: dict[str, list[RankedPod]] = {n: [] for n in sorted(names)}
        for pod in self._list_pods(namespace):
            owner = _controller(pod.metadata)
            if owner is not None and owner[0] == "ReplicaSet" and owner[1] in names:
                pods[owner[1]].append(ranked_pod(pod))
        replica_sets = tuple(sorted((rs.metadata.name, rs.spec.replicas or 0) for rs in sets))
        return WorkloadPods(kind, namespace, name, replica_sets, {k: tuple(v) for k, v in pods.items()})

    def _replica_set(self, namespace: str, name: str) -> _ReplicaSet:
        action = f"get replicaset {namespace}/{name}"
        reply = send(action, self._host, self._timeout, self._apps.read_namespaced_replica_set, name, namespace)
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="replicasets", namespace=namespace, group="apps")
        rs: _ReplicaSet = decode(action, msgspec.json.Decoder(type=_ReplicaSet), reply.body)
        return rs

    def _list_pods(self, namespace: str) -> Sequence[_Pod]:
        call: ListCall[_Pod] = ListCall(
            "pods", "pod", functools.partial(self._core.list_namespaced_pod, namespace),
            msgspec.json.Decoder(type=_PodList),
        )  # fmt: skip
        return list_all(call, list, page_size=PAGE_SIZE, timeout=self._timeout, host=self._host).items

    def _list_replica_sets(self, namespace: str) -> Sequence[_ReplicaSet]:
        call: ListCall[_ReplicaSet] = ListCall(
            "replicasets", "replicaset", functools.partial(self._apps.list_namespaced_replica_set, namespace),
            msgspec.json.Decoder(type=_ReplicaSetList),
        )  # fmt: skip
        return list_all(call, list, page_size=PAGE_SIZE, timeout=self._timeout, host=self._host).items


def _controller(meta: _Meta) -> tuple[str, str] | None:
    for ref in meta.owner_references:
        if ref.controller:
            return ref.kind, ref.name
    return None


_POD = msgspec.json.Decoder(type=_Pod)


def decode_pod(raw: bytes) -> RankedPod:
    """One pod's JSON as the API server sends it, as the controller ranks it."""
    return ranked_pod(decode("decode pod", _POD, raw))


def ranked_pod(pod: _Pod) -> RankedPod:
    meta, status = pod.metadata, pod.status
    what = f"pod {meta.namespace}/{meta.name}"
    ready_condition = next((c for c in status.conditions if c.type == "Ready"), None)
    ready = ready_condition is not None and ready_condition.status == "True"
    ready_since = None
    if ready and ready_condition is not None and ready_condition.last_transition_time:
        ready_since = timestamp(
            ready_condition.last_transition_time, what, "status.conditions[Ready].lastTransitionTime"
        )
    created = (
        timestamp(meta.creation_timestamp, what, "metadata.creationTimestamp") if meta.creation_timestamp else None
    )
    return RankedPod(
        name=meta.name,
        uid=meta.uid,
        node_name=pod.spec.node_name,
        phase=status.phase,
        ready=ready,
        ready_since=ready_since,
        deletion_cost_text=meta.annotations.get(DELETION_COST_ANNOTATION),
        max_restarts=max((c.restart_count for c in status.container_statuses), default=0),
        created=created,
        terminating=meta.deletion_timestamp is not None,
        max_sidecar_restarts=_max_sidecar_restarts(pod),
    )


def _max_sidecar_restarts(pod: _Pod) -> int:
    """The largest restartCount of the pod's sidecars: init containers with restartPolicy Always."""
    sidecars = {c.name for c in pod.spec.init_containers if c.restart_policy == "Always"}
    return max((c.restart_count for c in pod.status.init_container_statuses if c.name in sidecars), default=0)
