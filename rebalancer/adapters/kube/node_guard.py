"""NodeMarker: reads a node's taints and landing-guard annotation, and writes them back (the landing guard).

A node's ``spec.taints`` is a list the API server replaces as a whole (core/v1 declares no patch merge
key for it, and a JSON merge patch, RFC 7386, replaces any list). So the write is a read-modify-write:
the node is read (GET), the guard's change is made on the taints read
(``rebalancer.actions.guard.decide.apply_change``: every other taint kept as it is, ``timeAdded`` included),
and the merge patch carries ``metadata.resourceVersion`` as a precondition. If anything changed the
node in between (a kubelet status update, another controller's taint), the API server answers 409 and
nothing is written; the caller reads again and redoes the change on the fresh node, so a taint added by
someone else in between is never lost. Chosen over a JSON patch (RFC 6902) with a ``test`` of the
taints: that guards the same thing (the list read is the list replaced), but the merge patch with a
resourceVersion is the optimistic concurrency every Kubernetes client uses, and the one the pod
annotator already speaks.

Answers: 404 -> None (the node is gone); 409 -> :class:`PatchError` status 409; 403 from RBAC ->
:class:`KubeForbidden` naming ``patch nodes`` (``get nodes`` for the read); 400, 415, 422 ->
:class:`PatchError`; anything else, no answer, a timeout -> :class:`KubeUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kubernetes.client
import msgspec

from rebalancer.adapters.kube.calls import MERGE_PATCH, decode, http_error, patch_refused, send
from rebalancer.domain.guard_marks import GUARD_KEY, NodeEdit
from rebalancer.domain.model import Taint


class _Meta(msgspec.Struct, rename="camel", gc=False):
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] = {}


class _Spec(msgspec.Struct, gc=False):
    taints: list[dict[str, Any]] = []  # kept whole: a merge patch writes every field of every taint back


class _Node(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


_NODE = msgspec.json.Decoder(type=_Node)


@dataclass(frozen=True, slots=True)
class LiveNode:
    """A node's taints and guard annotation as the API server has them now."""

    name: str
    uid: str
    resource_version: str
    raw_taints: tuple[dict[str, Any], ...]
    annotation: str | None

    @property
    def taints(self) -> tuple[Taint, ...]:
        return tuple(_taint(t) for t in self.raw_taints)

    def body(self, edit: NodeEdit) -> dict[str, Any]:
        """The merge patch that turns this node into ``edit``: every taint written, the ones kept exactly as
        read (``timeAdded`` and any field rebalancer does not model), at this resourceVersion."""
        unused = list(self.raw_taints)
        taints = []
        for taint in edit.taints:
            same = next((raw for raw in unused if _taint(raw) == taint), None)
            if same is not None:
                unused.remove(same)
                taints.append(same)
            else:
                taints.append({"key": taint.key, "value": taint.value, "effect": taint.effect} if taint.value
                              else {"key": taint.key, "effect": taint.effect})  # fmt: skip
        return {
            "metadata": {"resourceVersion": self.resource_version, "annotations": {GUARD_KEY: edit.annotation}},
            "spec": {"taints": taints},
        }


def _taint(raw: dict[str, Any]) -> Taint:
    return Taint(key=str(raw.get("key", "")), value=str(raw.get("value", "")), effect=str(raw.get("effect", "")))


class NodeMarker:
    def __init__(self, api_client: kubernetes.client.ApiClient, request_timeout: float = 30.0) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout

    def read(self, name: str) -> LiveNode | None:
        """The node's taints, guard annotation and resourceVersion now; None when it is gone."""
        action = f"get node {name}"
        reply = send(action, self._host, self._timeout, self._core.read_node, name)
        if reply.code == 404:
            return None
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="nodes", namespace=None)
        return _live(name, decode(action, _NODE, reply.body))

    def write(self, node: LiveNode, edit: NodeEdit, *, dry_run: bool = False) -> LiveNode | None:
        """Patch ``node`` (as read) into ``edit``; the node as stored (``dry_run``: as it would be, nothing
        stored), None when it is gone."""
        action = f"patch node {node.name}" + (" (server dry run)" if dry_run else "")
        reply = send(
            action, self._host, self._timeout, self._core.patch_node, node.name, node.body(edit),
            dry_run="All" if dry_run else None, _content_type=MERGE_PATCH,
        )  # fmt: skip
        if reply.ok:
            return _live(node.name, decode(action, _NODE, reply.body))
        if reply.code == 404:
            return None
        raise patch_refused(action, reply, "nodes", None)


def _live(name: str, node: _Node) -> LiveNode:
    return LiveNode(
        name,
        node.metadata.uid,
        node.metadata.resource_version,
        tuple(node.spec.taints),
        node.metadata.annotations.get(GUARD_KEY),
    )
