"""Label selectors and node selector terms with Kubernetes semantics (pure)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_SELECTOR_OPERATORS = SELECTOR_OPERATORS | {"Gt", "Lt"}


class Requirement(msgspec.Struct, frozen=True, gc=False):
    """One ``matchExpressions`` entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, bound = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False  # an unknown operator selects nothing, as the API server would reject it


class LabelSelector(msgspec.Struct, frozen=True, gc=False):
    """A ``metav1.LabelSelector``: all of ``match_labels`` and all expressions must hold.

    An empty selector matches everything; "no selector" is modelled as ``None`` by callers.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


class NodeSelectorTerm(msgspec.Struct, frozen=True, gc=False):
    """One term of ``requiredDuringSchedulingIgnoredDuringExecution``; terms are ORed."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False  # an empty term matches no node (Kubernetes API reference)
        fields = {"metadata.name": node_name}
        return all(r.matches(labels) for r in self.match_expressions) and all(
            r.matches(fields) for r in self.match_fields
        )


class PreferredTerm(msgspec.Struct, frozen=True, gc=False):
    """One term of ``preferredDuringSchedulingIgnoredDuringExecution``: a node its ``preference`` matches
    scores ``weight`` more (an empty preference matches no node)."""

    weight: int
    preference: NodeSelectorTerm


class PodAffinityTerm(msgspec.Struct, frozen=True, gc=False):
    """One ``podAffinityTerm`` (inter-pod affinity or anti-affinity): the pods its ``selector`` matches in
    its namespaces, grouped by the node label ``topology_key`` of the nodes they run on.

    ``selector`` None (absent) matches no pod. ``namespaces``: the namespaces it applies to, resolved when
    read (no ``namespaces`` and no ``namespaceSelector``: the owning pod's namespace); None: every namespace
    (an empty ``namespaceSelector``). ``namespace_selector``: a non-empty ``namespaceSelector``, whose
    namespaces (chosen by their labels, which rebalancer does not read) add to ``namespaces``."""

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    namespace_selector: LabelSelector | None = None

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """The term surely matches a pod of ``namespace`` with ``labels``."""
        if self.selector is None or (self.namespaces is not None and namespace not in self.namespaces):
            return False
        return self.selector.matches(labels)

    def unsure(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether it matches such a pod depends on the namespace's labels (not read)."""
        return (
            self.namespace_selector is not None
            and self.selector is not None
            and not self.selects(namespace, labels)
            and self.selector.matches(labels)
        )


class WeightedPodAffinityTerm(msgspec.Struct, frozen=True, gc=False):
    """One preferred inter-pod term: nodes by its ``term`` score ``weight`` more (anti-affinity: less)."""

    weight: int
    term: PodAffinityTerm


class PodAffinity(msgspec.Struct, frozen=True, gc=False):
    """A pod's ``podAffinity`` and ``podAntiAffinity``: required terms (all must hold) and preferred ones."""

    required: tuple[PodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_anti: tuple[WeightedPodAffinityTerm, ...] = ()
