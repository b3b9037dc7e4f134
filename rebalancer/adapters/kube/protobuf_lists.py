"""List bodies in the Kubernetes protobuf encoding (``application/vnd.kubernetes.protobuf``), read narrowly.

The API server's CPU for a LIST is mostly encoding, and protobuf costs it a third to a quarter of JSON (see
docs/performance.md): the full reads of nodes, ReplicaSets and pods ask for it. A body is the magic
``k8s\\x00`` and a ``runtime.Unknown`` (typeMeta=1, raw=2, contentEncoding=3, contentType=4) whose ``raw``
is the list, e.g. a ``v1.PodList`` (metadata=1, items=2).

The messages are narrow and built at run time (:data:`NARROW`, the API's field numbers from its
``generated.proto`` files): only the fields a snapshot reads are declared, every other one is skipped in C
by the ``protobuf`` package's upb parser. Each object is copied into the same wire structs the JSON path
decodes (:mod:`rebalancer.adapters.kube.wire`), so both encodings give the same domain objects. A pod
list's items are built with the pod type of :meth:`~rebalancer.adapters.kube.decode.PodDecoder.converting_list`,
which converts each pod as it is built.

The request accepts JSON too (as client-go's protobuf clients ask): a server that cannot encode a type in
protobuf answers JSON, and a body is read by what it is (:func:`is_protobuf`).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

import msgspec

from rebalancer.adapters.kube import wire
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.planning.protections import MIRROR_ANNOTATION

Encoding = Literal["protobuf", "json"]
MAGIC = b"k8s\x00"
ACCEPT = "application/vnd.kubernetes.protobuf, application/json"

# Field numbers of core/v1 VolumeSource, by the JSON name of each source kind.
VOLUME_SOURCES: dict[str, int] = {
    "hostPath": 1, "emptyDir": 2, "gcePersistentDisk": 3, "awsElasticBlockStore": 4, "gitRepo": 5, "secret": 6,
    "nfs": 7, "iscsi": 8, "glusterfs": 9, "persistentVolumeClaim": 10, "rbd": 11, "flexVolume": 12, "cinder": 13,
    "cephfs": 14, "flocker": 15, "downwardAPI": 16, "fc": 17, "azureFile": 18, "configMap": 19,
    "vsphereVolume": 20, "quobyte": 21, "azureDisk": 22, "photonPersistentDisk": 23, "portworxVolume": 24,
    "scaleIO": 25, "projected": 26, "storageos": 27, "csi": 28, "ephemeral": 29, "image": 30,
}  # fmt: skip

# Narrow messages: field name -> (number, type, message type name or None). Types: "string", "int32",
# "int64", "bool", "bytes" (a message left unparsed), "blobs" (repeated messages left unparsed), "message",
# "repeated" (of a message), "strings", "map:string", "map:quantity" (map<string, resource.Quantity>).
NARROW: dict[str, dict[str, tuple[int, str, str | None]]] = {
    "Unknown": {"raw": (2, "bytes", None), "contentEncoding": (3, "string", None)},
    "ListMeta": {
        "resourceVersion": (2, "string", None),
        "continue": (3, "string", None),
        "remainingItemCount": (4, "int64", None),
    },
    "Time": {"seconds": (1, "int64", None), "nanos": (2, "int32", None)},
    "Quantity": {"string": (1, "string", None)},
    "ObjectMeta": {
        "name": (1, "string", None),
        "namespace": (3, "string", None),
        "uid": (5, "string", None),
        "creationTimestamp": (8, "bytes", None),  # a Time, read once per distinct value (see PodLists)
        "deletionTimestamp": (9, "bytes", None),
        "labels": (11, "map:string", None),
        "annotations": (12, "map:string", None),
        "ownerReferences": (13, "blobs", None),  # OwnerReference
    },
    "OwnerReference": {"kind": (1, "string", None), "name": (3, "string", None), "controller": (6, "bool", None)},
    # --- pods ---
    "PodList": {"metadata": (1, "message", "ListMeta"), "items": (2, "repeated", "Pod")},
    "Pod": {
        "metadata": (1, "message", "ObjectMeta"),
        "spec": (2, "message", "PodSpec"),
        "status": (3, "message", "PodStatus"),
    },
    # The parts of a pod's spec that its template sets are left as bytes ("blobs": repeated), each distinct
    # value read once per list (see PodLists): the pods of one template share them.
    "PodSpec": {
        "volumes": (1, "blobs", None),  # Volume
        "containers": (2, "blobs", None),  # Container
        "nodeSelector": (7, "map:string", None),
        "nodeName": (10, "string", None),
        "affinity": (18, "bytes", None),  # Affinity
        "initContainers": (20, "blobs", None),  # Container
        "tolerations": (22, "blobs", None),  # Toleration
        "priorityClassName": (24, "string", None),
        "priority": (25, "int32", None),
        "overhead": (32, "map:quantity", None),
        "resources": (40, "bytes", None),  # ResourceRequirements
    },
    "Volume": {"volumeSource": (2, "message", "VolumeSource")},
    "VolumeSource": {name: (number, "bytes", None) for name, number in VOLUME_SOURCES.items()},
    "Container": {"resources": (8, "message", "ResourceRequirements"), "restartPolicy": (24, "string", None)},
    "ResourceRequirements": {"limits": (1, "map:quantity", None), "requests": (2, "map:quantity", None)},
    "Affinity": {
        "nodeAffinity": (1, "message", "NodeAffinity"),
        "podAffinity": (2, "message", "PodAffinity"),
        "podAntiAffinity": (3, "message", "PodAffinity"),  # PodAntiAffinity: the same field numbers
    },
    "PodAffinity": {
        "required": (1, "repeated", "PodAffinityTerm"),
        "preferred": (2, "repeated", "WeightedPodAffinityTerm"),
    },
    "WeightedPodAffinityTerm": {"weight": (1, "int32", None), "podAffinityTerm": (2, "message", "PodAffinityTerm")},
    "PodAffinityTerm": {
        "labelSelector": (1, "message", "LabelSelector"),
        "namespaces": (2, "strings", None),
        "topologyKey": (3, "string", None),
        "namespaceSelector": (4, "message", "LabelSelector"),
    },
    "LabelSelector": {"matchLabels": (1, "map:string", None), "matchExpressions": (2, "repeated", "Requirement")},
    "NodeAffinity": {
        "required": (1, "message", "NodeSelector"),
        "preferred": (2, "repeated", "PreferredSchedulingTerm"),
    },
    "PreferredSchedulingTerm": {"weight": (1, "int32", None), "preference": (2, "message", "NodeSelectorTerm")},
    "NodeSelector": {"nodeSelectorTerms": (1, "repeated", "NodeSelectorTerm")},
    "NodeSelectorTerm": {
        "matchExpressions": (1, "repeated", "Requirement"),
        "matchFields": (2, "repeated", "Requirement"),
    },
    "Requirement": {"key": (1, "string", None), "operator": (2, "string", None), "values": (3, "strings", None)},
    "Toleration": {
        "key": (1, "string", None),
        "operator": (2, "string", None),
        "value": (3, "string", None),
        "effect": (4, "string", None),
    },
    "PodStatus": {
        "phase": (1, "string", None),
        "conditions": (2, "repeated", "Condition"),
        "containerStatuses": (8, "repeated", "ContainerStatus"),
        "qosClass": (9, "string", None),
    },
    "Condition": {"type": (1, "string", None), "status": (2, "string", None)},
    "ContainerStatus": {"restartCount": (5, "int32", None)},
    # --- nodes ---
    "NodeList": {"metadata": (1, "message", "ListMeta"), "items": (2, "repeated", "Node")},
    "Node": {
        "metadata": (1, "message", "ObjectMeta"),
        "spec": (2, "message", "NodeSpec"),
        "status": (3, "message", "NodeStatus"),
    },
    "NodeSpec": {"unschedulable": (4, "bool", None), "taints": (5, "repeated", "Taint")},
    "Taint": {"key": (1, "string", None), "value": (2, "string", None), "effect": (3, "string", None)},
    "NodeStatus": {
        "capacity": (1, "map:quantity", None),
        "allocatable": (2, "map:quantity", None),
        "conditions": (4, "repeated", "Condition"),
        "addresses": (5, "repeated", "NodeAddress"),
    },
    "NodeAddress": {"type": (1, "string", None), "address": (2, "string", None)},
    # --- ReplicaSets (apps/v1): who controls them ---
    "ReplicaSetList": {"metadata": (1, "message", "ListMeta"), "items": (2, "repeated", "ReplicaSet")},
    "ReplicaSet": {"metadata": (1, "message", "ObjectMeta")},
}


@cache
def classes() -> dict[str, Any]:
    """The message classes of :data:`NARROW` (proto2, so that presence is kept), built once at run time."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    scalars = {"string": f.TYPE_STRING, "int32": f.TYPE_INT32, "int64": f.TYPE_INT64, "bool": f.TYPE_BOOL,
               "bytes": f.TYPE_BYTES}  # fmt: skip
    file = descriptor_pb2.FileDescriptorProto(name="rebalancer_narrow.proto", package="narrow", syntax="proto2")
    for name, fields in NARROW.items():
        message = file.message_type.add(name=name)
        for field_name, (number, kind, type_name) in fields.items():
            field = message.field.add(name=field_name, number=number, label=f.LABEL_OPTIONAL)
            if kind in scalars:
                field.type = scalars[kind]
            elif kind == "strings":
                field.type, field.label = f.TYPE_STRING, f.LABEL_REPEATED
            elif kind == "blobs":
                field.type, field.label = f.TYPE_BYTES, f.LABEL_REPEATED
            elif kind in ("message", "repeated"):
                field.type, field.type_name = f.TYPE_MESSAGE, f".narrow.{type_name}"
                if kind == "repeated":
                    field.label = f.LABEL_REPEATED
            else:  # a map: a repeated nested entry message
                entry_name = field_name[0].upper() + field_name[1:] + "Entry"
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=f.LABEL_OPTIONAL, type=f.TYPE_STRING)
                value = entry.field.add(name="value", number=2, label=f.LABEL_OPTIONAL)
                if kind == "map:string":
                    value.type = f.TYPE_STRING
                else:
                    value.type, value.type_name = f.TYPE_MESSAGE, ".narrow.Quantity"
                field.type, field.label, field.type_name = (
                    f.TYPE_MESSAGE,
                    f.LABEL_REPEATED,
                    f".narrow.{name}.{entry_name}",
                )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"narrow.{name}")) for name in NARROW}


def is_protobuf(raw: bytes) -> bool:
    return raw[:4] == MAGIC


@dataclass(frozen=True, slots=True)
class Body:
    """A list body read from protobuf: the shape of the JSON decoders' lists (``metadata``, ``items``)."""

    metadata: wire.ListMeta
    items: list[Any]


def _malformed(what: str, problem: str) -> KubeUnavailable:
    return KubeUnavailable(f"list {what}: malformed protobuf response: {problem}", reason="Malformed")


def parse(what: str, list_type: str, raw: bytes) -> Any:
    """The ``list_type`` message (``"PodList"``, ...) inside a protobuf body; a clear error when it is not one."""
    from google.protobuf.message import DecodeError

    if not is_protobuf(raw):
        raise _malformed(what, "no Kubernetes protobuf magic")
    try:
        unknown = classes()["Unknown"].FromString(memoryview(raw)[4:])
        if unknown.contentEncoding:
            raise _malformed(what, f"content encoding {unknown.contentEncoding!r} is not read")
        return classes()[list_type].FromString(unknown.raw)
    except DecodeError as exc:
        raise _malformed(what, f"not a {list_type}: {exc}") from exc


def list_meta(m: Any) -> wire.ListMeta:
    return wire.ListMeta(
        resource_version=m.resourceVersion,
        continue_=getattr(m, "continue"),  # a Python keyword
        remaining_item_count=m.remainingItemCount if m.HasField("remainingItemCount") else None,
    )


def time_text(seconds: int) -> str:
    """A meta/v1 Time as the RFC 3339 text JSON carries (whole seconds, as JSON's Time)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Parsed(dict[bytes, Any]):
    """Values built from the distinct encodings of one message type: each encoding parsed once, on first use.

    At most ``limit`` are kept: past it the table starts afresh, so that objects sharing nothing (pods
    without a common template) cost no more memory than the pages they come in."""

    def __init__(self, message: str, build: Callable[[Any], Any], limit: int = 4096) -> None:
        super().__init__()
        self._parse = classes()[message].FromString
        self._build = build
        self._limit = limit

    def __missing__(self, raw: bytes) -> Any:
        if len(self) >= self._limit:
            self.clear()
        value = self[raw] = self._build(self._parse(raw))
        return value


def _quantities(entries: Any) -> wire.Quantities:
    cpu, memory = entries.get("cpu"), entries.get("memory")
    return wire.Quantities(cpu=None if cpu is None else cpu.string, memory=None if memory is None else memory.string)


def _resources(r: Any) -> wire.ResourceRequirements:
    return wire.ResourceRequirements(
        requests=_quantities(r.requests) if r.requests else None,
        limits=_quantities(r.limits) if r.limits else None,
    )


def _container(c: Any) -> wire.Container:
    return wire.Container(
        resources=_resources(c.resources) if c.HasField("resources") else None,
        restart_policy=c.restartPolicy if c.HasField("restartPolicy") else None,
    )


def _owner(r: Any) -> wire.OwnerReference:
    return wire.OwnerReference(kind=r.kind, name=r.name, controller=r.controller)


def _requirement(r: Any) -> wire.SelectorRequirement:
    return wire.SelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values))


def _term(t: Any) -> wire.NodeSelectorTerm:
    return wire.NodeSelectorTerm(
        match_expressions=tuple(_requirement(r) for r in t.matchExpressions),
        match_fields=tuple(_requirement(r) for r in t.matchFields),
    )


def _label_selector(s: Any) -> wire.LabelSelector:
    return wire.LabelSelector(
        match_labels=dict(s.matchLabels), match_expressions=[_requirement(r) for r in s.matchExpressions]
    )


def _pod_term(t: Any) -> wire.PodAffinityTerm:
    return wire.PodAffinityTerm(
        label_selector=_label_selector(t.labelSelector) if t.HasField("labelSelector") else None,
        namespaces=list(t.namespaces),
        namespace_selector=_label_selector(t.namespaceSelector) if t.HasField("namespaceSelector") else None,
        topology_key=t.topologyKey,
    )


def _pod_rules(a: Any, field: str) -> msgspec.Raw:
    """A ``podAffinity`` or ``podAntiAffinity`` as the JSON text the JSON path keeps (decoded alike, once)."""
    if not a.HasField(field):
        return msgspec.Raw()
    rules = getattr(a, field)
    found = wire.PodAffinityRules(
        required_during_scheduling_ignored_during_execution=[_pod_term(t) for t in rules.required],
        preferred_during_scheduling_ignored_during_execution=[
            wire.WeightedPodAffinityTerm(
                weight=w.weight,
                pod_affinity_term=_pod_term(w.podAffinityTerm) if w.HasField("podAffinityTerm") else None,
            )
            for w in rules.preferred
        ],
    )
    return msgspec.Raw(msgspec.json.encode(found))


def _affinity(a: Any) -> wire.Affinity:
    pod_affinity, pod_anti_affinity = _pod_rules(a, "podAffinity"), _pod_rules(a, "podAntiAffinity")
    if not a.HasField("nodeAffinity"):
        return wire.Affinity(pod_affinity=pod_affinity, pod_anti_affinity=pod_anti_affinity)
    node_affinity = a.nodeAffinity
    required = None
    if node_affinity.HasField("required"):
        required = wire.NodeSelector(
            node_selector_terms=tuple(_term(t) for t in node_affinity.required.nodeSelectorTerms)
        )
    preferred = tuple(
        wire.PreferredSchedulingTerm(weight=p.weight, preference=_term(p.preference)) for p in node_affinity.preferred
    )
    return wire.Affinity(
        node_affinity=wire.NodeAffinity(
            required_during_scheduling_ignored_during_execution=required,
            preferred_during_scheduling_ignored_during_execution=preferred,
        ),
        pod_affinity=pod_affinity,
        pod_anti_affinity=pod_anti_affinity,
    )


_PRESENT = wire.Present()
_VOLUME_ATTRIBUTES = dict(zip(wire.Volume.__struct_encode_fields__, wire.Volume.__struct_fields__, strict=True))


def _volume(v: Any) -> wire.Volume:
    return wire.Volume(**{_VOLUME_ATTRIBUTES[field.name]: _PRESENT for field, _ in v.volumeSource.ListFields()})


class PodLists:
    """Pod lists read from protobuf into the items of a JSON pod-list decoder (``pod_list``) of ``pod_wire``:
    with :meth:`~rebalancer.adapters.kube.decode.PodDecoder.converting_list`'s, each pod is converted as built.

    The parts a pod's template sets (containers, volumes, tolerations, affinity, owners, the creation time)
    are read once per distinct encoding, in tables that live as long as this object (one list)."""

    def __init__(self, pod_wire: wire.PodWire, pod_list: msgspec.json.Decoder[Any]) -> None:
        self._containers = Parsed("Container", _container)
        self._volumes = Parsed("Volume", _volume)
        self._tolerations = Parsed("Toleration", _toleration)
        self._affinities = Parsed("Affinity", _affinity)
        self._resources = Parsed("ResourceRequirements", _resources)
        self._owners = Parsed("OwnerReference", _owner)
        self._times = Parsed("Time", lambda t: time_text(t.seconds))
        self._wire = pod_wire
        items = typing.get_type_hints(pod_list.type)["items"]
        self._pod_type: type[wire.Pod] = typing.get_args(items)[0]
        self._annotations = type(pod_wire.no_annotations)
        self._meta = type(pod_wire.pod_type().metadata)
        self._kept = {key: attribute for attribute, key in pod_wire.keys}

    def __call__(self, what: str, raw: bytes) -> Body:
        pod_list = parse(what, "PodList", raw)
        pod = self.pod
        return Body(list_meta(pod_list.metadata), [pod(item) for item in pod_list.items])

    def pod(self, m: Any) -> wire.Pod:
        meta, spec, status = m.metadata, m.spec, m.status
        annotations = self._wire.no_annotations
        if meta.annotations:  # the kept keys looked up in C: no string made for the others
            found: dict[str, Any] = {
                attribute: meta.annotations[key] for key, attribute in self._kept.items() if key in meta.annotations
            }
            if MIRROR_ANNOTATION in meta.annotations and self._wire.mirror not in found:
                found[self._wire.mirror] = msgspec.Raw(b'""')
            if found:
                annotations = self._annotations(**found)
        containers, times = self._containers, self._times
        return self._pod_type(
            metadata=self._meta(
                name=meta.name,
                namespace=meta.namespace,
                uid=meta.uid,
                creation_timestamp=times[meta.creationTimestamp] if meta.HasField("creationTimestamp") else None,
                deletion_timestamp=times[meta.deletionTimestamp] if meta.HasField("deletionTimestamp") else None,
                labels=dict(meta.labels),
                owner_references=[self._owners[r] for r in meta.ownerReferences],
                annotations=annotations,
            ),
            spec=wire.PodSpec(
                node_name=spec.nodeName,
                priority=spec.priority if spec.HasField("priority") else None,
                priority_class_name=spec.priorityClassName,
                containers=tuple([containers[c] for c in spec.containers]),
                init_containers=tuple([containers[c] for c in spec.initContainers]),
                overhead=_quantities(spec.overhead) if spec.overhead else None,
                resources=self._resources[spec.resources] if spec.HasField("resources") else None,
                tolerations=tuple([self._tolerations[t] for t in spec.tolerations]),
                node_selector=dict(spec.nodeSelector),
                affinity=self._affinities[spec.affinity] if spec.HasField("affinity") else None,
                volumes=tuple([self._volumes[v] for v in spec.volumes]),
            ),
            status=wire.PodStatus(
                phase=status.phase,
                qos_class=status.qosClass,
                conditions=[wire.Condition(type=c.type, status=c.status) for c in status.conditions],
                container_statuses=[
                    wire.ContainerStatus(restart_count=s.restartCount) for s in status.containerStatuses
                ],
            ),
        )


def _toleration(t: Any) -> wire.WireToleration:
    return wire.WireToleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)


def _node(m: Any) -> wire.Node:
    meta, spec, status = m.metadata, m.spec, m.status
    return wire.Node(
        metadata=wire.NodeMeta(
            name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
            labels=dict(meta.labels),
            annotations=wire.NodeAnnotations(landing_guard=meta.annotations.get(GUARD_KEY)),
        ),
        spec=wire.NodeSpec(
            unschedulable=spec.unschedulable,
            taints=[wire.WireTaint(key=t.key, value=t.value, effect=t.effect) for t in spec.taints],
        ),
        status=wire.NodeStatus(
            allocatable={k: v.string for k, v in status.allocatable.items()},
            capacity={k: v.string for k, v in status.capacity.items()},
            conditions=[wire.Condition(type=c.type, status=c.status) for c in status.conditions],
            addresses=[wire.NodeAddress(type=a.type, address=a.address) for a in status.addresses],
        ),
    )


def node_list(what: str, raw: bytes) -> Body:
    nodes = parse(what, "NodeList", raw)
    return Body(list_meta(nodes.metadata), [_node(n) for n in nodes.items])


def _replica_set(m: Any, owners: Parsed) -> wire.ReplicaSet:
    meta = m.metadata
    return wire.ReplicaSet(
        metadata=wire.ObjectMeta(
            name=meta.name, namespace=meta.namespace, owner_references=[owners[r] for r in meta.ownerReferences]
        )
    )


def replica_set_list(what: str, raw: bytes) -> Body:
    sets = parse(what, "ReplicaSetList", raw)
    owners = Parsed("OwnerReference", _owner)
    return Body(list_meta(sets.metadata), [_replica_set(r, owners) for r in sets.items])


ProtobufList = Callable[[str, bytes], Body]
"""Reads one protobuf list body of the collection named first (in errors)."""


def head(raw: bytes) -> wire.ListMeta | None:
    """A protobuf list's metadata read from the bytes ahead of its items, or None when they do not tell
    (the API server writes the Unknown's typeMeta, then its raw: the list's metadata, then its items)."""
    from google.protobuf.message import DecodeError

    if not is_protobuf(raw):
        return None
    pos, end = 4, min(len(raw), 65536)
    try:
        while pos < end:
            tag, pos = _varint(raw, pos)
            length, pos = _varint(raw, pos)
            if tag == 0x12:  # Unknown.raw: the list; its first field is its metadata
                tag, pos = _varint(raw, pos)
                if tag != 0x0A:
                    return None
                length, pos = _varint(raw, pos)
                if pos + length > len(raw):
                    return None
                return list_meta(classes()["ListMeta"].FromString(memoryview(raw)[pos : pos + length]))
            if tag & 7 != 2:
                return None
            pos += length
    except (IndexError, ValueError, DecodeError):
        return None
    return None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
