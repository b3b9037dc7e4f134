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
    # Raw: an annotation's value is only read when it is one rebalancer keeps, and the big ones
    # (kubectl's last-applied-configuration) are never copied into a str.
    annotations: dict[str, msgspec.Raw] = {}
    owner_references: list[OwnerReference] = []


class ListMeta(_Wire):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    remaining_item_count: int | None = None


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


class NodeAffinity(_Wire):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(_Wire):
    node_affinity: NodeAffinity | None = None


# --- pods ------------------------------------------------------------------------------------


class ResourceRequirements(_Wire):
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}


class Container(_Wire):
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None  # "Always" on an init container: a sidecar


class WireToleration(_Key, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class PodSpec(_Wire):
    node_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, str] = {}
    resources: ResourceRequirements | None = None  # pod-level resources (PodLevelResources)
    tolerations: tuple[WireToleration, ...] = ()
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    # Each volume is {"name": ..., "<sourceKind>": {...}}: keep the keys, never parse the sources.
    volumes: list[dict[str, msgspec.Raw]] = []


class Condition(_Wire):
    type: str = ""
    status: str = ""


class ContainerStatus(_Wire):
    restart_count: int = 0


class PodStatus(_Wire):
    phase: str = ""
    qos_class: str = ""
    conditions: list[Condition] = []
    container_statuses: list[ContainerStatus] = []


class Pod(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
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


class Node(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
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


NODE_LIST = msgspec.json.Decoder(type=NodeList)
POD_LIST = msgspec.json.Decoder(type=PodList)
REPLICA_SET_LIST = msgspec.json.Decoder(type=ReplicaSetList)
PDB_LIST = msgspec.json.Decoder(type=PodDisruptionBudgetList)
STATUS = msgspec.json.Decoder(type=Status)
POD = msgspec.json.Decoder(type=Pod)
REPLICA_SET = msgspec.json.Decoder(type=ReplicaSet)
CONFIG_MAP = msgspec.json.Decoder(type=ConfigMap)
LEASE = msgspec.json.Decoder(type=Lease)
