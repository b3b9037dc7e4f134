"""Narrow msgspec views of the Kubernetes wire format: only the fields rebalancer reads.

A pod is about 8 KB of JSON (managedFields, env, probes, volume mounts, ...); these structs
declare the few hundred bytes we use and msgspec skips the rest in C while decoding. Every
field has a default, so an absent field never fails a decode; a field of the wrong JSON type
does (``msgspec.ValidationError``), and the lister turns that into a clear error.

``gc=False``: decoded JSON cannot form reference cycles, so these objects need no tracking
by the cycle collector (which otherwise dominates the time of decoding big lists).
Field names follow the API (camelCase on the wire, snake_case here).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import msgspec


class _Wire(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Base of every wire struct."""


class _Key(msgspec.Struct, rename="camel", omit_defaults=True, gc=False, frozen=True):
    """A frozen, hashable wire struct: values that repeat across pods are looked up by it."""


class OwnerReference(_Wire):
    kind: str = ""
    name: str = ""
    controller: bool = False


class ObjectMeta(_Wire):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    owner_references: list[OwnerReference] = []


class ListMeta(_Wire):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    remaining_item_count: int | None = None


class ListHead(_Wire):
    metadata: ListMeta  # required: a prefix of a body without it is not the head of a list


_LIST_HEAD = msgspec.json.Decoder(type=ListHead)
_ITEMS_KEY = b',"items":'
_HEAD_LIMIT = 65536


def list_head(raw: bytes) -> ListMeta | None:
    """A list's metadata read from the bytes ahead of its items, or None when they do not tell.

    The API server writes ``{"kind":...,"apiVersion":...,"metadata":{...},"items":[...]}``, so the
    continue token can be known a whole page's decode earlier. Only a prefix that is itself a
    complete object holding ``metadata`` counts: JSON escapes every quote inside a string, so a
    ``,"items":`` that closes such a prefix is the body's own key, not text or a nested key.
    Any other layout (items first, whitespace, a huge head) gives None: decode the whole body.
    """
    end = raw.find(_ITEMS_KEY, 0, _HEAD_LIMIT)
    if end < 0:
        return None
    try:
        return _LIST_HEAD.decode(raw[:end] + b"}").metadata
    except msgspec.DecodeError:
        return None


# --- label selectors and node affinity -------------------------------------------------------


class SelectorRequirement(_Key, frozen=True):
    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class LabelSelector(_Wire):
    match_labels: dict[str, str] = {}
    match_expressions: list[SelectorRequirement] = []


class NodeSelectorTerm(_Key, frozen=True):
    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()


class NodeSelector(_Wire):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class PreferredSchedulingTerm(_Key, frozen=True):
    weight: int = 0
    preference: NodeSelectorTerm = NodeSelectorTerm()


class NodeAffinity(_Wire):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()


class PodAffinityTerm(_Wire):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    topology_key: str = ""


class WeightedPodAffinityTerm(_Wire):
    weight: int = 0
    pod_affinity_term: PodAffinityTerm | None = None


class PodAffinityRules(_Wire):
    """A ``podAffinity`` or ``podAntiAffinity`` (the same fields)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(_Wire):
    node_affinity: NodeAffinity | None = None
    # kept as their JSON text (pods of one template share it): decoded once per text, into PodAffinityRules
    pod_affinity: msgspec.Raw = msgspec.Raw()
    pod_anti_affinity: msgspec.Raw = msgspec.Raw()


# --- pods ------------------------------------------------------------------------------------


class Quantities(_Key, frozen=True):
    """The CPU and memory of a resource list (requests, limits, overhead); other resources are never read."""

    cpu: str | None = None
    memory: str | None = None


class ResourceRequirements(_Key, frozen=True):
    requests: Quantities | None = None
    limits: Quantities | None = None


class Container(_Key, frozen=True):
    """Frozen: the containers' resources of a pod are the key its requests are looked up by."""

    resources: ResourceRequirements | None = None
    restart_policy: str | None = None  # "Always" on an init container: a sidecar


class Present(_Key, frozen=True):
    """Presence only: the value is skipped unread (an empty struct, shared by equality)."""


class Volume(_Key, frozen=True):
    """One pod volume, by the kind of its source (core/v1 ``VolumeSource``); sources are never parsed.

    A volume is ``{"name": ..., "<kind>": {...}}``; the kinds are spelled out so that a volume costs
    one small struct, and a pod's volumes are a hashable key (pods of one template share them).
    A kind newer than this list is not reported.
    """

    aws_elastic_block_store: Present | None = None
    azure_disk: Present | None = None
    azure_file: Present | None = None
    cephfs: Present | None = None
    cinder: Present | None = None
    config_map: Present | None = None
    csi: Present | None = None
    downward_api: Present | None = msgspec.field(default=None, name="downwardAPI")
    empty_dir: Present | None = None
    ephemeral: Present | None = None
    fc: Present | None = None
    flex_volume: Present | None = None
    flocker: Present | None = None
    gce_persistent_disk: Present | None = None
    git_repo: Present | None = None
    glusterfs: Present | None = None
    host_path: Present | None = None
    image: Present | None = None
    iscsi: Present | None = None
    nfs: Present | None = None
    persistent_volume_claim: Present | None = None
    photon_persistent_disk: Present | None = None
    portworx_volume: Present | None = None
    projected: Present | None = None
    quobyte: Present | None = None
    rbd: Present | None = None
    scale_io: Present | None = msgspec.field(default=None, name="scaleIO")
    secret: Present | None = None
    storageos: Present | None = None
    vsphere_volume: Present | None = None

    def kinds(self) -> Iterator[str]:
        """The source kinds of this volume as the API spells them (one, in a valid volume)."""
        for attribute, kind in _VOLUME_KINDS:
            if getattr(self, attribute) is not None:
                yield kind


_VOLUME_KINDS = tuple(zip(Volume.__struct_fields__, Volume.__struct_encode_fields__, strict=True))


class WireToleration(_Key, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class PodSpec(_Wire):
    node_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: Quantities | None = None
    resources: ResourceRequirements | None = None  # pod-level resources (PodLevelResources)
    tolerations: tuple[WireToleration, ...] = ()
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    volumes: tuple[Volume, ...] = ()


class Condition(_Wire):
    type: str = ""
    status: str = ""


class ContainerStatus(_Wire):
    restart_count: int = 0


class PodAnnotations(_Wire):
    """Base of the annotation structs :func:`pod_wire` builds: one field per annotation key kept."""


class PodMeta(ObjectMeta):
    # The structs built by pod_wire() redeclare it with the kept keys as fields: every other
    # annotation (kubectl's big last-applied-configuration) is skipped unread while decoding.
    annotations: PodAnnotations = msgspec.field(default_factory=PodAnnotations)


class PodStatus(_Wire):
    phase: str = ""
    qos_class: str = ""
    conditions: list[Condition] = []
    container_statuses: list[ContainerStatus] = []


class Pod(_Wire):
    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class PodList(_Wire):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Pod] = []


# --- nodes -----------------------------------------------------------------------------------


class WireTaint(_Wire):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(_Wire):
    unschedulable: bool = False
    taints: list[WireTaint] = []


class NodeAddress(_Wire):
    type: str = ""  # InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS
    address: str = ""


class NodeStatus(_Wire):
    allocatable: dict[str, str] = {}
    capacity: dict[str, str] = {}
    conditions: list[Condition] = []
    addresses: list[NodeAddress] = []


class NodeAnnotations(_Wire):
    """The only node annotation rebalancer reads: its landing guard's mark (``rebalancer.domain.guard_marks``)."""

    landing_guard: str | None = msgspec.field(default=None, name="rebalancer.io/landing-guard")


class NodeMeta(ObjectMeta):
    annotations: NodeAnnotations = msgspec.field(default_factory=NodeAnnotations)


class Node(_Wire):
    metadata: NodeMeta = msgspec.field(default_factory=NodeMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class NodeList(_Wire):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Node] = []


# --- replica sets (apps/v1): only who controls them ---------------------------------------------


class ReplicaSet(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class ReplicaSetList(_Wire):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[ReplicaSet] = []


# --- pod disruption budgets (policy/v1) --------------------------------------------------------


class PdbSpec(_Wire):
    selector: LabelSelector | None = None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None


class PdbStatus(_Wire):
    disruptions_allowed: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0


class PodDisruptionBudget(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PdbSpec = msgspec.field(default_factory=PdbSpec)
    status: PdbStatus = msgspec.field(default_factory=PdbStatus)


class PodDisruptionBudgetList(_Wire):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[PodDisruptionBudget] = []


# --- metav1.Status: the body of every API error -----------------------------------------------


class StatusCause(_Wire):
    reason: str = ""  # the cause's type (Go: ``Type CauseType `json:"reason"` ``), e.g. DisruptionBudget
    message: str = ""
    field: str = ""


class StatusDetails(_Wire):
    name: str = ""
    group: str = ""
    kind: str = ""
    retry_after_seconds: int = 0
    causes: list[StatusCause] = []


class Status(_Wire):
    kind: str = ""
    status: str = ""
    message: str = ""
    reason: str = ""
    code: int = 0
    details: StatusDetails | None = None
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)


# --- config maps (the limiter state store) -------------------------------------------------------


class WrittenMeta(_Wire):
    """Metadata of an object rebalancer writes itself: kept whole, it is small."""

    name: str = ""
    namespace: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ConfigMap(_Wire):
    metadata: WrittenMeta = msgspec.field(default_factory=WrittenMeta)
    data: dict[str, str] = {}


# --- leases (coordination.k8s.io/v1, leader election) ---------------------------------------------


class LeaseSpec(_Wire):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None  # MicroTime: RFC 3339 with microseconds
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(_Wire):
    metadata: WrittenMeta = msgspec.field(default_factory=WrittenMeta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


# --- SelfSubjectAccessReview (authorization.k8s.io/v1): the authorizer's answer -------------------------


class AccessReviewStatus(_Wire):
    allowed: bool = False
    denied: bool = False  # only an authorizer that denies explicitly sets it (RBAC never does)
    reason: str = ""
    evaluation_error: str = ""


class AccessReview(_Wire):
    status: AccessReviewStatus = msgspec.field(default_factory=AccessReviewStatus)


# --- pods with the annotations one reader keeps -------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodWire:
    """Decoders of pods that keep the annotations ``keys`` (see :func:`pod_wire`)."""

    keys: tuple[tuple[str, str], ...]  # (attribute of the annotations struct, annotation key), kept keys only
    mirror: str  # the attribute telling a mirror pod's annotation (kept or not)
    no_annotations: PodAnnotations  # the annotations struct of a pod with none of the keys
    pod_type: type[Pod]
    pod: msgspec.json.Decoder[Pod]
    pod_list: msgspec.json.Decoder[PodList]


@lru_cache(maxsize=16)
def pod_wire(keys: frozenset[str], mirror: str) -> PodWire:
    """Pod decoders whose annotations struct has a field for each of ``keys`` and for ``mirror``.

    The struct is built at run time (``msgspec.defstruct``): a kept annotation decodes straight into
    a str, every other one is skipped in C. A kept annotation that is not a string fails the decode
    with its key in msgspec's path. ``mirror``'s value is never read (presence only, any JSON type)
    unless it is one of ``keys``. Cached: one family of types per distinct set of keys.
    """
    names = sorted(keys | {mirror})
    attributes = {key: f"a{i}" for i, key in enumerate(names)}
    fields: list[tuple[str, Any, Any]] = [
        (
            attributes[key],
            (str | msgspec.UnsetType) if key in keys else (msgspec.Raw | msgspec.UnsetType),
            msgspec.field(default=msgspec.UNSET, name=key),
        )
        for key in names
    ]
    annotations = cast("type[PodAnnotations]", msgspec.defstruct("PodAnnotations", fields, bases=(PodAnnotations,)))
    meta = msgspec.defstruct(
        "PodMeta", [("annotations", annotations, msgspec.field(default_factory=annotations))], bases=(PodMeta,)
    )
    pod = cast(
        "type[Pod]", msgspec.defstruct("Pod", [("metadata", meta, msgspec.field(default_factory=meta))], bases=(Pod,))
    )
    pod_list = msgspec.defstruct("PodList", [("items", list[pod], [])], bases=(PodList,))  # type: ignore[valid-type]
    return PodWire(
        keys=tuple((attributes[key], key) for key in names if key in keys),
        mirror=attributes[mirror],
        no_annotations=annotations(),
        pod_type=pod,
        pod=msgspec.json.Decoder(type=pod),
        pod_list=msgspec.json.Decoder(type=pod_list),
    )


NODE_LIST = msgspec.json.Decoder(type=NodeList)
REPLICA_SET_LIST = msgspec.json.Decoder(type=ReplicaSetList)
PDB_LIST = msgspec.json.Decoder(type=PodDisruptionBudgetList)
STATUS = msgspec.json.Decoder(type=Status)
REPLICA_SET = msgspec.json.Decoder(type=ReplicaSet)
CONFIG_MAP = msgspec.json.Decoder(type=ConfigMap)
LEASE = msgspec.json.Decoder(type=Lease)
ACCESS_REVIEW = msgspec.json.Decoder(type=AccessReview)
