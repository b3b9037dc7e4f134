"""The serve mode's view of the cluster: nodes, pods, ReplicaSets and budgets kept current by watches.

A cycle reads :meth:`WatchCache.facts` from memory instead of listing 150,000 pods again: the list
happens once at start (then after a 410, and every ``timing.relist_seconds`` as the fallback for lost
events), then watch events keep each map current, and the pods grouped by node (with their request
sums) and by workload (:mod:`rebalancer.adapters.kube.pod_index`), so that a cycle does not regroup them. The
facts are refused (:class:`KubeUnavailable`, so no eviction follows) until every collection is listed,
and whenever one has had no watch open for ``max_stale`` seconds (its watcher cannot re-open it) or
its watcher has died. An open watch is fresh however quiet its collection: ReplicaSets and budgets may
not change for hours. The evictor still reads each pod afresh before evicting it, so a slightly late
cache can skip an eviction, never misdirect one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

import kubernetes.client
import msgspec

from rebalancer.adapters.kube import decode, protobuf_lists, wire
from rebalancer.adapters.kube.informer import STOP_WAIT_SECONDS, Clock, Index, Informer, WatchTiming
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.adapters.kube.pod_index import PodGroups
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Node, Pod, WorkloadRef

_W = TypeVar("_W")
_D = TypeVar("_D")
_Convert = Callable[[_W], tuple[Hashable, _D | None]]
RENEW_DECODER_AFTER = 200_000  # conversions: the decoder's sharing tables would otherwise grow forever
DEFAULT_TIMING = WatchTiming()


class _Owners(Mapping[tuple[str, str], tuple[str, str]]):
    """The live ReplicaSet -> controller map, as the pod decoder reads it."""

    def __init__(self, informer: Informer[wire.ReplicaSet, tuple[str, str]]) -> None:
        self._informer = informer

    def __getitem__(self, key: tuple[str, str]) -> tuple[str, str]:
        found = self._informer.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(())  # never iterated: the decoder only looks keys up

    def __len__(self) -> int:
        return 0


class _PodConverter:
    """wire pod -> ((namespace, name), Pod), remembering pods whose ReplicaSet was not known yet."""

    def __init__(self, annotations: frozenset[str], owners: _Owners) -> None:
        self._annotations, self._owners = annotations, owners
        self._decoder = decode.PodDecoder(annotations, owners)
        self._converted = 0
        self.unresolved: set[Hashable] = set()
        self.lock = threading.Lock()

    def __call__(self, w: wire.Pod) -> tuple[Hashable, Pod]:
        self._converted += 1
        if self._converted > RENEW_DECODER_AFTER:
            self._decoder = decode.PodDecoder(self._annotations, self._owners)
            self._converted = 0
        pod = self._decoder.pod(w)
        if pod.workload is not None and pod.workload.kind == "ReplicaSet":
            with self.lock:
                self.unresolved.add(pod.key)
        return pod.key, pod


class WatchCache:
    """Start with :meth:`start` (returns at once; the lists run on the watcher threads), read with
    :meth:`facts`, stop with :meth:`stop`. ``annotations``: the pod annotations to keep.
    ``on_pods_listed``: called on the pods' watcher thread after each listing of the pods."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        annotations: frozenset[str],
        *,
        timing: WatchTiming = DEFAULT_TIMING,
        max_stale: float = 120.0,
        clock: Clock = time.monotonic,
        on_pods_listed: Callable[[], None] | None = None,
    ) -> None:
        core = kubernetes.client.CoreV1Api(api_client)
        apps = kubernetes.client.AppsV1Api(api_client)
        policy = kubernetes.client.PolicyV1Api(api_client)
        host = str(api_client.configuration.host)
        self.annotations = annotations
        self._max_stale = max_stale
        protobuf = timing.encoding == "protobuf"

        def informer(
            call: ListCall[_W],
            decoder: msgspec.json.Decoder[_W],
            convert: _Convert[_W, _D],
            index: Index[_D] | None = None,
            on_listed: Callable[[], None] | None = None,
        ) -> Informer[_W, _D]:
            return Informer(
                call, decoder, convert, host=host, timing=timing, clock=clock, index=index, on_listed=on_listed
            )

        self._replica_sets: Informer[wire.ReplicaSet, tuple[str, str]] = informer(
            ListCall(
                "replicasets",
                "replicaset",
                apps.list_replica_set_for_all_namespaces,
                wire.REPLICA_SET_LIST,
                protobuf=protobuf_lists.replica_set_list if protobuf else None,
            ),
            wire.REPLICA_SET,
            _owner,
        )
        self._pod_converter = _PodConverter(annotations, _Owners(self._replica_sets))
        self._nodes: Informer[wire.Node, Node] = informer(
            ListCall(
                "nodes", "node", core.list_node, wire.NODE_LIST, protobuf=protobuf_lists.node_list if protobuf else None
            ),
            _NODE,
            lambda w: (w.metadata.name, decode.node(w)),
        )
        pod_wire = decode.pod_wire(annotations)  # the pod types the converter's decoder reads
        self._groups = PodGroups()
        self._pods: Informer[wire.Pod, Pod] = informer(
            ListCall(
                "pods",
                "pod",
                core.list_pod_for_all_namespaces,
                pod_wire.pod_list,
                protobuf=protobuf_lists.PodLists(pod_wire, pod_wire.pod_list) if protobuf else None,
            ),
            pod_wire.pod,
            self._pod_converter,
            self._groups,
            on_pods_listed,
        )
        self._budgets: Informer[wire.PodDisruptionBudget, DisruptionBudget] = informer(
            ListCall(
                "poddisruptionbudgets",
                "poddisruptionbudget",
                policy.list_pod_disruption_budget_for_all_namespaces,
                wire.PDB_LIST,
            ),
            _PDB,
            lambda w: ((w.metadata.namespace, w.metadata.name), decode.budget(w)),
        )
        self._all = (self._nodes, self._replica_sets, self._pods, self._budgets)

    def start(self) -> None:
        for informer in self._all:
            informer.start()

    def stop(self) -> None:
        """Stops every watcher, all at once: the wait for a stuck one (a listing waiting for its answer) is
        spent once, not once per collection."""
        for informer in self._all:
            informer.begin_stop()
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for informer in self._all:
            informer.join(max(0.0, deadline - time.monotonic()))

    def wait_synced(self, timeout: float) -> bool:
        """True once every collection has been listed (waits up to ``timeout`` seconds in all)."""
        deadline = time.monotonic() + timeout
        return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in self._all)

    def problem(self) -> str | None:
        """Why the cache cannot be trusted now, or None."""
        found = [p for i in self._all if (p := i.problem(self._max_stale)) is not None]
        return "; ".join(found) if found else None

    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes.items())

    def facts(self) -> ClusterFacts:
        """The cluster as the watches last saw it; :class:`KubeUnavailable` if it cannot be trusted."""
        problem = self.problem()
        if problem is not None:
            raise KubeUnavailable(f"watch cache: {problem}", reason="Stale")
        self._resolve_owners()
        pods, (by_node, by_workload) = self._pods.read(self._groups.view)
        return ClusterFacts(
            nodes=tuple(sorted(self._nodes.items(), key=lambda n: n.name)),
            pods=pods,
            budgets=tuple(self._budgets.items()),
            resource_version=self._pods.resource_version,
            by_node=MappingProxyType(by_node),
            by_workload=MappingProxyType(by_workload),
        )

    @property
    def relists(self) -> int:
        return sum(i.relists for i in self._all)

    def stats(self) -> list[tuple[str, int, int, float | None]]:
        """(collection, events applied, relists, seconds without an open watch) per watched collection."""
        return [(i.what, i.events, i.relists, i.seconds_since_contact()) for i in self._all]

    def _resolve_owners(self) -> None:
        """Pods that arrived before their ReplicaSet: resolve them to its controller now that it is known."""
        converter = self._pod_converter
        with converter.lock:
            waiting = list(converter.unresolved)
        for key in waiting:
            while not self._resolve_owner(key):
                pass  # an event changed the pod meanwhile: resolve what it brought

    def _resolve_owner(self, key: Hashable) -> bool:
        """Resolve one waiting pod; False when an event replaced it before the resolution could be stored."""
        pod = self._pods.get(key)
        workload = pod.workload if pod is not None else None
        if pod is not None and workload is not None and workload.kind == "ReplicaSet":
            owner = self._replica_sets.get((workload.namespace, workload.name))
            if owner is None:
                return True  # still unknown (or a ReplicaSet nothing controls): stays a ReplicaSet, and waiting
            kind, name = owner
            resolved = msgspec.structs.replace(
                pod, workload=WorkloadRef(kind=kind, namespace=workload.namespace, name=name)
            )
            if not self._pods.replace(key, pod, resolved):
                return False
        with self._pod_converter.lock:
            self._pod_converter.unresolved.discard(key)
        return True


def _owner(w: wire.ReplicaSet) -> tuple[Hashable, tuple[str, str] | None]:
    entry = decode.replica_set_owner(w)
    return (w.metadata.namespace, w.metadata.name), entry[1] if entry is not None else None


_NODE = msgspec.json.Decoder(wire.Node)
_PDB = msgspec.json.Decoder(wire.PodDisruptionBudget)
