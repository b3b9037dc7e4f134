"""Wire structs -> frozen domain types (pure: no I/O).

CPU becomes integer millicores and memory integer bytes here, once. A malformed quantity or
timestamp raises :class:`KubeUnavailable` naming the object and the field, never a bare
``ValueError``: a cluster that answers nonsense is a failed source, not a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from sys import intern
from types import MappingProxyType
from typing import Any

import msgspec

from rebalancer.adapters.kube import wire
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.domain.labels import (
    LabelSelector,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PreferredTerm,
    Requirement,
    WeightedPodAffinityTerm,
)
from rebalancer.domain.model import DisruptionBudget, Node, Pod, Taint, Toleration, WorkloadRef
from rebalancer.domain.quantity import QuantityError, cpu_millis, memory_bytes, parse_quantity
from rebalancer.planning.protections import MIRROR_ANNOTATION

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
    for c in conditions:  # a plain loop: cheaper than any(<generator>)
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
        annotations=_EMPTY if meta.annotations.landing_guard is None else {GUARD_KEY: meta.annotations.landing_guard},
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


def pod_wire(annotations: frozenset[str]) -> wire.PodWire:
    """The decoders of the pods that ``PodDecoder(annotations, ...)`` converts."""
    return wire.pod_wire(annotations, MIRROR_ANNOTATION)


class PodDecoder:
    """Decodes pods for one read; values that repeat across pods are built once and shared.

    ``annotations``: the only annotation keys kept (``Protections.annotations_read()``); their
    wire decoders are :attr:`wire` (pods must be decoded with them).
    ``rs_owners``: controllers of ReplicaSets, to resolve pod -> ReplicaSet -> Deployment.
    The sharing tables live as long as this object (one read), never module-wide. Pods of one
    template share their containers' resources, volumes and tolerations, so the figures derived
    from them are computed once per distinct shape (a failure is not remembered: every pod of a
    bad shape fails with its own name).
    """

    def __init__(self, annotations: frozenset[str], rs_owners: RsOwners) -> None:
        self.wire = pod_wire(annotations)
        self._rs_owners = rs_owners
        self._requests: dict[_Shape, tuple[int, int]] = {}
        self._tolerations: dict[tuple[wire.WireToleration, ...], tuple[Toleration, ...]] = {(): ()}
        self._affinity: dict[tuple[wire.NodeSelectorTerm, ...], tuple[NodeSelectorTerm, ...]] = {(): ()}
        self._preferred: dict[tuple[wire.PreferredSchedulingTerm, ...], tuple[PreferredTerm, ...]] = {(): ()}
        self._pod_affinities: dict[tuple[str, bytes, bytes], PodAffinity | None] = {}
        self._workloads: dict[tuple[str, str, str], WorkloadRef] = {}
        self._selectors: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
        self._volume_kinds: dict[tuple[wire.Volume, ...], frozenset[str]] = {(): frozenset()}

    def pods(self, items: Iterable[wire.Pod]) -> list[Pod]:
        return [self.pod(w) for w in items]

    @contextmanager
    def converting_list(self) -> Iterator[msgspec.json.Decoder[wire.PodList]]:
        """A decoder of pod lists that converts each pod as soon as it is decoded (read them with :func:`converted`).

        msgspec calls ``__post_init__`` on each pod struct once it is filled: the pod is converted
        while its wire objects are still in the CPU cache, and they are released at once, instead
        of a page's forty thousand wire objects being built, then walked, then freed, each pass
        from main memory (a quarter of the CPU time of a 150,000-pod read). The decode also runs
        bytecode between pods, so the thread fetching the next page gets the GIL meanwhile.
        A conversion error (:class:`KubeUnavailable`) comes out of the decode as it is.

        Usable inside the ``with`` block only: the struct types built here live until the cycle
        collector runs, and must not keep this decoder and its tables alive that long.
        """
        hook = [self.pod]

        def __post_init__(w: Any) -> None:
            w.converted = hook[0](w)
            w.metadata, w.spec, w.status = _NO_META, _NO_SPEC, _NO_STATUS

        pod = msgspec.defstruct(
            "ConvertedPod",
            [("converted", Any, None)],
            bases=(self.wire.pod_type,),
            namespace={"__post_init__": __post_init__},
        )
        pod_list = msgspec.defstruct("ConvertedPodList", [("items", list[pod], [])], bases=(wire.PodList,))  # type: ignore[valid-type]
        try:
            yield msgspec.json.Decoder(type=pod_list)
        finally:
            hook.clear()

    def pod(self, w: wire.Pod) -> Pod:
        # The hot path of a snapshot (once per pod): plain loops and dict look-ups, no per-pod
        # strings or closures; the text naming the pod is only built for an error.
        meta, spec, status = w.metadata, w.spec, w.status
        namespace = intern(meta.namespace)
        controller = None
        for ref in meta.owner_references:
            if ref.controller:
                controller = ref
                break
        shape = (spec.containers, spec.init_containers, spec.resources, spec.overhead)
        cpu_memory = self._requests.get(shape)
        if cpu_memory is None:
            cpu_memory = self._requests[shape] = requests(spec, _what(meta))
        created_text = meta.creation_timestamp
        created = 0.0 if created_text is None else _epoch(created_text)
        if created is None:
            created = timestamp(created_text, _what(meta), "metadata.creationTimestamp")
        ready = False
        for condition in status.conditions:
            if condition.type == "Ready":
                ready = condition.status == "True"
                break
        restarts = 0
        for container_status in status.container_statuses:
            restarts += container_status.restart_count
        annotations = meta.annotations
        kept, mirror = (_EMPTY, False) if annotations == self.wire.no_annotations else self._kept(annotations)
        volume_kinds = self._volume_kinds.get(spec.volumes)
        if volume_kinds is None:
            volume_kinds = self._kinds(spec.volumes)
        tolerations = self._tolerations.get(spec.tolerations)
        if tolerations is None:
            tolerations = self._toleration_tuple(spec.tolerations)
        # By position: a Struct is built several times faster than by keyword (order checked at import).
        return Pod(
            namespace,
            meta.name,
            meta.uid,
            intern(spec.node_name) if spec.node_name else None,  # node_name
            intern(status.phase),
            ready,
            None if controller is None else self._workload(namespace, controller),
            None if controller is None else intern(controller.kind),  # owner_kind
            spec.priority or 0,
            intern(spec.priority_class_name),
            intern(status.qos_class or qos_class(spec)),
            cpu_memory[0],  # cpu_request_m
            cpu_memory[1],  # memory_request
            created,
            restarts,
            meta.labels or _EMPTY,
            kept,  # annotations
            volume_kinds,
            tolerations,
            self._node_selector(spec.node_selector) if spec.node_selector else _EMPTY,
            _NO_TERMS if spec.affinity is None else self._required(spec.affinity),
            meta.deletion_timestamp is not None,  # terminating
            mirror,
            _NO_PREFERRED if spec.affinity is None else self._preferred_terms(spec.affinity),
            None if spec.affinity is None else self._pod_affinity(namespace, spec.affinity, meta),
        )

    def _kept(self, annotations: wire.PodAnnotations) -> tuple[Mapping[str, str], bool]:
        """(kept annotations, whether the pod is a mirror pod) of a pod with at least one of the keys."""
        kept: dict[str, str] = {}
        for attribute, key in self.wire.keys:
            value = getattr(annotations, attribute)
            if value is not msgspec.UNSET:
                kept[key] = value
        return kept or _EMPTY, getattr(annotations, self.wire.mirror) is not msgspec.UNSET

    def _workload(self, namespace: str, ref: wire.OwnerReference) -> WorkloadRef:
        kind, name = ref.kind, ref.name
        if kind == "ReplicaSet":
            kind, name = self._rs_owners.get((namespace, name), (kind, name))
        key = (kind, namespace, name)
        found = self._workloads.get(key)
        if found is None:
            found = self._workloads[key] = WorkloadRef(kind=intern(kind), namespace=namespace, name=name)
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

    def _required(self, affinity: wire.Affinity) -> tuple[NodeSelectorTerm, ...]:
        node_affinity = affinity.node_affinity
        required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
        if required is None:
            return _NO_TERMS
        terms = required.node_selector_terms
        found = self._affinity.get(terms)
        if found is None:
            found = self._affinity[terms] = tuple(_term(term) for term in terms)
        return found

    def _preferred_terms(self, affinity: wire.Affinity) -> tuple[PreferredTerm, ...]:
        node_affinity = affinity.node_affinity
        terms = node_affinity.preferred_during_scheduling_ignored_during_execution if node_affinity else ()
        found = self._preferred.get(terms)
        if found is None:
            found = self._preferred[terms] = tuple(
                PreferredTerm(t.weight, _term(t.preference))
                for t in terms
                if t.weight  # weight 0: no effect
            )
        return found

    def _pod_affinity(self, namespace: str, affinity: wire.Affinity, meta: wire.ObjectMeta) -> PodAffinity | None:
        """The pod's inter-pod affinity and anti-affinity (None: no term), decoded once per namespace and text."""
        raw, raw_anti = affinity.pod_affinity, affinity.pod_anti_affinity
        if not raw and not raw_anti:
            return None
        key = (namespace, bytes(raw), bytes(raw_anti))
        if key in self._pod_affinities:
            return self._pod_affinities[key]
        rules = _pod_affinity_rules(key[1], _what(meta), "spec.affinity.podAffinity")
        anti = _pod_affinity_rules(key[2], _what(meta), "spec.affinity.podAntiAffinity")

        def terms(found: list[wire.PodAffinityTerm]) -> tuple[PodAffinityTerm, ...]:
            return tuple(_pod_term(namespace, t) for t in found)

        def weighted(found: list[wire.WeightedPodAffinityTerm]) -> tuple[WeightedPodAffinityTerm, ...]:
            return tuple(
                WeightedPodAffinityTerm(t.weight, _pod_term(namespace, t.pod_affinity_term))
                for t in found
                if t.weight and t.pod_affinity_term is not None  # weight 0: no effect
            )

        found: PodAffinity | None = PodAffinity(
            required=terms(rules.required_during_scheduling_ignored_during_execution),
            required_anti=terms(anti.required_during_scheduling_ignored_during_execution),
            preferred=weighted(rules.preferred_during_scheduling_ignored_during_execution),
            preferred_anti=weighted(anti.preferred_during_scheduling_ignored_during_execution),
        )
        if found == _NO_POD_AFFINITY:
            found = None
        self._pod_affinities[key] = found
        return found

    def _node_selector(self, selector: dict[str, str]) -> Mapping[str, str]:
        key = tuple(sorted(selector.items()))
        found = self._selectors.get(key)
        if found is None:
            found = self._selectors[key] = MappingProxyType(dict(key))
        return found

    def _kinds(self, volumes: tuple[wire.Volume, ...]) -> frozenset[str]:
        found = self._volume_kinds[volumes] = frozenset(kind for volume in volumes for kind in volume.kinds())
        return found


_Shape = tuple[
    tuple[wire.Container, ...], tuple[wire.Container, ...], wire.ResourceRequirements | None, wire.Quantities | None
]
_NO_TERMS: tuple[NodeSelectorTerm, ...] = ()
_NO_PREFERRED: tuple[PreferredTerm, ...] = ()
_NO_POD_AFFINITY = PodAffinity()
_NO_RULES = wire.PodAffinityRules()
_RULES = msgspec.json.Decoder(wire.PodAffinityRules | None)


def _pod_affinity_rules(text: bytes, what: str, path: str) -> wire.PodAffinityRules:
    if not text:
        return _NO_RULES
    try:
        return _RULES.decode(text) or _NO_RULES
    except msgspec.DecodeError as exc:
        raise KubeUnavailable(f"{what}: {path}: {exc}", reason="Malformed") from exc


def _pod_term(namespace: str, term: wire.PodAffinityTerm) -> PodAffinityTerm:
    """A term with its namespaces resolved: none named and no namespaceSelector: the pod's own; an empty
    namespaceSelector: every namespace (None)."""
    ns_selector = label_selector(term.namespace_selector)
    if ns_selector is not None and ns_selector.empty:
        namespaces: frozenset[str] | None = None
        ns_selector = None
    elif ns_selector is None and not term.namespaces:
        namespaces = frozenset((namespace,))
    else:
        namespaces = frozenset(term.namespaces)
    return PodAffinityTerm(term.topology_key, label_selector(term.label_selector), namespaces, ns_selector)


def _term(term: wire.NodeSelectorTerm) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        match_expressions=tuple(requirement(r) for r in term.match_expressions),
        match_fields=tuple(requirement(r) for r in term.match_fields),
    )


_NO_META, _NO_SPEC, _NO_STATUS = wire.PodMeta(), wire.PodSpec(), wire.PodStatus()


def converted(items: Sequence[Any]) -> list[Pod]:
    """The pods of a list decoded by :meth:`PodDecoder.converting_list`, in order."""
    return [w.converted for w in items]


_POD_FIELDS = (
    "namespace",
    "name",
    "uid",
    "node_name",
    "phase",
    "ready",
    "workload",
    "owner_kind",
    "priority",
    "priority_class",
    "qos",
    "cpu_request_m",
    "memory_request",
    "created",
    "restarts",
    "labels",
    "annotations",
    "volume_kinds",
    "tolerations",
    "node_selector",
    "required_affinity",
    "terminating",
    "mirror",
    "preferred_affinity",
    "pod_affinity",
)
if Pod.__struct_fields__ != _POD_FIELDS:  # PodDecoder.pod builds a Pod by position
    raise ImportError(f"rebalancer.domain.model.Pod fields changed; update PodDecoder.pod: {Pod.__struct_fields__}")


def _what(meta: wire.ObjectMeta) -> str:
    return f"pod {meta.namespace}/{meta.name}"


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
    pod_level = spec.resources.requests if spec.resources is not None else None
    if pod_level is not None:
        pod_cpu, pod_memory = _quantities(pod_level, what, "spec.resources.requests")
        cpu = pod_cpu if pod_level.cpu is not None else cpu
        memory = pod_memory if pod_level.memory is not None else memory
    if spec.overhead is not None:
        extra_cpu, extra_memory = _quantities(spec.overhead, what, "spec.overhead")
        cpu, memory = cpu + extra_cpu, memory + extra_memory
    return cpu, memory


def _requests(resources: wire.ResourceRequirements | None, what: str, field: str, index: int) -> tuple[int, int]:
    if resources is None or resources.requests is None:
        return 0, 0
    return _quantities(resources.requests, what, f"{field}[{index}].resources.requests")


def _quantities(values: wire.Quantities, what: str, path: str) -> tuple[int, int]:
    """(cpu millicores, memory bytes) of a resource list, absent: 0; the error names the field."""
    return (
        0 if values.cpu is None else quantity(cpu_millis, values.cpu, what, f"{path}.cpu"),
        0 if values.memory is None else quantity(memory_bytes, values.memory, what, f"{path}.memory"),
    )


def qos_class(spec: wire.PodSpec) -> str:
    """The QoS class when ``status.qosClass`` is absent (the API server normally sets it).

    As the API server computes it, from the CPU and memory of the containers' requests and limits.
    """
    resources = [c.resources or _NO_RESOURCES for c in (*spec.containers, *spec.init_containers)]
    if not any(_named(r.requests) or _named(r.limits) for r in resources):
        return "BestEffort"
    guaranteed = all(_same(r, "cpu") and _same(r, "memory") for r in resources)
    return "Guaranteed" if guaranteed else "Burstable"


_NO_RESOURCES = wire.ResourceRequirements()


def _named(values: wire.Quantities | None) -> bool:
    return values is not None and (values.cpu is not None or values.memory is not None)


def _same(r: wire.ResourceRequirements, key: str) -> bool:
    """A limit is set and the request (defaulted to the limit) equals it."""
    limit: str | None = getattr(r.limits, key, None)
    if limit is None:
        return False
    request: str | None = getattr(r.requests, key, None)
    try:
        return parse_quantity(limit if request is None else request) == parse_quantity(limit)
    except QuantityError:
        return False
