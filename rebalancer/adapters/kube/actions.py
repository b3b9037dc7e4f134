"""KubeActions: the write side of the Kubernetes adapter (eviction, the re-read before it, Events).

Only the Eviction API evicts (``create_namespaced_pod_eviction``, never a DELETE), so the API server
enforces every PodDisruptionBudget. The eviction carries the pod's uid as a delete precondition: if a
new pod took the name since the plan was made (a StatefulSet replica), the server answers 409 and the
new pod is left alone. Answers become the project's errors:

- 429 (budget exhausted, or API throttling): :class:`EvictionRejected`, ``retry_after`` from Retry-After;
- 404 about the pod: :class:`PodGone`;
- 409 (uid or resourceVersion precondition): :class:`EvictionConflict`;
- 500 "more than one PodDisruptionBudget": :class:`EvictionError` with reason ``MultipleBudgets``;
- 400, 422, and a 403 not from RBAC (an admission webhook, a budget's bad state): :class:`EvictionError`;
- 403 from RBAC: :class:`KubeForbidden` naming the verb and resource to grant;
- any other answer, no answer, a timeout: :class:`KubeUnavailable` (the outcome may be unknown).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Literal

import kubernetes.client

from rebalancer.adapters.kube import decode, wire
from rebalancer.adapters.kube.calls import Reply, describe, http_error, is_rbac_refusal, send
from rebalancer.adapters.kube.calls import decode as decode_body
from rebalancer.domain.errors import (
    EvictionConflict,
    EvictionError,
    EvictionRejected,
    KubeForbidden,
    KubeUnavailable,
    PodGone,
    RebalancerError,
)
from rebalancer.domain.model import Pod
from rebalancer.domain.redaction import redact

MULTIPLE_BUDGETS = "more than one PodDisruptionBudget"
EVENT_FIELD_LIMIT = 128  # reason, action, reportingInstance (API validation)
EVENT_NOTE_LIMIT = 1024  # message (bytes)


class KubeActions:
    """Evicts pods, re-reads one pod, records Events.

    ``request_timeout``: seconds per request. ``clock``: epoch seconds, for Event times and names.
    ``component``: the Events' reportingComponent and source; ``instance``: their reportingInstance
    (default: the host name, the pod's name in a cluster). ``last_event_error`` holds why the last
    :meth:`record_event` returned False.
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        request_timeout: float = 30.0,
        *,
        clock: Callable[[], float] = time.time,
        component: str = "rebalancer",
        instance: str | None = None,
    ) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout
        self._clock = clock
        self._component = component
        self._instance = (instance or socket.gethostname() or component)[:EVENT_FIELD_LIMIT]
        self._last_nanos = 0
        self.last_event_error: str | None = None

    # --- eviction ---------------------------------------------------------------------------

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None:
        """Evict one pod through the Eviction API; ``dry_run``: the server checks everything, changes nothing.

        ``uid`` (when not empty) is a precondition: a different pod of the same name is not evicted.
        ``annotations`` go on the Eviction object (reason, requester), visible to admission and audit.
        Returns when the server accepted the eviction; raises as the module documents otherwise.
        """
        body = kubernetes.client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=kubernetes.client.V1ObjectMeta(
                name=name, namespace=namespace, annotations=dict(annotations) or None
            ),
            delete_options=kubernetes.client.V1DeleteOptions(
                preconditions=kubernetes.client.V1Preconditions(uid=uid) if uid else None
            ),
        )
        action = f"evict pod {namespace}/{name}" + (" (server dry run)" if dry_run else "")
        reply = send(
            action,
            self._host,
            self._timeout,
            self._core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
            dry_run="All" if dry_run else None,
        )
        failure = _eviction_failure(action, reply, namespace)
        if failure is not None:
            raise failure

    # --- the re-check before an eviction ------------------------------------------------------

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        """The pod as it is now (None when it is gone), decoded as the snapshot decodes it.

        ``annotations``: the annotation keys to keep (``Protections.annotations_read()``). A pod owned by
        a ReplicaSet gets its workload resolved through that ReplicaSet (one more GET), as in the snapshot.
        """
        action = f"get pod {namespace}/{name}"
        reply = send(action, self._host, self._timeout, self._core.read_namespaced_pod, name, namespace)
        if reply.code == 404 and _names_pod(reply):
            return None
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="pods", namespace=namespace)
        pod: wire.Pod = decode_body(action, decode.pod_wire(annotations).pod, reply.body)
        owners = self._replica_set_owner(namespace, pod)
        return decode.PodDecoder(annotations, owners).pod(pod)

    def _replica_set_owner(self, namespace: str, pod: wire.Pod) -> dict[tuple[str, str], tuple[str, str]]:
        ref = next((r for r in pod.metadata.owner_references if r.controller), None)
        if ref is None or ref.kind != "ReplicaSet":
            return {}
        action = f"get replicaset {namespace}/{ref.name}"
        reply = send(action, self._host, self._timeout, self._apps.read_namespaced_replica_set, ref.name, namespace)
        if reply.code == 404:
            return {}  # the ReplicaSet is gone: the pod keeps it as its workload, as the snapshot would
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="replicasets", namespace=namespace, group="apps")
        entry = decode.replica_set_owner(decode_body(action, wire.REPLICA_SET, reply.body))
        return dict([entry]) if entry is not None else {}

    # --- events -------------------------------------------------------------------------------

    def record_event(
        self,
        pod: Pod,
        *,
        reason: str,
        message: str,
        action: str,
        type_: Literal["Normal", "Warning"] = "Normal",
        resource_version: str = "",
    ) -> bool:
        """Create a core/v1 Event on ``pod``, as the descheduler records its evictions.

        Never raises for a failed Event (an Event is a courtesy, never a reason to fail an eviction):
        returns False and leaves the cause in ``last_event_error`` for the caller to log.
        """
        involved = kubernetes.client.V1ObjectReference(
            api_version="v1", kind="Pod", namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
            resource_version=resource_version or None,
        )  # fmt: skip
        return self._record(f"pod {pod}", pod.namespace, involved, (reason, message, action, type_))

    def record_node_event(self, node: str, uid: str, *, reason: str, message: str, action: str) -> bool:
        """An Event on a node (cluster-scoped: the Event lives in ``default``, as the kubelet's do); never
        raises, as :meth:`record_event`."""
        involved = kubernetes.client.V1ObjectReference(api_version="v1", kind="Node", name=node, uid=uid or None)
        return self._record(f"node {node}", "default", involved, (reason, message, action, "Normal"))

    def _record(
        self, what: str, namespace: str, involved: kubernetes.client.V1ObjectReference, text: tuple[str, str, str, str]
    ) -> bool:
        """Create the Event (``text``: reason, message, action, type) in ``namespace``; False when it failed."""
        try:
            reply = send(
                f"record event on {what}",
                self._host,
                self._timeout,
                self._core.create_namespaced_event,
                namespace,
                self._event(namespace, involved, *text),
            )
        except (RebalancerError, ValueError, TypeError) as exc:  # ValueError: the client's argument validation
            self.last_event_error = redact(str(exc))
            return False
        if not reply.ok:
            error = http_error(f"record event on {what}", reply, verb="create", resource="events", namespace=namespace)
            self.last_event_error = str(error)
            return False
        self.last_event_error = None
        return True

    def _event(
        self,
        namespace: str,
        involved: kubernetes.client.V1ObjectReference,
        reason: str,
        message: str,
        action: str,
        type_: str,
    ) -> kubernetes.client.CoreV1Event:
        name = str(involved.name)
        now = self._clock()
        nanos = max(int(now * 1e9), self._last_nanos + 1)  # unique names even from a coarse or fake clock
        self._last_nanos = nanos
        at = datetime.fromtimestamp(now, UTC)
        if at.microsecond == 0:  # isoformat() would drop the fraction, and a MicroTime without one is a 400
            at = at.replace(microsecond=1)
        return kubernetes.client.CoreV1Event(
            metadata=kubernetes.client.V1ObjectMeta(name=f"{name[:236]}.{nanos:x}", namespace=namespace),
            involved_object=involved,
            reason=reason[:EVENT_FIELD_LIMIT],
            message=redact(message).encode()[:EVENT_NOTE_LIMIT].decode("utf-8", "ignore"),
            type=type_,
            action=action[:EVENT_FIELD_LIMIT],
            source=kubernetes.client.V1EventSource(component=self._component),
            reporting_component=self._component,
            reporting_instance=self._instance,
            first_timestamp=at.replace(microsecond=0),
            last_timestamp=at.replace(microsecond=0),
            event_time=at,
            count=1,
        )


def _names_pod(reply: Reply) -> bool:
    """A 404 about the pod itself (not a missing route: an API server without the subresource)."""
    details = reply.status().details
    return details is not None and details.kind in ("pods", "Pod")


def _eviction_failure(action: str, reply: Reply, namespace: str) -> RebalancerError | None:
    """The error an eviction answer means, or None when the pod is being evicted."""
    st = reply.status()
    code = reply.code
    if reply.ok:
        if st.kind != "Status" or st.status != "Failure":
            return None
        code = st.code or 500  # a Failure Status with a 2xx code: judge it by the code it carries
    text = describe(action, Reply(code, reply.body, reply.headers))
    causes = st.details.causes if st.details is not None else []
    if causes:
        text += " (" + "; ".join(c.message for c in causes if c.message) + ")"
    if code == 429:
        budget = any(c.reason == "DisruptionBudget" for c in causes)
        return EvictionRejected(text, retry_after=reply.retry_after(), budget=budget)
    if code == 404 and _names_pod(reply):
        return PodGone(text, status=404, reason=st.reason or "NotFound")
    if code == 409:
        return EvictionConflict(text, status=409, reason=st.reason or "Conflict")
    if code == 500 and MULTIPLE_BUDGETS in st.message:
        return EvictionError(text, status=500, reason="MultipleBudgets")
    if code == 403 and is_rbac_refusal(reply):
        return KubeForbidden.rbac("create", "pods/eviction", namespace, detail=st.message)
    if code in (400, 403, 422):
        return EvictionError(text, status=code, reason=st.reason or None)
    return KubeUnavailable(text, status=code, reason=st.reason or None)
