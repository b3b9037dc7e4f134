"""KubeSource: reads nodes, pods, ReplicaSets and PodDisruptionBudgets into ClusterFacts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import kubernetes.client
import msgspec

from rebalancer.adapters.kube import decode, protobuf_lists, wire
from rebalancer.adapters.kube.lister import ListCall, Listed
from rebalancer.adapters.kube.watch_list import ListMode, read_all
from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Node

_W = TypeVar("_W")
_D = TypeVar("_D")


@dataclass(frozen=True, slots=True)
class ReadStats:
    """How the last read went, per collection: pages fetched, restarts after a 410, and how it was read
    (``watchList``: one watch-list stream; ``paged``: LIST pages), and how the server encoded it
    (``protobuf`` or ``json``)."""

    pages: dict[str, int] = field(default_factory=dict)
    relists: dict[str, int] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    encodings: dict[str, str] = field(default_factory=dict)


def escape_field_value(value: str) -> str:
    r"""Escape a field selector value as the API server expects (``\``, ``,`` and ``=``)."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


class KubeSource:
    """The Kubernetes facts of one snapshot, listed page by page and decoded narrowly.

    ``annotations``: the pod annotation keys to keep (``Protections.annotations_read()``).
    ``request_timeout``: seconds per HTTP request (one page), not per whole list.
    ``list_mode``: how a whole collection is read (``kubernetes.listMode``): ``cached`` in pages from the API
    server's watch cache (any version it holds); ``paged`` in consistent pages; ``watchList`` by one
    watch-list; ``auto`` by watch-list, from the watch cache when the server refuses it. Reads of one
    node's pods (field selected) are always consistent pages.
    The caller pauses the garbage collector around a read (:mod:`rebalancer.app.collector`): it creates
    millions of objects and no reference cycles.
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        annotations: frozenset[str],
        page_size: int = 500,
        request_timeout: float = 30.0,
        list_mode: ListMode = "cached",
        encoding: protobuf_lists.Encoding = "protobuf",
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._policy = kubernetes.client.PolicyV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._annotations = annotations
        self._page_size = page_size
        self._timeout = request_timeout
        self._mode: ListMode = list_mode
        self._protobuf = encoding == "protobuf"
        self.last_stats = ReadStats()

    def read_facts(self, node_name: str | None = None) -> ClusterFacts:
        """Nodes, pods and budgets; with ``node_name`` only that node and the pods bound to it."""
        return self.read_nodes_facts(None if node_name is None else (node_name,))

    def read_nodes_facts(self, node_names: Sequence[str] | None) -> ClusterFacts:
        """Nodes, pods and budgets; with ``node_names`` only those nodes and the pods bound to them
        (one field-selected list each: field selectors cannot OR). ReplicaSets and budgets are listed
        once whatever the number of nodes."""
        self.last_stats = ReadStats()
        if node_names is None:
            nodes = list(self._list(self._node_call(None), _nodes).items)
        else:
            nodes = [n for name in node_names for n in self._list(self._node_call(name), _nodes).items]
        owners = self._list(
            ListCall(
                "replicasets",
                "replicaset",
                self._apps.list_replica_set_for_all_namespaces,
                wire.REPLICA_SET_LIST,
                protobuf=protobuf_lists.replica_set_list if self._protobuf else None,
            ),
            _owners,
        )
        pod_decoder = decode.PodDecoder(self._annotations, dict(owners.items))
        del owners
        with pod_decoder.converting_list() as pod_list:
            pod_lists = [
                self._list(self._pod_call(name, pod_list, pod_decoder.wire), decode.converted)
                for name in (node_names if node_names is not None else (None,))
            ]
        # Its tables (a ReplicaSet map of ~40,000 tuples here) go before a paused collector is back.
        del pod_decoder, pod_list
        budgets = self._list(
            ListCall(
                "poddisruptionbudgets",
                "poddisruptionbudget",
                self._policy.list_pod_disruption_budget_for_all_namespaces,
                wire.PDB_LIST,
            ),
            _budgets,
        )
        return ClusterFacts(
            nodes=tuple(nodes),
            pods=tuple(p for listed in pod_lists for p in listed.items),
            budgets=tuple(budgets.items),
            resource_version=pod_lists[0].resource_version if pod_lists else "",
        )

    def read_nodes(self) -> tuple[Node, ...]:
        """The nodes alone (cheap: a few thousand small objects), for example to vet an alert's node."""
        return tuple(self._list(self._node_call(None), _nodes).items)

    def _node_call(self, name: str | None) -> ListCall[wire.Node]:
        selector = None if name is None else f"metadata.name={escape_field_value(name)}"
        protobuf = protobuf_lists.node_list if self._protobuf else None
        return ListCall("nodes", "node", self._core.list_node, wire.NODE_LIST, selector, protobuf=protobuf)

    def _pod_call(
        self, node: str | None, decoder: msgspec.json.Decoder[wire.PodList], pod_wire: wire.PodWire
    ) -> ListCall[wire.Pod]:
        selector = None if node is None else f"spec.nodeName={escape_field_value(node)}"
        protobuf = protobuf_lists.PodLists(pod_wire, decoder) if self._protobuf else None
        return ListCall("pods", "pod", self._core.list_pod_for_all_namespaces, decoder, selector, protobuf=protobuf)

    def _list(
        self,
        call: ListCall[_W],
        convert: Callable[[Sequence[_W]], Iterable[_D]],
    ) -> Listed[_D]:
        mode: ListMode = self._mode if call.field_selector is None else "paged"
        listed = read_all(call, convert, mode=mode, page_size=self._page_size, timeout=self._timeout, host=self._host)
        self.last_stats.pages[call.what] = listed.pages
        self.last_stats.relists[call.what] = listed.relists
        self.last_stats.modes[call.what] = listed.mode
        self.last_stats.encodings[call.what] = listed.encoding
        return listed


def _nodes(items: Sequence[wire.Node]) -> list[Node]:
    return [decode.node(n) for n in items]


def _owners(items: Sequence[wire.ReplicaSet]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    return [entry for rs in items if (entry := decode.replica_set_owner(rs)) is not None]


def _budgets(items: Sequence[wire.PodDisruptionBudget]) -> list[DisruptionBudget]:
    return [decode.budget(b) for b in items]
