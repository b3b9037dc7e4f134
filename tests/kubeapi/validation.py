"""Per-type validation of written objects, as pkg/apis/*/validation does it (422 ``Invalid``).

Only the rules a client of this project can trip are modelled: names, ConfigMap keys and size,
the core/v1 Event rules (``legacyValidateEvent``: an Event with ``eventTime`` needs
``reportingComponent``, ``reportingInstance``, ``action`` and ``reason``, within their length
limits), timestamps that must parse (a 400 from the decoder otherwise; a Lease's MicroTime fields only with
exactly six fractional digits, as the API server's ``RFC3339Micro`` layout demands), and Lease durations.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tests.kubeapi import status
from tests.kubeapi.resources import ResourceType

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
MAX_CONFIGMAP_BYTES = 1024 * 1024  # api.MaxSecretSize, also the ConfigMap limit
EVENT_FIELD_LIMIT = 128  # ReportingInstanceLengthLimit, ActionLengthLimit, ReasonLengthLimit
EVENT_NOTE_LIMIT = 1024  # NoteLengthLimit

Cause = tuple[str, str, str]  # (field, reason, message)


def _required(path: str, detail: str = "") -> Cause:
    return (path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def _invalid(path: str, value: Any, detail: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return (path, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def _too_long(path: str, limit: int) -> Cause:
    return (path, "FieldValueTooLong", f"Too long: may not be more than {limit} bytes")


def validate(rtype: ResourceType, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    name = meta.get("name") or ""
    causes: list[Cause] = []
    if not name:
        causes.append(_required("metadata.name", "name or generateName is required"))
    elif len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        causes.append(
            _invalid("metadata.name", name, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                     "characters, '-' or '.', and must start and end with an alphanumeric character")
        )  # fmt: skip
    checks = {"configmaps": _configmap, "events": _event, "leases": _lease}.get(rtype.plural)
    if checks is not None:
        causes.extend(checks(obj))
    if causes:
        raise status.invalid(rtype.kind, rtype.group, name, causes)


def _configmap(obj: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    size = 0
    for section in ("data", "binaryData"):
        values = obj.get(section) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise status.bad_request(f'ConfigMap in version "v1" cannot be handled: {section}: expected strings')
        for key, value in values.items():
            if len(key) > 253 or not _CONFIG_KEY.fullmatch(key):
                causes.append(_invalid(f"{section}[{key}]", key, "a valid config key must consist of alphanumeric "
                                       "characters, '-', '_' or '.'"))  # fmt: skip
            size += len(key) + len(value.encode())
    both = set(obj.get("data") or {}) & set(obj.get("binaryData") or {})
    causes.extend(_invalid(f"data[{k}]", k, "duplicate of key present in binaryData") for k in sorted(both))
    if size > MAX_CONFIGMAP_BYTES:
        causes.append(("[]", "FieldValueTooLong", f"Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes"))
    return causes


# metav1.MicroTime is decoded with the layout RFC3339Micro: exactly six fractional digits, then Z or an offset.
_MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"


def _timestamp(obj: dict[str, Any], key: str, kind: str = "Event", *, micro: bool = False) -> bool:
    """Whether ``key`` holds a time (decoding fails with 400 if it is not one).

    ``micro``: a MicroTime, which the API server parses with the fixed layout ``RFC3339Micro`` (so
    ``2024-05-01T10:40:00Z`` or a millisecond fraction is refused, unlike a metav1.Time).
    """
    value = obj.get(key)
    if value in (None, ""):
        return False
    if micro and not (isinstance(value, str) and _MICRO_TIME.fullmatch(value)):
        raise status.bad_request(
            f'{kind} in version "v1" cannot be handled as a {kind}: {key}: parsing time "{value}" as "{RFC3339_MICRO}"'
        )
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise status.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: {key}: parsing time "{value}"')
    return True


def _event(obj: dict[str, Any]) -> list[Cause]:
    namespace = obj["metadata"].get("namespace") or ""
    involved = obj.get("involvedObject") or {}
    involved_ns = involved.get("namespace") or ""
    for key in ("firstTimestamp", "lastTimestamp"):
        _timestamp(obj, key)
    causes: list[Cause] = []
    if not _timestamp(obj, "eventTime"):
        if (involved_ns and involved_ns != namespace) or (not involved_ns and namespace not in ("", "default")):
            causes.append(_invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
        return causes
    if not involved_ns and namespace not in ("default", "kube-system"):
        causes.append(_invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    component = obj.get("reportingComponent") or ""
    if not component:
        causes.append(_required("reportingComponent"))
    elif len(component) > 63 or not _QUALIFIED.fullmatch(component.rsplit("/", 1)[-1]):
        causes.append(_invalid("reportingComponent", component, "must be a qualified name"))
    for key in ("reportingInstance", "action", "reason"):
        value = obj.get(key) or ""
        if not value:
            causes.append(_required(key))
        elif len(value) > EVENT_FIELD_LIMIT:
            causes.append(_too_long(key, EVENT_FIELD_LIMIT))
    if len(obj.get("message") or "") > EVENT_NOTE_LIMIT:
        causes.append(_too_long("message", EVENT_NOTE_LIMIT))
    return causes


def _lease(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        causes.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        causes.append(_invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    for key in ("acquireTime", "renewTime"):
        _timestamp(spec, key, "Lease", micro=True)
    return causes
