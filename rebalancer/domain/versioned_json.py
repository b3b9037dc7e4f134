"""Strict decoding of the versioned JSON documents kept in ConfigMaps (limiter state, efficiency records):
the schema name and version are checked first, so a foreign or newer document gets a message that says so
rather than a field error."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from rebalancer.domain.errors import DocumentCorrupt

T = TypeVar("T")


class _Header(msgspec.Struct, frozen=True):
    schema: str
    version: int


def decode_versioned(
    text: str | bytes, document: type[T], schema: str, version: int, corrupt: type[DocumentCorrupt], what: str
) -> T:
    """``text`` as ``document``; raises ``corrupt(message)`` for anything else (``what`` names the kind), with
    ``newer`` set for a later version of the schema."""
    try:
        header = msgspec.json.decode(text, type=_Header)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: first
        raise corrupt(f"not {what} (need schema {schema!r} and version): {exc}") from exc
    except msgspec.DecodeError as exc:
        raise corrupt(f"not JSON: {exc}") from exc
    if header.schema != schema:
        raise corrupt(f"foreign schema {header.schema!r}, expected {schema!r}")
    if header.version > version:
        raise corrupt(
            f"schema version {header.version}, and this build reads version {version}: run the newer build, or "
            "delete the ConfigMap to start afresh",
            newer=True,
        )
    if header.version != version:
        raise corrupt(f"schema version {header.version} is not supported (this build reads {version})")
    try:
        return msgspec.json.decode(text, type=document)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise corrupt(str(exc)) from exc
