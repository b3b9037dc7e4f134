"""The Kubernetes protobuf encoding (``application/vnd.kubernetes.protobuf``) of the objects the benchmarks generate.

A body is the magic ``k8s\\x00`` and a ``runtime.Unknown`` (typeMeta=1 {apiVersion=1, kind=2}, raw=2,
contentEncoding=3, contentType=4) whose ``raw`` is the object, e.g. a ``v1.PodList`` (metadata=1, items=2).
A watch stream is a sequence of ``meta/v1.WatchEvent`` (type=1, object=2 ``RawExtension`` {raw=1}), each
preceded by its length as 4 big-endian bytes, the object being such a body.

:data:`SCHEMA` holds the field numbers of every field :mod:`bench.cluster_gen` and the test builders
write, from the API's ``generated.proto`` files (core/v1, meta/v1, runtime, api/resource, util/intstr),
read and skipped alike: the bytes are honest for a decoder that must skip what it does not read. A JSON
key the schema does not know fails the encode, naming its path. Fields are written in field-number order,
maps sorted by key, absent and null fields omitted (the API server also writes empty strings and zero
numbers of its non-pointer fields, a few bytes an object, which this leaves out).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rebalancer.adapters.kube.protobuf_lists import MAGIC, VOLUME_SOURCES

# A field: (number, kind). A kind is a scalar ("string", "int", "bool", "bytes"), a wrapped scalar
# ("time": meta/v1 Time {seconds=1, nanos=2}; "quantity": resource.Quantity {string=1}; "intorstr":
# intstr.IntOrString {type=1, intVal=2, strVal=3}; "fields": meta/v1 FieldsV1 {Raw=1}, JSON bytes),
# a map ("map:string", "map:quantity": entries {key=1, value=2}) or the name of a message of SCHEMA.
# A list value is a repeated field. The key "*" names the embedded message that takes every other JSON
# key of the object: the API inlines it in JSON (Volume.volumeSource, Probe.handler, a
# LocalObjectReference in config map sources).
Field = tuple[int, str]

SCHEMA: dict[str, dict[str, Field]] = {
    # --- meta/v1 ---
    "ListMeta": {
        "selfLink": (1, "string"),
        "resourceVersion": (2, "string"),
        "continue": (3, "string"),
        "remainingItemCount": (4, "int"),
    },
    "ObjectMeta": {
        "name": (1, "string"),
        "generateName": (2, "string"),
        "namespace": (3, "string"),
        "selfLink": (4, "string"),
        "uid": (5, "string"),
        "resourceVersion": (6, "string"),
        "generation": (7, "int"),
        "creationTimestamp": (8, "time"),
        "deletionTimestamp": (9, "time"),
        "deletionGracePeriodSeconds": (10, "int"),
        "labels": (11, "map:string"),
        "annotations": (12, "map:string"),
        "ownerReferences": (13, "OwnerReference"),
        "finalizers": (14, "string"),
        "managedFields": (17, "ManagedFieldsEntry"),
    },
    "OwnerReference": {
        "kind": (1, "string"),
        "name": (3, "string"),
        "uid": (4, "string"),
        "apiVersion": (5, "string"),
        "controller": (6, "bool"),
        "blockOwnerDeletion": (7, "bool"),
    },
    "ManagedFieldsEntry": {
        "manager": (1, "string"),
        "operation": (2, "string"),
        "apiVersion": (3, "string"),
        "time": (4, "time"),
        "fieldsType": (6, "string"),
        "fieldsV1": (7, "fields"),
        "subresource": (8, "string"),
    },
    "LabelSelector": {"matchLabels": (1, "map:string"), "matchExpressions": (2, "Requirement")},
    "Requirement": {"key": (1, "string"), "operator": (2, "string"), "values": (3, "string")},
    # --- core/v1: pods ---
    "PodList": {"metadata": (1, "ListMeta"), "items": (2, "Pod")},
    "Pod": {"metadata": (1, "ObjectMeta"), "spec": (2, "PodSpec"), "status": (3, "PodStatus")},
    "PodSpec": {
        "volumes": (1, "Volume"),
        "containers": (2, "Container"),
        "restartPolicy": (3, "string"),
        "terminationGracePeriodSeconds": (4, "int"),
        "activeDeadlineSeconds": (5, "int"),
        "dnsPolicy": (6, "string"),
        "nodeSelector": (7, "map:string"),
        "serviceAccountName": (8, "string"),
        "serviceAccount": (9, "string"),
        "nodeName": (10, "string"),
        "hostNetwork": (11, "bool"),
        "securityContext": (14, "PodSecurityContext"),
        "hostname": (16, "string"),
        "subdomain": (17, "string"),
        "affinity": (18, "Affinity"),
        "schedulerName": (19, "string"),
        "initContainers": (20, "Container"),
        "automountServiceAccountToken": (21, "bool"),
        "tolerations": (22, "Toleration"),
        "priorityClassName": (24, "string"),
        "priority": (25, "int"),
        "enableServiceLinks": (30, "bool"),
        "preemptionPolicy": (31, "string"),
        "overhead": (32, "map:quantity"),
        "resources": (40, "ResourceRequirements"),
    },
    "Volume": {"name": (1, "string"), "*": (2, "VolumeSource")},
    "VolumeSource": {
        **{name: (number, "Opaque") for name, number in VOLUME_SOURCES.items()},
        "configMap": (VOLUME_SOURCES["configMap"], "ConfigMapVolumeSource"),
        "projected": (VOLUME_SOURCES["projected"], "ProjectedVolumeSource"),
    },
    # A volume source the benchmarks write empty ({}): any key fails the encode.
    "Opaque": {},
    "ConfigMapVolumeSource": {
        "*": (1, "LocalObjectReference"),
        "items": (2, "KeyToPath"),
        "defaultMode": (3, "int"),
        "optional": (4, "bool"),
    },
    "LocalObjectReference": {"name": (1, "string")},
    "KeyToPath": {"key": (1, "string"), "path": (2, "string"), "mode": (3, "int")},
    "ProjectedVolumeSource": {"sources": (1, "VolumeProjection"), "defaultMode": (2, "int")},
    "VolumeProjection": {
        "configMap": (3, "ConfigMapProjection"),
        "serviceAccountToken": (4, "ServiceAccountTokenProjection"),
    },
    "ConfigMapProjection": {"*": (1, "LocalObjectReference"), "items": (2, "KeyToPath"), "optional": (4, "bool")},
    "ServiceAccountTokenProjection": {
        "audience": (1, "string"),
        "expirationSeconds": (2, "int"),
        "path": (3, "string"),
    },
    "Container": {
        "name": (1, "string"),
        "image": (2, "string"),
        "command": (3, "string"),
        "args": (4, "string"),
        "workingDir": (5, "string"),
        "ports": (6, "ContainerPort"),
        "env": (7, "EnvVar"),
        "resources": (8, "ResourceRequirements"),
        "volumeMounts": (9, "VolumeMount"),
        "livenessProbe": (10, "Probe"),
        "readinessProbe": (11, "Probe"),
        "terminationMessagePath": (13, "string"),
        "imagePullPolicy": (14, "string"),
        "securityContext": (15, "SecurityContext"),
        "terminationMessagePolicy": (20, "string"),
        "startupProbe": (22, "Probe"),
        "restartPolicy": (24, "string"),
    },
    "ContainerPort": {
        "name": (1, "string"),
        "hostPort": (2, "int"),
        "containerPort": (3, "int"),
        "protocol": (4, "string"),
    },
    "EnvVar": {"name": (1, "string"), "value": (2, "string"), "valueFrom": (3, "EnvVarSource")},
    "EnvVarSource": {"fieldRef": (1, "ObjectFieldSelector")},
    "ObjectFieldSelector": {"apiVersion": (1, "string"), "fieldPath": (2, "string")},
    "ResourceRequirements": {"limits": (1, "map:quantity"), "requests": (2, "map:quantity")},
    "VolumeMount": {"name": (1, "string"), "readOnly": (2, "bool"), "mountPath": (3, "string")},
    "Probe": {
        "*": (1, "ProbeHandler"),
        "initialDelaySeconds": (2, "int"),
        "timeoutSeconds": (3, "int"),
        "periodSeconds": (4, "int"),
        "successThreshold": (5, "int"),
        "failureThreshold": (6, "int"),
    },
    "ProbeHandler": {"httpGet": (2, "HTTPGetAction")},
    "HTTPGetAction": {"path": (1, "string"), "port": (2, "intorstr"), "host": (3, "string"), "scheme": (4, "string")},
    "SecurityContext": {
        "capabilities": (1, "Capabilities"),
        "privileged": (2, "bool"),
        "runAsUser": (4, "int"),
        "runAsNonRoot": (5, "bool"),
        "readOnlyRootFilesystem": (6, "bool"),
        "allowPrivilegeEscalation": (7, "bool"),
    },
    "Capabilities": {"add": (1, "string"), "drop": (2, "string")},
    "PodSecurityContext": {"runAsUser": (2, "int"), "runAsNonRoot": (3, "bool"), "fsGroup": (5, "int")},
    "Affinity": {
        "nodeAffinity": (1, "NodeAffinity"),
        "podAffinity": (2, "PodAffinity"),
        "podAntiAffinity": (3, "PodAffinity"),
    },
    "NodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": (1, "NodeSelector"),
        "preferredDuringSchedulingIgnoredDuringExecution": (2, "PreferredSchedulingTerm"),
    },
    "PreferredSchedulingTerm": {"weight": (1, "int"), "preference": (2, "NodeSelectorTerm")},
    "NodeSelector": {"nodeSelectorTerms": (1, "NodeSelectorTerm")},
    "NodeSelectorTerm": {"matchExpressions": (1, "Requirement"), "matchFields": (2, "Requirement")},
    # PodAffinity and PodAntiAffinity share their numbers.
    "PodAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": (1, "PodAffinityTerm"),
        "preferredDuringSchedulingIgnoredDuringExecution": (2, "WeightedPodAffinityTerm"),
    },
    "WeightedPodAffinityTerm": {"weight": (1, "int"), "podAffinityTerm": (2, "PodAffinityTerm")},
    "PodAffinityTerm": {
        "labelSelector": (1, "LabelSelector"),
        "namespaces": (2, "string"),
        "topologyKey": (3, "string"),
    },
    "Toleration": {
        "key": (1, "string"),
        "operator": (2, "string"),
        "value": (3, "string"),
        "effect": (4, "string"),
        "tolerationSeconds": (5, "int"),
    },
    "PodStatus": {
        "phase": (1, "string"),
        "conditions": (2, "PodCondition"),
        "message": (3, "string"),
        "reason": (4, "string"),
        "hostIP": (5, "string"),
        "podIP": (6, "string"),
        "startTime": (7, "time"),
        "containerStatuses": (8, "ContainerStatus"),
        "qosClass": (9, "string"),
        "initContainerStatuses": (10, "ContainerStatus"),
        "podIPs": (12, "PodIP"),
    },
    "PodCondition": {
        "type": (1, "string"),
        "status": (2, "string"),
        "lastProbeTime": (3, "time"),
        "lastTransitionTime": (4, "time"),
        "reason": (5, "string"),
        "message": (6, "string"),
    },
    "PodIP": {"ip": (1, "string")},
    "ContainerStatus": {
        "name": (1, "string"),
        "state": (2, "ContainerState"),
        "lastState": (3, "ContainerState"),
        "ready": (4, "bool"),
        "restartCount": (5, "int"),
        "image": (6, "string"),
        "imageID": (7, "string"),
        "containerID": (8, "string"),
        "started": (9, "bool"),
    },
    "ContainerState": {
        "waiting": (1, "ContainerStateWaiting"),
        "running": (2, "ContainerStateRunning"),
        "terminated": (3, "ContainerStateTerminated"),
    },
    "ContainerStateWaiting": {"reason": (1, "string"), "message": (2, "string")},
    "ContainerStateRunning": {"startedAt": (1, "time")},
    "ContainerStateTerminated": {
        "exitCode": (1, "int"),
        "signal": (2, "int"),
        "reason": (3, "string"),
        "message": (4, "string"),
        "startedAt": (5, "time"),
        "finishedAt": (6, "time"),
        "containerID": (7, "string"),
    },
    # --- core/v1: nodes ---
    "NodeList": {"metadata": (1, "ListMeta"), "items": (2, "Node")},
    "Node": {"metadata": (1, "ObjectMeta"), "spec": (2, "NodeSpec"), "status": (3, "NodeStatus")},
    "NodeSpec": {
        "podCIDR": (1, "string"),
        "providerID": (3, "string"),
        "unschedulable": (4, "bool"),
        "taints": (5, "Taint"),
        "podCIDRs": (7, "string"),
    },
    "Taint": {"key": (1, "string"), "value": (2, "string"), "effect": (3, "string"), "timeAdded": (4, "time")},
    "NodeStatus": {
        "capacity": (1, "map:quantity"),
        "allocatable": (2, "map:quantity"),
        "phase": (3, "string"),
        "conditions": (4, "NodeCondition"),
        "addresses": (5, "NodeAddress"),
        "nodeInfo": (7, "NodeSystemInfo"),
        "images": (8, "ContainerImage"),
    },
    "NodeCondition": {
        "type": (1, "string"),
        "status": (2, "string"),
        "lastHeartbeatTime": (3, "time"),
        "lastTransitionTime": (4, "time"),
        "reason": (5, "string"),
        "message": (6, "string"),
    },
    "NodeAddress": {"type": (1, "string"), "address": (2, "string")},
    "NodeSystemInfo": {
        "machineID": (1, "string"),
        "systemUUID": (2, "string"),
        "bootID": (3, "string"),
        "kernelVersion": (4, "string"),
        "osImage": (5, "string"),
        "containerRuntimeVersion": (6, "string"),
        "kubeletVersion": (7, "string"),
        "kubeProxyVersion": (8, "string"),
        "operatingSystem": (9, "string"),
        "architecture": (10, "string"),
    },
    "ContainerImage": {"names": (1, "string"), "sizeBytes": (2, "int")},
}

_TOP_LEVEL = ("kind", "apiVersion")  # TypeMeta: in the envelope, not in the object


class EncodeError(ValueError):
    """A JSON object the schema cannot encode (an unknown key or a value of the wrong type)."""


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int32 and int64 negatives: ten bytes, two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + varint(len(payload)) + payload


def _time(text: str, path: str) -> bytes:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise EncodeError(f"{path}: not an RFC 3339 time {text!r}") from exc
    seconds = int(moment.timestamp())
    nanos = moment.microsecond * 1000
    return _key(1, 0) + varint(seconds) + (_key(2, 0) + varint(nanos) if nanos else b"")


def _scalar(number: int, kind: str, value: Any, path: str) -> bytes:
    if kind == "string":
        if not isinstance(value, str):
            raise EncodeError(f"{path}: expected a string, got {value!r}")
        return _delimited(number, value.encode())
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise EncodeError(f"{path}: expected an integer, got {value!r}")
        return _key(number, 0) + varint(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise EncodeError(f"{path}: expected a boolean, got {value!r}")
        return _key(number, 0) + varint(int(value))
    if kind == "time":
        return _delimited(number, _time(value, path))
    if kind == "quantity":
        return _delimited(number, _scalar(1, "string", value, path))
    if kind == "intorstr":
        if isinstance(value, int) and not isinstance(value, bool):
            return _delimited(number, _key(1, 0) + varint(0) + _key(2, 0) + varint(value))
        return _delimited(number, _key(1, 0) + varint(1) + _scalar(3, "string", value, path))
    if kind == "fields":
        import msgspec

        return _delimited(number, _delimited(1, msgspec.json.encode(value)))
    if kind.startswith("map:"):
        if not isinstance(value, Mapping):
            raise EncodeError(f"{path}: expected an object, got {value!r}")
        value_kind = kind[4:]
        return b"".join(
            _delimited(number, _scalar(1, "string", k, path) + _scalar(2, value_kind, v, f"{path}.{k}"))
            for k, v in sorted(value.items())
        )
    if kind in SCHEMA:
        return _delimited(number, message(kind, value, path))
    raise EncodeError(f"{path}: unknown kind {kind!r}")


def message(name: str, obj: Any, path: str = "") -> bytes:
    """The protobuf encoding of the JSON object ``obj`` as the message ``name`` of :data:`SCHEMA`."""
    if not isinstance(obj, Mapping):
        raise EncodeError(f"{path or name}: expected an object, got {obj!r}")
    fields = SCHEMA[name]
    inline = fields.get("*")
    parts: list[tuple[int, bytes]] = []
    rest: dict[str, Any] = {}
    for key, value in obj.items():
        at = f"{path}.{key}" if path else key
        if value is None or (not path and key in _TOP_LEVEL):
            continue
        field = fields.get(key)
        if field is None or key == "*":
            if inline is None:
                raise EncodeError(f"{at}: no field {key!r} in {name}")
            rest[key] = value
            continue
        number, kind = field
        if isinstance(value, list):
            parts.extend((number, _scalar(number, kind, v, f"{at}[{i}]")) for i, v in enumerate(value))
        else:
            parts.append((number, _scalar(number, kind, value, at)))
    if inline is not None and rest:
        parts.append((inline[0], _delimited(inline[0], message(inline[1], rest, path))))
    parts.sort(key=lambda part: part[0])  # stable: a repeated field keeps its order
    return b"".join(part for _, part in parts)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """A whole protobuf body: the magic and a ``runtime.Unknown`` holding ``raw``."""
    type_meta = _scalar(1, "string", api_version, "apiVersion") + _scalar(2, "string", kind, "kind")
    return MAGIC + _delimited(1, type_meta) + _delimited(2, raw)


def list_body(kind: str, metadata: Mapping[str, Any], items: list[bytes]) -> bytes:
    """The body of a ``<kind>List`` (``PodList``, ``NodeList``) from its items' encodings (``message(kind, ...)``)."""
    list_kind = f"{kind}List"
    raw = _delimited(1, message("ListMeta", metadata, "metadata")) + b"".join(_delimited(2, item) for item in items)
    return envelope("v1", list_kind, raw)


def watch_event(event_type: str, api_version: str, kind: str, raw: bytes) -> bytes:
    """One framed event of a protobuf watch stream: 4-byte big-endian length, then a ``WatchEvent``."""
    event = _scalar(1, "string", event_type, "type") + _delimited(2, _delimited(1, envelope(api_version, kind, raw)))
    return len(event).to_bytes(4, "big") + event
