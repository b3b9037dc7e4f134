"""List bodies decoded narrowly, and the error that names the object and field when one does not decode."""

from __future__ import annotations

import re
from typing import Any, Protocol, TypeVar

import msgspec

from rebalancer.domain.errors import KubeUnavailable

_T = TypeVar("_T")


class Named(Protocol):
    """What a list is of, for error messages (a :class:`~rebalancer.adapters.kube.lister.ListCall`)."""

    @property
    def what(self) -> str: ...  # "pods": the collection

    @property
    def kind(self) -> str: ...  # "pod": one object


def decode_body(named: Named, decoder: msgspec.json.Decoder[_T], raw: bytes | memoryview) -> _T:
    """A list body decoded narrowly; a body that does not decode is :func:`malformed`."""
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise malformed(named, raw, exc) from exc


_ANNOTATION_FIELD = "metadata.annotations."
_ITEM_PATH = re.compile(r"`\$\.items\[(\d+)\]\.?([^`]*)`")


def malformed(call: Named, raw: bytes | memoryview, exc: msgspec.DecodeError) -> KubeUnavailable:
    """A body that is not the expected JSON; names the object and field when it can."""
    text = str(exc)
    found = _ITEM_PATH.search(text)
    if found is None:
        return KubeUnavailable(f"list {call.what}: malformed response: {text}", reason="Malformed")
    index = int(found.group(1))
    name = _loose_name(raw, "items", index) or f"item {index}"
    return _naming(call, name, text, found)


_OBJECT_PATH = re.compile(r"`\$\.?([^`]*)`")


def malformed_object(call: Named, raw: bytes | memoryview, exc: msgspec.DecodeError) -> KubeUnavailable:
    """One object (a watch event's) that is not the expected JSON; names it and the field when it can."""
    text = str(exc)
    found = _OBJECT_PATH.search(text)
    if found is None:
        return KubeUnavailable(f"list {call.what}: malformed object: {text}", reason="Malformed")
    return _naming(call, _loose_name(raw) or "(unnamed)", text, found)


def _naming(call: Named, name: str, text: str, found: re.Match[str]) -> KubeUnavailable:
    field = found.group(found.lastindex or 0)
    if field.startswith(_ANNOTATION_FIELD):  # a struct field named by its key: shown as a map's key
        field = f"metadata.annotations[{field.removeprefix(_ANNOTATION_FIELD)}]"
    problem = re.sub(r"\s*-\s*at\s*$", "", text[: found.start()])
    return KubeUnavailable(f"{call.kind} {name}: {field}: {problem}", reason="Malformed")


def _loose_name(raw: bytes | memoryview, *path: str | int) -> str | None:
    """namespace/name of the object at ``path`` in ``raw``, read loosely (only on the error path)."""
    try:
        found: Any = msgspec.json.decode(raw)
        for step in path:
            found = found[step]
        meta = found["metadata"]
        return "/".join(p for p in (meta.get("namespace"), meta["name"]) if p)
    except (msgspec.DecodeError, LookupError, TypeError, AttributeError):
        return None
