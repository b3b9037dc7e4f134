"""PodAnnotator: reads a pod's metadata and sets its annotations with a JSON merge patch (deletion-cost steering).

Only ``metadata.annotations`` is written, as an RFC 7386 merge patch (``application/merge-patch+json``):
the keys given are set (None removes one), every other field and annotation stays as it is. The patch
carries the ``metadata.resourceVersion`` that was read, so the API server applies it only to that version
of the pod (409 otherwise: someone changed the pod, or another pod took its name, in between). Answers:

- 404: :class:`PatchError` status 404 (the pod is gone);
- 409: :class:`PatchError` status 409 (modified since read);
- 400, 415, 422 (the server's validation, e.g. an invalid pod-deletion-cost): :class:`PatchError`;
- 403 from RBAC: :class:`KubeForbidden` naming ``patch pods``;
- anything else, no answer, a timeout: :class:`KubeUnavailable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import kubernetes.client
import msgspec

from rebalancer.adapters.kube.calls import MERGE_PATCH, decode, http_error, patch_refused, send


class _Meta(msgspec.Struct, rename="camel", gc=False):
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] = {}


class _PodMeta(msgspec.Struct, gc=False):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_POD_META = msgspec.json.Decoder(type=_PodMeta)


@dataclass(frozen=True, slots=True)
class LivePod:
    """A pod's metadata as the API server has it now."""

    uid: str
    resource_version: str
    annotations: Mapping[str, str]


class PodAnnotator:
    def __init__(self, api_client: kubernetes.client.ApiClient, request_timeout: float = 30.0) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout

    def read(self, namespace: str, name: str) -> LivePod | None:
        """The pod's uid, resourceVersion and annotations now; None when it is gone."""
        action = f"get pod {namespace}/{name}"
        reply = send(action, self._host, self._timeout, self._core.read_namespaced_pod, name, namespace)
        if reply.code == 404:
            return None
        if not reply.ok:
            raise http_error(action, reply, verb="get", resource="pods", namespace=namespace)
        meta = decode(action, _POD_META, reply.body).metadata
        return LivePod(meta.uid, meta.resource_version, dict(meta.annotations))

    def set_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str,
        dry_run: bool = False,
    ) -> LivePod:
        """Merge-patch ``annotations`` onto the pod at ``resource_version``; returns the pod as stored (with
        ``dry_run``: as it would be, nothing stored)."""
        body = {"metadata": {"resourceVersion": resource_version, "annotations": dict(annotations)}}
        action = f"patch pod {namespace}/{name}" + (" (server dry run)" if dry_run else "")
        reply = send(
            action,
            self._host,
            self._timeout,
            self._core.patch_namespaced_pod,
            name,
            namespace,
            body,
            dry_run="All" if dry_run else None,
            _content_type=MERGE_PATCH,
        )
        if reply.ok:
            meta = decode(action, _POD_META, reply.body).metadata
            return LivePod(meta.uid, meta.resource_version, dict(meta.annotations))
        raise patch_refused(action, reply, "pods", namespace)
