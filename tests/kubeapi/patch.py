"""PATCH of a pod or a node with a JSON merge patch (RFC 7386), as the API server applies it.

As k8s.io/apiserver's patch handler (endpoints/handlers/patch.go) and the pod registry strategy do it:

- the Content-Type names the patch type; a type the server does not know answers 415
  ``UnsupportedMediaType`` listing the accepted ones. Only ``application/merge-patch+json`` is modelled
  here (json-patch, strategic-merge-patch and apply-patch answer 415 with a message saying so);
- a missing object answers 404; the patched object keeps its uid and creationTimestamp, and ``status``
  is not changed through the main resource (the strategy's PrepareForUpdate keeps the old one);
- a merge patch replaces a list as a whole (``spec.taints`` of a node: the patch carries every taint);
- a ``metadata.resourceVersion`` in the patch is a precondition: another version answers 409
  ``Conflict``; a stored patch bumps the resourceVersion;
- validation answers 422 ``Invalid``: annotation keys must be qualified names; a new
  ``controller.kubernetes.io/pod-deletion-cost`` must be a 32-bit integer (``must be a 32bit
  integer``), unless the pod already had an invalid one (``AllowInvalidPodDeletionCost``); a pod's
  spec may not change here (the real server allows a few fields, image among them: not modelled);
  a node's taints (validation.ValidateNodeUpdate -> validateNodeTaints) must have a qualified key, a
  label-like value, an effect among NoSchedule, PreferNoSchedule and NoExecute, and be unique by key
  and effect;
- ``dryRun=All`` runs every check and stores nothing.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from tests.kubeapi import status
from tests.kubeapi.store import Store
from tests.kubeapi.writes import OPTIMISTIC_LOCK, dry_run

MERGE_PATCH = "application/merge-patch+json"
ACCEPTED = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
    "application/strategic-merge-patch+json",
)
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_COST = re.compile(r"-[0-9]+|0|[1-9][0-9]*")
MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def patch_pod(
    store: Store, namespace: str, name: str, body: bytes, content_type: str, query: dict[str, str]
) -> dict[str, Any]:
    return _patch(store, "Pod", "pods", namespace, name, body, content_type, query)


def patch_node(store: Store, name: str, body: bytes, content_type: str, query: dict[str, str]) -> dict[str, Any]:
    return _patch(store, "Node", "nodes", None, name, body, content_type, query)


def _patch(
    store: Store,
    kind: str,
    plural: str,
    namespace: str | None,
    name: str,
    body: bytes,
    content_type: str,
    query: dict[str, str],
) -> dict[str, Any]:
    media = content_type.split(";", maxsplit=1)[0].strip().lower()
    if media not in ACCEPTED:
        raise status.ApiError(
            status.status(415, "the body of the request was in an unknown format - accepted media types include: "
                          + ", ".join(ACCEPTED), "UnsupportedMediaType")
        )  # fmt: skip
    if media != MERGE_PATCH:
        raise status.ApiError(
            status.status(415, f"test API server: only {MERGE_PATCH} is modelled, not {media}", "UnsupportedMediaType")
        )
    try:
        patch = json.loads(body or b"null")
    except ValueError as exc:
        raise status.bad_request(f"error decoding patch: {exc}") from None
    if not isinstance(patch, dict):
        raise status.bad_request("error decoding patch: a merge patch of an object must be a JSON object")
    current = store.get(plural, name, namespace)
    if current is None:
        raise status.not_found(plural, "", name)
    meta_patch = patch.get("metadata") if isinstance(patch.get("metadata"), dict) else {}
    requested = meta_patch.get("resourceVersion")
    if requested is not None and str(requested) != current["metadata"]["resourceVersion"]:
        raise status.conflict(plural, "", name, OPTIMISTIC_LOCK)
    patched = merge(current, patch)
    meta = patched.setdefault("metadata", {})
    for kept in ("name", "namespace", "uid", "creationTimestamp"):
        if kept in current["metadata"]:
            meta[kept] = current["metadata"][kept]
    meta["resourceVersion"] = current["metadata"]["resourceVersion"]
    patched["status"] = current.get("status")
    if kind == "Pod":
        _validate(name, current, patched)
    else:
        _validate_node(name, patched)
    if dry_run(query):
        return {"kind": kind, "apiVersion": "v1", **patched}
    return {"kind": kind, "apiVersion": "v1", **store.update(patched, check_version=True)}


def _annotation_causes(kind: str, patched: dict[str, Any]) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    annotations = patched["metadata"].get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise status.bad_request(
            f'{kind} in version "v1" cannot be handled as a {kind}: metadata.annotations: expected strings'
        )
    size = 0
    for key, value in annotations.items():
        size += len(key) + len(value)
        if not _qualified(key):
            causes.append(("metadata.annotations", "FieldValueInvalid",
                           f'Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' '
                           "or '.', and must start and end with an alphanumeric character"))  # fmt: skip
    if size > MAX_ANNOTATIONS_BYTES:
        causes.append(
            ("metadata.annotations", "FieldValueTooLong", f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
        )
    return causes


def _validate(name: str, current: dict[str, Any], patched: dict[str, Any]) -> None:
    causes = _annotation_causes("Pod", patched)
    annotations = patched["metadata"].get("annotations") or {}
    cost = annotations.get(DELETION_COST)
    old = (current["metadata"].get("annotations") or {}).get(DELETION_COST)
    if cost is not None and not _valid_cost(cost) and (old is None or _valid_cost(old)):
        causes.append((f"metadata.annotations[{DELETION_COST}]", "FieldValueInvalid",
                       f'Invalid value: "{cost}": must be a 32bit integer'))  # fmt: skip
    if patched.get("spec") != current.get("spec"):
        causes.append(("spec", "FieldValueForbidden", "Forbidden: pod updates may not change fields other than "
                       "`spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                       "`spec.tolerations` (only additions to existing tolerations), "
                       "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))  # fmt: skip
    if causes:
        raise status.invalid("Pod", "", name, causes)


def _qualified(key: str) -> bool:
    prefix, _, part = key.rpartition("/")
    if "/" in prefix:
        return False
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(part) <= 63 and bool(_NAME_PART.fullmatch(part))


def _valid_cost(text: str) -> bool:
    return bool(_COST.fullmatch(text)) and -(2**31) <= int(text) <= 2**31 - 1


TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _validate_node(name: str, patched: dict[str, Any]) -> None:
    causes = _annotation_causes("Node", patched)
    taints = (patched.get("spec") or {}).get("taints") or []
    if not isinstance(taints, list) or not all(isinstance(t, dict) for t in taints):
        raise status.bad_request('Node in version "v1" cannot be handled as a Node: spec.taints: expected a list')
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints):
        path = f"spec.taints[{i}]"
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        if not _qualified(key):
            causes.append((f"{path}.key", "FieldValueInvalid", f'Invalid value: "{key}": name part must consist of '
                           "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                           "character"))  # fmt: skip
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            causes.append((f"{path}.value", "FieldValueInvalid", f'Invalid value: "{value}": a valid label must be '
                           "an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
                           "and end with an alphanumeric character"))  # fmt: skip
        if not effect:
            causes.append((f"{path}.effect", "FieldValueRequired", "Required value"))
        elif effect not in TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in TAINT_EFFECTS)
            causes.append((f"{path}.effect", "FieldValueNotSupported",
                           f'Unsupported value: "{effect}": supported values: {supported}'))  # fmt: skip
        if (key, effect) in seen:
            causes.append((path, "FieldValueDuplicate", f"Duplicate value: {json.dumps(taint, sort_keys=True)}: "
                           "taints must be unique by key and effect pair"))  # fmt: skip
        seen.add((key, effect))
    if causes:
        raise status.invalid("Node", "", name, causes)
