"""The default scheduler's InterPodAffinity plugin over the pods on each node (pure), for the scheduler model.

**Filter** (as ``interpodaffinity/filtering.go``), for an incoming pod P, counting every pod on a node,
terminating ones included (the scheduler's cache holds an evicted pod until its object is deleted, and
its replacement is scheduled meanwhile):

- P's required anti-affinity: a node is out when, for some term, it has the term's topology label and a
  pod the term matches runs on a node with the same value of that label (the terms' lists of nodes are
  intersected: every term must hold).
- Existing pods' required anti-affinity: a node is out when it shares the topology value of a pod whose
  term matches P (what keeps the replacement of a one-per-node pod off the node its predecessor still
  terminates on).
- P's required affinity: a node must have every term's topology label, and for each term some pod that
  matches *all* the terms must run in its topology domain; when no pod anywhere matches them all and P
  matches its own terms (the first pod of a group with affinity to itself), every node with the labels is
  allowed.

**Score** (``scoring.go``, weight 2 in the default profile): per topology domain the summed weights of P's
preferred terms that match pods there (anti-affinity subtracted), of existing pods' preferred terms that
match P (anti subtracted) and 1 (``hardPodAffinityWeight``) per existing pod's required affinity term that
matches P; a node scores the sum of its domains, min-max normalized to 0-100 over the feasible nodes.

A term matches a pod in its namespaces (resolved when read) by its label selector (none: no pod). Not
representable: a non-empty ``namespaceSelector`` (namespaces chosen by labels rebalancer does not read):
when such a term could decide, the answer carries a caveat and is not to be taken as certain.

Kept current with :meth:`InterPodAffinity.add` and :meth:`InterPodAffinity.remove` as the model's pods
move; each distinct term (or conjunction of terms) has its per-node count of matching pods, built on first
use and updated by every move.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from rebalancer.domain.labels import PodAffinity, PodAffinityTerm
from rebalancer.domain.model import Node, NodePods, Pod, PodKey

ANTI, AFFINITY, PREFERRED = "required anti-affinity", "required affinity", "preferred"
AFFINITY_OUT = "node(s) didn't match pod affinity rules"
ANTI_OUT = "node(s) didn't match pod anti-affinity rules"
EXISTING_OUT = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1  # the scheduler's default InterPodAffinityArgs.hardPodAffinityWeight
CAVEAT = "an inter-pod affinity term with a namespaceSelector (namespace labels are not read)"

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
Terms = tuple[PodAffinityTerm, ...]  # a conjunction: a pod matches when every term does


class Verdict:
    """InterPodAffinity for one pod, sparse: the nodes its filter keeps out and why (the count of each
    reason), its raw per-node score where not 0 (``scored``: some term scores), what the model cannot tell
    ("": nothing); ``allowed`` and ``raw`` as node arrays, made when first read."""

    __slots__ = ("_allowed", "_raw", "blocked", "caveat", "out", "raw_of", "scored", "size", "touched")

    def __init__(
        self, size: int, out: set[int], blocked: dict[str, int], raw_of: dict[int, int], scored: bool, caveat: str
    ) -> None:
        self.size, self.out, self.blocked, self.caveat = size, out, blocked, caveat
        self.raw_of, self.scored = raw_of, scored
        # the nodes the filter keeps out or whose raw score is not 0, in index order
        self.touched: tuple[int, ...] = tuple(sorted(out.union(raw_of)))
        self._allowed: Bools | None = None
        self._raw: Ints | None = None

    @property
    def matters(self) -> bool:
        return bool(self.out) or self.scored or bool(self.caveat)

    @property
    def allowed(self) -> Bools | None:
        """The nodes the filter allows (None: every node)."""
        if not self.out:
            return None
        if self._allowed is None:
            self._allowed = np.ones(self.size, np.bool_)
            self._allowed[sorted(self.out)] = False
        return self._allowed

    @property
    def raw(self) -> Ints | None:
        """The raw score of every node (None: no term scores)."""
        if not self.scored:
            return None
        if self._raw is None:
            self._raw = np.zeros(self.size, np.int64)
            if self.raw_of:
                self._raw[list(self.raw_of)] = list(self.raw_of.values())
        return self._raw


def normalized(raw: Ints, feasible: Bools) -> Ints:
    """The plugin's NormalizeScore: ``100 * (raw - min) / (max - min)`` over the feasible nodes, truncated
    (float64 as the scheduler computes it); 0 everywhere when they all score the same."""
    if not feasible.any():
        return np.zeros(len(raw), np.int64)
    low, high = int(raw[feasible].min()), int(raw[feasible].max())
    if high == low:
        return np.zeros(len(raw), np.int64)
    score: Ints = (100.0 * ((raw - low) / float(high - low))).astype(np.int64)
    return score


class InterPodAffinity:
    """The pods on the nodes (index order of ``nodes``) as InterPodAffinity sees them, and its verdict per pod."""

    def __init__(
        self,
        nodes: Sequence[Node],
        pods_on: Callable[[str], tuple[Pod, ...]],
        groups: Mapping[str, NodePods] | None = None,
    ) -> None:
        """``groups``: the snapshot's pods by node with their counts, when it has them (the nodes none of
        whose pods carries a term are then not read)."""
        self._nodes = list(nodes)
        self._pods_on = pods_on
        self._groups = groups
        self._base: list[tuple[int, Pod]] | None = None  # the snapshot's pods, read when first needed
        self._with_terms: dict[tuple[str, int, PodAffinityTerm], dict[int, int]] | None = None
        self._added: list[tuple[int, Pod]] = []
        self._gone: set[tuple[PodKey, int]] = set()
        self._matching: dict[Terms, dict[int, int]] = {}  # conjunction -> node -> pods matching it
        self._matching_index: dict[tuple[str, str] | None, list[Terms]] = {}  # by a label their first term requires
        self._domains: dict[str, dict[str, list[int]]] = {}  # label key -> value -> nodes
        self._verdicts: dict[tuple[object, ...], Verdict | None] = {}
        self._by_label: dict[str, dict[str, list[tuple[int, Pod]]]] = {}  # label key -> value -> snapshot pods
        self._entries_of: dict[int, tuple[PodAffinity, tuple[tuple[str, int, PodAffinityTerm], ...]]] = {}
        # label (key, value) a term requires (None: none) -> the entries of the terms filed under it
        self._term_index: dict[tuple[str, str] | None, list[tuple[str, int, PodAffinityTerm]]] = {}
        self._last: tuple[Pod, tuple[object, ...]] | None = None

    # --- the pods, kept current -------------------------------------------------------------------

    def add(self, i: int, pod: Pod) -> None:
        """``pod`` runs (or terminates) on node ``i`` from now on."""
        self._added.append((i, pod))
        self._count(i, pod, 1)

    def remove(self, i: int, pod: Pod) -> None:
        """``pod`` left node ``i``."""
        entry = next((e for e in self._added if e[0] == i and e[1].key == pod.key), None)
        if entry is not None:
            self._added.remove(entry)
        else:
            self._gone.add((pod.key, i))
        self._count(i, pod, -1)

    def replace_node(self, i: int, node: Node) -> None:
        self._nodes[i] = node
        self._domains.clear()
        self._verdicts.clear()

    def _pods(self) -> list[tuple[int, Pod]]:
        if self._base is None:
            self._base = [(i, p) for i, n in enumerate(self._nodes) for p in self._pods_on(n.name)]
        return self._base

    def _labelled(self, key: str, value: str) -> Iterable[tuple[int, Pod]]:
        """The pods present with label ``key`` = ``value`` (the snapshot's indexed by that label key once)."""
        index = self._by_label.get(key)
        if index is None:
            index = self._by_label[key] = {}
            pods_on = self._pods_on
            for i, node in enumerate(self._nodes):
                for pod in pods_on(node.name):
                    found = pod.labels.get(key)
                    if found is not None:
                        entries = index.get(found)
                        if entries is None:
                            index[found] = [(i, pod)]
                        else:
                            entries.append((i, pod))
        gone = self._gone
        for i, pod in index.get(value, ()):
            if not gone or (pod.key, i) not in gone:
                yield i, pod
        yield from ((i, pod) for i, pod in self._added if pod.labels.get(key) == value)

    def _present(self) -> Iterable[tuple[int, Pod]]:
        gone = self._gone
        for i, pod in self._pods():
            if not gone or (pod.key, i) not in gone:
                yield i, pod
        yield from self._added

    def _terms(self) -> dict[tuple[str, int, PodAffinityTerm], dict[int, int]]:
        """(role, weight, term) -> node -> the pods carrying it there, for every term of the pods present."""
        if self._with_terms is None:
            self._with_terms = {}
            gone = self._gone
            groups = self._groups
            for i, node in enumerate(self._nodes):  # one pass without building the list of every pod
                group = None if groups is None else groups.get(node.name)
                if group is not None and not group.inter_pod:
                    continue
                for pod in self._pods_on(node.name):
                    if pod.pod_affinity is not None and (not gone or (pod.key, i) not in gone):
                        self._tally_terms(i, pod, 1)
            for i, pod in self._added:
                if pod.pod_affinity is not None:
                    self._tally_terms(i, pod, 1)
        return self._with_terms

    def _entries(self, rules: PodAffinity) -> tuple[tuple[str, int, PodAffinityTerm], ...]:
        """The (role, weight, term) entries of a pod's rules, made once per rules object (pods of one template
        share theirs) and filed in :attr:`_term_index`."""
        found = self._entries_of.get(id(rules))
        if found is None or found[0] is not rules:
            entries = (
                *((ANTI, 0, t) for t in rules.required_anti),
                *((AFFINITY, HARD_POD_AFFINITY_WEIGHT, t) for t in rules.required),
                *((PREFERRED, w.weight, w.term) for w in rules.preferred),
                *((PREFERRED, -w.weight, w.term) for w in rules.preferred_anti),
            )
            found = self._entries_of[id(rules)] = (rules, entries)
        return found[1]

    def _tally_terms(self, i: int, pod: Pod, sign: int) -> None:
        rules = pod.pod_affinity
        assert rules is not None and self._with_terms is not None
        with_terms = self._with_terms
        for entry in self._entries(rules):
            counts = with_terms.get(entry)
            if counts is None:
                counts = with_terms[entry] = {}
                label = _indexed_label(entry[2])
                self._term_index.setdefault(label, []).append(entry)
            counts[i] = counts.get(i, 0) + sign
            if not counts[i]:
                del counts[i]

    def _candidates(self, pod: Pod) -> Iterable[tuple[str, int, PodAffinityTerm]]:
        """The entries of the present pods' terms that may match ``pod``: those filed under one of its labels
        and those filed under none."""
        index = self._term_index
        yield from index.get(None, ())
        for pair in pod.labels.items():
            yield from index.get(pair, ())

    def _count(self, i: int, pod: Pod, sign: int) -> None:
        self._verdicts.clear()
        if self._with_terms is not None and pod.pod_affinity is not None:
            self._tally_terms(i, pod, sign)
        index = self._matching_index
        for label in (None, *pod.labels.items()):
            for terms in index.get(label, ()):
                if all(t.selects(pod.namespace, pod.labels) for t in terms):
                    counts = self._matching[terms]
                    counts[i] = counts.get(i, 0) + sign
                    if not counts[i]:
                        del counts[i]

    def _matches(self, terms: Terms) -> dict[int, int]:
        """Node -> the pods present there that every one of ``terms`` matches."""
        found = self._matching.get(terms)
        if found is None:
            found = self._matching[terms] = {}
            label = _indexed_label(terms[0])
            self._matching_index.setdefault(label, []).append(terms)
            pods = self._present() if label is None else self._labelled(*label)
            selector = terms[0].selector if len(terms) == 1 else None
            if selector is not None and len(selector.match_labels) == 1 and not selector.match_expressions:
                namespaces = terms[0].namespaces  # the label is all it selects by: each such pod matches but for them
                for i, pod in pods:
                    if namespaces is None or pod.namespace in namespaces:
                        found[i] = found.get(i, 0) + 1
                return found
            for i, pod in pods:
                if all(t.selects(pod.namespace, pod.labels) for t in terms):
                    found[i] = found.get(i, 0) + 1
        return found

    def _domain(self, key: str) -> dict[str, list[int]]:
        """The nodes by their value of the label ``key`` (nodes without it left out)."""
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = {}
            for i, node in enumerate(self._nodes):
                value = node.labels.get(key)
                if value is not None:
                    found.setdefault(value, []).append(i)
        return found

    # --- the verdict ------------------------------------------------------------------------------

    def verdict(self, pod: Pod) -> Verdict | None:
        """The plugin's filter and raw score for ``pod`` (None: it has no effect on this pod), cached until a
        pod moves or a node changes. The pod's own terms, namespace and labels decide it."""
        rules = pod.pod_affinity
        if rules is None and not self._terms():
            return None
        key = self._key_of(pod)
        if key in self._verdicts:
            return self._verdicts[key]
        decided = self._decide(pod)
        if len(self._verdicts) >= 1024:
            self._verdicts.clear()
        found = self._verdicts[key] = decided if decided.matters else None
        return found

    def key(self, pod: Pod) -> tuple[object, ...]:
        """What a cache of results for pods like ``pod`` must tell apart: () when the plugin has no effect."""
        if self.verdict(pod) is None:
            return ()
        return self._key_of(pod)

    def _key_of(self, pod: Pod) -> tuple[object, ...]:
        """The pod's namespace, labels and terms; kept for the last pod asked (a query asks several times)."""
        last = self._last
        if last is not None and last[0] is pod:
            return last[1]
        key = (pod.namespace, tuple(sorted(pod.labels.items())), pod.pod_affinity)
        self._last = (pod, key)
        return key

    def _decide(self, pod: Pod) -> Verdict:
        namespace, labels, caveat = pod.namespace, pod.labels, ""
        selecting = []  # existing pods' terms matching this pod
        present = self._terms()
        for entry in self._candidates(pod):
            role, weight, term = entry
            counts = present[entry]
            if counts and term.unsure(namespace, labels):
                caveat = CAVEAT
            if counts and term.selects(namespace, labels):
                selecting.append((role, weight, term, counts))
        rules = pod.pod_affinity
        size = len(self._nodes)
        existing_out: set[int] = set()
        anti_out: set[int] = set()
        affinity_out: set[int] = set()
        raw: dict[int, int] = {}
        scored = False
        for role, weight, term, counts in selecting:
            if role == ANTI:
                existing_out.update(self._near(term.topology_key, counts))
            else:
                self._weighted(raw, term.topology_key, counts, weight)
                scored = True
        if rules is not None:
            preferred = ((1, w) for w in rules.preferred)
            preferred_anti = ((-1, w) for w in rules.preferred_anti)
            terms = (
                *rules.required,
                *rules.required_anti,
                *(w.term for w in (*rules.preferred, *rules.preferred_anti)),
            )
            if any(t.namespace_selector is not None for t in terms):
                caveat = CAVEAT
            for term in rules.required_anti:
                anti_out.update(self._near(term.topology_key, self._matches((term,))))
            if rules.required:
                affinity_out = set((~self._affinity_allowed(pod, rules.required)).nonzero()[0].tolist())
            for sign, w in (*preferred, *preferred_anti):
                self._weighted(raw, w.term.topology_key, self._matches((w.term,)), sign * w.weight)
                scored = True
        blocked: dict[str, int] = {}
        out: set[int] = set()
        for why, nodes in ((AFFINITY_OUT, affinity_out), (ANTI_OUT, anti_out), (EXISTING_OUT, existing_out)):
            first = len(nodes - out)  # each node counted once, by the first check it fails (as the filter runs them)
            if first:
                blocked[why] = first
            out |= nodes
        return Verdict(size, out, blocked, {i: v for i, v in raw.items() if v}, scored, caveat)

    def _near(self, key: str, counts: Mapping[int, int]) -> list[int]:
        """The nodes sharing the value of label ``key`` with a node of ``counts`` (nodes without it: none)."""
        domain = self._domain(key)
        values = {v for i in counts if (v := self._nodes[i].labels.get(key)) is not None}
        return [i for v in values for i in domain[v]]

    def _weighted(self, raw: dict[int, int], key: str, counts: Mapping[int, int], weight: int) -> None:
        """Adds ``weight`` per pod counted to every node sharing the topology value of the node it runs on."""
        domain = self._domain(key)
        for i, n in counts.items():
            value = self._nodes[i].labels.get(key)
            if value is not None:
                for j in domain[value]:
                    raw[j] = raw.get(j, 0) + weight * n

    def _affinity_allowed(self, pod: Pod, terms: Terms) -> Bools:
        """The nodes P's required affinity allows (see the module docstring)."""
        size = len(self._nodes)
        matched = self._matches(terms)
        with_labels, near = np.ones(size, np.bool_), np.ones(size, np.bool_)
        counted = False
        for t in terms:
            has = np.zeros(size, np.bool_)
            has[[i for nodes in self._domain(t.topology_key).values() for i in nodes]] = True
            with_labels &= has
            close = np.zeros(size, np.bool_)
            nodes = self._near(t.topology_key, matched)
            close[nodes] = True
            counted = counted or bool(nodes)
            near &= close
        if not counted and all(t.selects(pod.namespace, pod.labels) for t in terms):
            return with_labels  # the first of a group with affinity to itself
        allowed: Bools = near & with_labels
        return allowed


def _indexed_label(term: PodAffinityTerm) -> tuple[str, str] | None:
    """A label (key, value) every pod ``term`` matches carries (the first of its matchLabels), or None."""
    if term.selector is None or not term.selector.match_labels:
        return None
    return term.selector.match_labels[0]
