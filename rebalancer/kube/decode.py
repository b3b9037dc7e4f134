"""Wire structs -> frozen domain types (pure: no I/O).

CPU becomes integer millicores and memory integer bytes here, once. A malformed quantity or
timestamp raises :class:`KubeUnavailable` naming the object and the field, never a bare
``ValueError``: a cluster that answers nonsense is a failed source, not a crash.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from types import MappingProxyType

import msgspec

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import wire
from rebalancer.labels import LabelSelector, NodeSelectorTerm, Requirement
from rebalancer.model import DisruptionBudget, Node, Pod, Taint, Toleration, WorkloadRef
from rebalancer.protections import MIRROR_ANNOTATION
from rebalancer.quantity import QuantityError, cpu_millis, memory_bytes, parse_quantity

RsOwners = Mapping[tuple[str, str], tuple[str, str]]
"""(namespace, ReplicaSet name) -> (kind, name) of the ReplicaSet's controller."""

_EMPTY: Mapping[str, str] = MappingProxyType({})


def quantity(parse: Callable[[str], int], text: str, what: str, path: str) -> int:
    try:
        return parse(text)
    except QuantityError as exc:
        raise KubeUnavailable(f"{what}: {path}: not a quantity {text!r}", reason="Malformed") from exc


def timestamp(text: str | None, what: str, path: str) -> float:
    """An RFC 3339 time (``2024-05-01T12:00:00Z``) as epoch seconds; absent: 0.0."""
    if text is None:
        return 0.0
    value = _epoch(text)
    if value is None:
        raise KubeUnavailable(
            f"{what}: {path}: not an RFC 3339 time {text!r} (a time with its zone)", reason="Malformed"
        )
    return value


@lru_cache(maxsize=65536)
def _epoch(text: str) -> float | None:
    """Cached: pods of one rollout share creation seconds, and every node shares heartbeat times."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if parsed.tzinfo is None else parsed.timestamp()


def condition_true(conditions: Iterable[wire.Condition], kind: str) -> bool:
    for c in conditions:  # a plain loop: called for every pod, cheaper than any(<generator>)
        if c.type == kind:
            return c.status == "True"
    return False


def requirement(r: wire.SelectorRequirement) -> Requirement:
    return Requirement(key=r.key, operator=r.operator, values=tuple(r.values))


def label_selector(s: wire.LabelSelector | None) -> LabelSelector | None:
    if s is None:
        return None
    return LabelSelector(
        match_labels=tuple(sorted(s.match_labels.items())),
        match_expressions=tuple(requirement(r) for r in s.match_expressions),
    )


def replica_set_owner(rs: wire.ReplicaSet) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The (namespace, name) -> (kind, name) entry of a controlled ReplicaSet, else None."""
    for ref in rs.metadata.owner_references:
        if ref.controller:
            return (rs.metadata.namespace, rs.metadata.name), (ref.kind, ref.name)
    return None


def node(w: wire.Node) -> Node:
    meta, status = w.metadata, w.status
    what = f"node {meta.name}"

    def alloc(key: str, parse: Callable[[str], int]) -> int:
        for field, source in (("allocatable", status.allocatable), ("capacity", status.capacity)):
            if key in source:
                return quantity(parse, source[key], what, f"status.{field}.{key}")
        return 0

    return Node(
        name=meta.name,
        labels=meta.labels,
        allocatable_cpu_m=alloc("cpu", cpu_millis),
        allocatable_memory=alloc("memory", memory_bytes),
        allocatable_pods=alloc("pods", memory_bytes),
        taints=tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in w.spec.taints),
        unschedulable=w.spec.unschedulable,
        ready=condition_true(status.conditions, "Ready"),
        addresses=tuple(a.address for a in status.addresses if a.address),
    )


def budget(w: wire.PodDisruptionBudget) -> DisruptionBudget:
    meta, spec, status = w.metadata, w.spec, w.status
    return DisruptionBudget(
        namespace=meta.namespace,
        name=meta.name,
        selector=label_selector(spec.selector),
        min_available=spec.min_available,
        max_unavailable=spec.max_unavailable,
        disruptions_allowed=status.disruptions_allowed,
        current_healthy=status.current_healthy,
        desired_healthy=status.desired_healthy,
        expected_pods=status.expected_pods,
    )


class PodDecoder:
    """Decodes pods for one read; values that repeat across pods are built once and shared.

    ``annotations``: the only annotation keys kept (``Protections.annotations_read()``).
    ``rs_owners``: controllers of ReplicaSets, to resolve pod -> ReplicaSet -> Deployment.
    The sharing tables live as long as this object (one read), never module-wide.
    """

    def __init__(self, annotations: frozenset[str], rs_owners: RsOwners) -> None:
        self._annotations = annotations
        self._rs_owners = rs_owners
        self._tolerations: dict[tuple[wire.WireToleration, ...], tuple[Toleration, ...]] = {(): ()}
        self._affinity: dict[tuple[wire.NodeSelectorTerm, ...], tuple[NodeSelectorTerm, ...]] = {(): ()}
        self._workloads: dict[tuple[str, str, str], WorkloadRef] = {}
        self._selectors: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
        self._volume_kinds: dict[frozenset[str], frozenset[str]] = {}

    def pods(self, items: Iterable[wire.Pod]) -> list[Pod]:
        return [self.pod(w) for w in items]

    def pod(self, w: wire.Pod) -> Pod:
        meta, spec, status = w.metadata, w.spec, w.status
        namespace = sys.intern(meta.namespace)
        what = f"pod {namespace}/{meta.name}"
        controller = next((ref for ref in meta.owner_references if ref.controller), None)
        cpu_m, memory = requests(spec, what)
        raw_annotations = meta.annotations
        return Pod(
            namespace=namespace,
            name=meta.name,
            uid=meta.uid,
            node_name=sys.intern(spec.node_name) if spec.node_name else None,
            phase=sys.intern(status.phase),
            ready=condition_true(status.conditions, "Ready"),
            workload=self._workload(namespace, controller),
            owner_kind=sys.intern(controller.kind) if controller else None,
            priority=spec.priority or 0,
            priority_class=sys.intern(spec.priority_class_name),
            qos=sys.intern(status.qos_class or qos_class(spec)),
            cpu_request_m=cpu_m,
            memory_request=memory,
            created=timestamp(meta.creation_timestamp, what, "metadata.creationTimestamp"),
            restarts=sum(s.restart_count for s in status.container_statuses),
            labels=meta.labels or _EMPTY,
            annotations=self._kept(raw_annotations, what) if raw_annotations else _EMPTY,
            volume_kinds=self._kinds(spec.volumes),
            tolerations=self._toleration_tuple(spec.tolerations),
            node_selector=self._node_selector(spec.node_selector) if spec.node_selector else _EMPTY,
            required_affinity=self._required(spec),
            terminating=meta.deletion_timestamp is not None,
            mirror=MIRROR_ANNOTATION in raw_annotations,
        )

    def _kept(self, raw: Mapping[str, msgspec.Raw], what: str) -> Mapping[str, str]:
        kept: dict[str, str] = {}
        for key in self._annotations:
            if key in raw:
                try:
                    kept[key] = _STRING.decode(raw[key])
                except msgspec.DecodeError as exc:
                    raise KubeUnavailable(f"{what}: metadata.annotations[{key}]: {exc}", reason="Malformed") from exc
        return kept or _EMPTY

    def _workload(self, namespace: str, ref: wire.OwnerReference | None) -> WorkloadRef | None:
        if ref is None:
            return None
        kind, name = ref.kind, ref.name
        if kind == "ReplicaSet":
            kind, name = self._rs_owners.get((namespace, name), (kind, name))
        key = (kind, namespace, name)
        found = self._workloads.get(key)
        if found is None:
            found = self._workloads[key] = WorkloadRef(kind=sys.intern(kind), namespace=namespace, name=name)
        return found

    def _toleration_tuple(self, wire_tolerations: tuple[wire.WireToleration, ...]) -> tuple[Toleration, ...]:
        found = self._tolerations.get(wire_tolerations)
        if found is None:
            found = self._tolerations[wire_tolerations] = tuple(
                # The API defaults an empty operator to Equal.
                Toleration(key=t.key, operator=t.operator or "Equal", value=t.value, effect=t.effect)
                for t in wire_tolerations
            )
        return found

    def _required(self, spec: wire.PodSpec) -> tuple[NodeSelectorTerm, ...]:
        affinity = spec.affinity
        node_affinity = affinity.node_affinity if affinity else None
        required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
        if required is None:
            return ()
        terms = required.node_selector_terms
        found = self._affinity.get(terms)
        if found is None:
            found = self._affinity[terms] = tuple(
                NodeSelectorTerm(
                    match_expressions=tuple(requirement(r) for r in term.match_expressions),
                    match_fields=tuple(requirement(r) for r in term.match_fields),
                )
                for term in terms
            )
        return found

    def _node_selector(self, selector: dict[str, str]) -> Mapping[str, str]:
        key = tuple(sorted(selector.items()))
        found = self._selectors.get(key)
        if found is None:
            found = self._selectors[key] = MappingProxyType(dict(key))
        return found

    def _kinds(self, volumes: list[dict[str, msgspec.Raw]]) -> frozenset[str]:
        kinds = frozenset(key for volume in volumes for key in volume if key != "name")
        return self._volume_kinds.setdefault(kinds, kinds)


_STRING = msgspec.json.Decoder(str)


def requests(spec: wire.PodSpec, what: str) -> tuple[int, int]:
    """Effective (CPU millicores, memory bytes) requests, computed as the scheduler does.

    max(sum of app containers and sidecars, each init container plus the sidecars started
    before it) + pod overhead; pod-level ``spec.resources.requests`` replace the container
    figures for the resources they name.
    """
    cpu = memory = 0
    for i, c in enumerate(spec.containers):
        c_cpu, c_memory = _requests(c.resources, what, "spec.containers", i)
        cpu += c_cpu
        memory += c_memory
    if spec.init_containers:
        side_cpu = side_memory = peak_cpu = peak_memory = 0
        for i, c in enumerate(spec.init_containers):
            c_cpu, c_memory = _requests(c.resources, what, "spec.initContainers", i)
            if c.restart_policy == "Always":  # a sidecar: runs beside the app containers
                cpu, memory = cpu + c_cpu, memory + c_memory
                side_cpu, side_memory = side_cpu + c_cpu, side_memory + c_memory
                peak_cpu, peak_memory = max(peak_cpu, side_cpu), max(peak_memory, side_memory)
            else:
                peak_cpu, peak_memory = max(peak_cpu, c_cpu + side_cpu), max(peak_memory, c_memory + side_memory)
        cpu, memory = max(cpu, peak_cpu), max(memory, peak_memory)
    if spec.resources is not None and spec.resources.requests:
        pod_cpu, pod_memory = _requests(spec.resources, what, "spec", None)
        pod_level = spec.resources.requests
        cpu = pod_cpu if "cpu" in pod_level else cpu
        memory = pod_memory if "memory" in pod_level else memory
    if spec.overhead:
        extra_cpu, extra_memory = _quantities(spec.overhead, what, "spec.overhead")
        cpu, memory = cpu + extra_cpu, memory + extra_memory
    return cpu, memory


def _requests(resources: wire.ResourceRequirements | None, what: str, field: str, index: int | None) -> tuple[int, int]:
    if resources is None or not resources.requests:
        return 0, 0
    return _quantities(resources.requests, what, field, index, ".resources.requests")


def _quantities(
    values: dict[str, str], what: str, field: str, index: int | None = None, suffix: str = ""
) -> tuple[int, int]:
    """(cpu millicores, memory bytes) of a resource list, absent: 0; the error names the field."""
    try:
        return (
            cpu_millis(values["cpu"]) if "cpu" in values else 0,
            memory_bytes(values["memory"]) if "memory" in values else 0,
        )
    except QuantityError as exc:
        key = "memory" if "cpu" not in values or _valid(cpu_millis, values["cpu"]) else "cpu"
        path = f"{field}{'' if index is None else f'[{index}]'}{suffix}.{key}"
        raise KubeUnavailable(f"{what}: {path}: not a quantity {values[key]!r}", reason="Malformed") from exc


def _valid(parse: Callable[[str], int], text: str) -> bool:
    try:
        parse(text)
    except QuantityError:
        return False
    return True


def qos_class(spec: wire.PodSpec) -> str:
    """The QoS class when ``status.qosClass`` is absent (the API server normally sets it)."""
    containers = [*spec.containers, *spec.init_containers]
    resources = [c.resources or wire.ResourceRequirements() for c in containers]
    if not any(r.requests or r.limits for r in resources):
        return "BestEffort"
    guaranteed = all(_same(r, "cpu") and _same(r, "memory") for r in resources)
    return "Guaranteed" if guaranteed else "Burstable"


def _same(r: wire.ResourceRequirements, key: str) -> bool:
    """A limit is set and the request (defaulted to the limit) equals it."""
    if key not in r.limits:
        return False
    try:
        return parse_quantity(r.requests.get(key, r.limits[key])) == parse_quantity(r.limits[key])
    except QuantityError:
        return False
