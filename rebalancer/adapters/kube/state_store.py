"""ConfigMapStateStore: one text document in a ConfigMap, written with optimistic concurrency.

The limiter state shared by successive CronJob runs and concurrent instances lives under one key of a
ConfigMap in the service's namespace. :meth:`ConfigMapStateStore.load` returns the text with the
ConfigMap's ``resourceVersion``; :meth:`ConfigMapStateStore.save` writes only if nobody wrote since
(a create when there was no ConfigMap, else a PUT carrying that ``resourceVersion``), so of two
writers that read the same version exactly one succeeds and the other gets :class:`StateConflict`:
it must load again, decide again, and save again. The store never retries on its own.

Other keys of the ConfigMap and its labels and annotations, as last loaded, are written back
unchanged. :meth:`ConfigMapStateStore.check_create` asks, before anything is decided, whether a create
would be taken, without writing: the namespace exists, the create is authorized and admitted.
RBAC needed: get, create and update on configmaps in that namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kubernetes.client

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.calls import decode, describe, http_error, send
from rebalancer.domain.errors import KubeUnavailable, StateConflict

MANAGED_BY = {"app.kubernetes.io/managed-by": "rebalancer"}


@dataclass
class _Seen:
    """What the last load or save saw of the ConfigMap, to write back what is not ours."""

    resource_version: str
    other_data: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


class ConfigMapStateStore:
    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        namespace: str,
        name: str,
        key: str = "state.json",
        request_timeout: float = 30.0,
    ) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout
        self.namespace, self.name, self.key = namespace, name, key
        self._seen: _Seen | None = None

    @property
    def _what(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    @property
    def where(self) -> str:
        """Names the document's place in messages: ``configmap ns/name, key state.json``."""
        return f"{self._what}, key {self.key}"

    def load(self) -> tuple[str | None, str | None]:
        """(text, resourceVersion); (None, None) when there is no ConfigMap, (None, rv) when it lacks the key."""
        action = f"load state from {self._what}"
        reply = send(
            action, self._host, self._timeout, self._core.read_namespaced_config_map, self.name, self.namespace
        )
        if reply.code == 404:
            self._seen = None
            return None, None
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="configmaps", namespace=self.namespace)
        cm = self._remember(action, reply.body)
        return cm.data.get(self.key), cm.metadata.resource_version

    def save(self, text: str, resource_version: str | None) -> str:
        """Write ``text``; ``resource_version``: the version it was derived from (None: there was no ConfigMap).

        Returns the new resourceVersion. Raises :class:`StateConflict` when someone else wrote (or
        created, or deleted) the ConfigMap since that version.
        """
        seen = self._seen if self._seen is not None and self._seen.resource_version == resource_version else None
        body = self._body(text, resource_version, seen)
        if resource_version is None:
            action = f"create state {self._what}"
            reply = send(
                action, self._host, self._timeout, self._core.create_namespaced_config_map, self.namespace, body
            )
            verb = "create"
        else:
            action = f"update state {self._what} at resourceVersion {resource_version}"
            reply = send(
                action,
                self._host,
                self._timeout,
                self._core.replace_namespaced_config_map,
                self.name,
                self.namespace,
                body,
            )
            verb = "update"
        if reply.code == 409 or (reply.code == 404 and resource_version is not None):
            self._seen = None
            raise StateConflict(f"{describe(action, reply)} (another writer changed it: load again and retry)")
        if not reply.ok:
            raise http_error(action, reply, verb=verb, resource="configmaps", namespace=self.namespace)
        cm = self._remember(action, reply.body)
        if not cm.metadata.resource_version:
            raise KubeUnavailable(f"{action}: the answer carries no resourceVersion", reason="Malformed")
        return cm.metadata.resource_version

    def _body(self, text: str, resource_version: str | None, seen: _Seen | None) -> kubernetes.client.V1ConfigMap:
        meta = kubernetes.client.V1ObjectMeta(
            name=self.name,
            namespace=self.namespace,
            labels={**(seen.labels if seen else {}), **MANAGED_BY},
            annotations=(seen.annotations or None) if seen else None,
            resource_version=resource_version,
        )
        return kubernetes.client.V1ConfigMap(
            api_version="v1",
            kind="ConfigMap",
            metadata=meta,
            data={**(seen.other_data if seen else {}), self.key: text},
        )

    def check_create(self) -> None:
        """Create the ConfigMap with ``dryRun=All``: the API server authorizes, admits and validates it and
        stores nothing. An existing ConfigMap (409) passes. Raises :class:`KubeUnavailable` (404) naming the
        namespace when it does not exist (the NamespaceLifecycle admission refuses creates there),
        :class:`KubeForbidden` when the create is not authorized, the error for any other refusal."""
        action = f"create state {self._what} with dryRun=All"
        reply = send(
            action, self._host, self._timeout, self._core.create_namespaced_config_map, self.namespace,
            self._body("", None, None), dry_run="All",
        )  # fmt: skip
        if reply.ok or reply.code == 409:
            return
        details = reply.status().details
        if reply.code == 404 and details is not None and details.kind == "namespaces":
            raise KubeUnavailable(
                f"the state namespace {self.namespace} does not exist (create it, or set state.namespace): "
                + describe(action, reply),
                status=404,
                reason="NotFound",
            )
        raise http_error(action, reply, verb="create", resource="configmaps", namespace=self.namespace)

    def _remember(self, action: str, body: bytes) -> wire.ConfigMap:
        cm: wire.ConfigMap = decode(action, wire.CONFIG_MAP, body)
        others = {k: v for k, v in cm.data.items() if k != self.key}
        self._seen = _Seen(
            cm.metadata.resource_version, others, dict(cm.metadata.labels), dict(cm.metadata.annotations)
        )
        return cm
