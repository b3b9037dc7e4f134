"""What the commands print: a table for people, or the whole record as JSON or YAML for machines (pure).

A machine-readable record is one document: ``apiVersion`` and ``kind`` first (which schema it follows,
versioned the way Kubernetes objects are), then the data. Every field name is camelCase, as in the policy
file; keys of mappings that are data (node names, reasons, limiters) are kept as they are.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Mapping
from enum import Enum
from functools import cache
from typing import Any

import msgspec
import yaml

API_VERSION = "rebalancer/v1"
OUTPUTS = ("table", "json", "yaml")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """``-o/--output``, the same on every command that prints."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table for people; json or yaml: the whole record, its schema named by apiVersion and kind",
    )


def camel(name: str) -> str:
    """A Python field name as a document's key: ``usage_m`` -> ``usageM``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@cache
def _keys(kind: type[Any]) -> tuple[tuple[str, str], ...]:
    """A struct's or dataclass's field names, each with its key."""
    names: tuple[str, ...] = (
        kind.__struct_fields__ if issubclass(kind, msgspec.Struct) else tuple(f.name for f in dataclasses.fields(kind))
    )
    return tuple((name, camel(name)) for name in names)


def plain(value: Any) -> Any:
    """``value`` as plain data: dataclasses and msgspec structs become mappings with camelCase keys,
    tuples become lists, enums their values; mapping keys are data and stay as they are."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value.value if isinstance(value, Enum) else value
    if isinstance(value, msgspec.Struct) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return {key: plain(getattr(value, name)) for name, key in _keys(type(value))}
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value.value if isinstance(value, Enum) else value


def document(kind: str, record: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, **record}


def encode(output: str, kind: str, record: Mapping[str, Any]) -> bytes:
    """``record`` as a ``kind`` document in ``output`` (json or yaml). YAML is made from the JSON, so that
    both carry the same data (a NaN is null in each)."""
    data = msgspec.json.encode(document(kind, record))
    if output == "yaml":
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        text = yaml.dump(msgspec.json.decode(data), Dumper=dumper, sort_keys=False, allow_unicode=True)
        return text.encode()
    return msgspec.json.format(data, indent=2) + b"\n"


def write(output: str, kind: str, record: Callable[[], Mapping[str, Any]], table: Callable[[], str]) -> None:
    """Print the table, or the record as a ``kind`` document, on stdout."""
    if output == "table":
        sys.stdout.write(table())
    else:
        sys.stdout.buffer.write(encode(output, kind, record()))
