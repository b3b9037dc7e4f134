"""The query of a list or watch, checked as the API server checks its ListOptions.

The rules of apimachinery's ``ValidateListOptions``, answered ``422 Invalid`` (kind ``ListOptions``, group
``meta.k8s.io``) with one cause per broken rule:

- a list: ``resourceVersionMatch`` needs ``resourceVersion``, is forbidden with ``continue``, and is
  ``Exact`` or ``NotOlderThan`` (``Exact`` not with resourceVersion "0"); ``sendInitialEvents`` is forbidden;
- a watch: ``sendInitialEvents`` needs ``resourceVersionMatch=NotOlderThan`` and the ``WatchList`` feature
  gate (off: "forbidden for watch unless the WatchList feature gate is enabled", as a server without the
  streaming watch-list refuses it); ``resourceVersionMatch`` needs ``sendInitialEvents``, is only
  ``NotOlderThan``, and is forbidden with ``continue``.

Booleans parse as Go's ``strconv.ParseBool`` (a bad one is a 400, as the query's conversion fails).
"""

from __future__ import annotations

from tests.kubeapi import status

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
Cause = tuple[str, str, str]  # (field, reason, message)


def flag(query: dict[str, str], name: str) -> bool | None:
    """A boolean query parameter; None when absent."""
    raw = query.get(name)
    if raw is None:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise status.bad_request(f'strconv.ParseBool: parsing "{raw}": invalid syntax')


def validate(query: dict[str, str], *, watch_list_enabled: bool) -> None:
    """422 Invalid when the options break a rule (see the module's text)."""
    watching = flag(query, "watch") is True
    causes = _watch(query, watch_list_enabled) if watching else _list(query)
    if causes:
        raise status.invalid("ListOptions", "meta.k8s.io", "", causes)


def _forbidden(field: str, detail: str) -> Cause:
    return (field, "FieldValueForbidden", f"Forbidden: {detail}")


def _not_supported(field: str, value: str, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{s}"' for s in supported)
    return (field, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {listed}')


def _list(query: dict[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    match, version = query.get("resourceVersionMatch", ""), query.get("resourceVersion", "")
    if match:
        if not version:
            causes.append(
                _forbidden(
                    "resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if query.get("continue"):
            causes.append(
                _forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in ("Exact", "NotOlderThan"):
            causes.append(_not_supported("resourceVersionMatch", match, ("Exact", "NotOlderThan", "")))
        if match == "Exact" and version == "0":
            causes.append(
                _forbidden("resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if flag(query, "sendInitialEvents") is not None:
        causes.append(_forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return causes


def _watch(query: dict[str, str], watch_list_enabled: bool) -> list[Cause]:
    causes: list[Cause] = []
    match = query.get("resourceVersionMatch", "")
    initial = flag(query, "sendInitialEvents")
    if initial is not None:
        if match != "NotOlderThan":
            causes.append(
                _forbidden(
                    "resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                )
            )
        if not watch_list_enabled:
            causes.append(
                _forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
            )
    if match:
        if initial is None:
            causes.append(
                _forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        if match != "NotOlderThan":
            causes.append(_not_supported("resourceVersionMatch", match, ("NotOlderThan",)))
        if query.get("continue"):
            causes.append(
                _forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
            )
    return causes
