"""Create (POST), update (PUT) and delete of the ``writable`` types, with the registry's semantics.

As k8s.io/apiserver's generic registry store (registry/generic/registry/store.go) and rest.BeforeCreate /
BeforeUpdate do it:

- the object's namespace must be empty or the request's (400), its name the URL's on PUT (400);
- a create carrying ``metadata.resourceVersion`` is refused (400); an existing name answers 409
  ``AlreadyExists``;
- PUT with a stale ``metadata.resourceVersion`` answers 409 ``Conflict`` ("the object has been modified;
  please apply your changes to the latest version and try again"); without one it is an unconditional
  update where the type allows it (ConfigMaps, Events) and 422 ``must be specified for an update``
  where it does not (Leases); PUT of a missing object creates it where the type allows it (Leases,
  Events) and is 404 otherwise (ConfigMaps);
- ``dryRun=All`` runs every check and stores nothing;
- each type's own validation answers 422 ``Invalid`` (see :mod:`tests.kubeapi.validation`).
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.kubeapi import status, validation
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.store import Store, now_rfc3339

OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"


def dry_run(query: dict[str, str]) -> bool:
    value = query.get("dryRun")
    if value is None:
        return False
    if value != "All":
        raise status.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return True


def _body(rtype: ResourceType, raw: Any, namespace: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise status.bad_request(f"the body of the request was in an unknown format: expected a {rtype.kind}")
    obj: dict[str, Any] = raw
    api_version, kind = obj.get("apiVersion") or rtype.api_version, obj.get("kind") or rtype.kind
    if api_version != rtype.api_version:
        raise status.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({rtype.api_version})"
        )
    if kind != rtype.kind:
        raise status.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})")
    obj["apiVersion"], obj["kind"] = api_version, kind
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise status.bad_request("metadata: expected an object")
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise status.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace
    return obj


def create(store: Store, rtype: ResourceType, raw: Any, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
    """POST to the collection; returns the stored object (the answer is 201 with it)."""
    obj = _body(rtype, raw, namespace)
    meta = obj["metadata"]
    if meta.get("resourceVersion"):
        raise status.bad_request("resourceVersion should not be set on objects to be created")
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
    validation.validate(rtype, obj)
    if dry_run(query):
        if store.get(rtype.plural, meta["name"], namespace) is not None:
            raise status.already_exists(rtype.plural, rtype.group, meta["name"])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        return obj
    return store.create(obj)


def update(
    store: Store, rtype: ResourceType, raw: Any, namespace: str | None, name: str, query: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    """PUT to one object; returns (200, updated) or (201, created) where create-on-update applies."""
    obj = _body(rtype, raw, namespace)
    meta = obj["metadata"]
    if meta.get("name") != name:
        raise status.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
        )
    current = store.get(rtype.plural, name, namespace)
    requested = str(meta.get("resourceVersion") or "")
    if current is None:
        if not rtype.create_on_update:
            raise status.not_found(rtype.plural, rtype.group, name)
        meta.pop("resourceVersion", None)
        validation.validate(rtype, obj)
        return 201, obj if dry_run(query) else store.create(obj)
    if not requested and not rtype.unconditional_update:
        raise status.invalid(
            rtype.plural,
            rtype.group,
            name,
            [("metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0: must be specified for an update")],
        )
    if requested and requested != current["metadata"]["resourceVersion"]:
        raise status.conflict(rtype.plural, rtype.group, name, OPTIMISTIC_LOCK)
    validation.validate(rtype, obj)
    if dry_run(query):
        return 200, obj
    # check_version holds the comparison under the store's lock: two racing writers, one wins.
    return 200, store.update(obj, check_version=bool(requested))


def delete(
    store: Store, rtype: ResourceType, namespace: str | None, name: str, query: dict[str, str]
) -> dict[str, Any]:
    """DELETE of one object: the Status the registry answers for types that do not return the object."""
    current = store.get(rtype.plural, name, namespace)
    if current is None:
        raise status.not_found(rtype.plural, rtype.group, name)
    if not dry_run(query):
        store.delete(rtype.plural, name, namespace)
    details: dict[str, Any] = {"name": name, "kind": rtype.plural, "uid": current["metadata"].get("uid", "")}
    if rtype.group:
        details["group"] = rtype.group
    return {**status.success(200), "details": details}
