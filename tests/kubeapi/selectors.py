"""``fieldSelector`` and ``labelSelector`` query parameters, parsed as the API server parses them.

Field selectors (k8s.io/apimachinery/pkg/fields): terms joined by ``,`` (AND), operators
``=``, ``==`` and ``!=``, values escaped with ``\\`` (``\\,``, ``\\=``, ``\\\\``). Label selectors
(k8s.io/apimachinery/pkg/labels): ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
``k notin (a,b)``. Errors are the server's 400 BadRequest answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.kubeapi import status
from tests.kubeapi.resources import ResourceType

Predicate = Callable[[dict[str, Any]], bool]


def _split_unescaped(raw: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in raw:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str, term: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise status.bad_request(f"invalid field selector: '{term}': invalid escape sequence")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise status.bad_request(f"invalid field selector: '{term}': unescaped '{ch}' in value")
        out.append(ch)
        i += 1
    return "".join(out)


def field_selector(raw: str, resource: ResourceType) -> Predicate:
    tests: list[Predicate] = []
    for term in _split_unescaped(raw, ","):
        if not term:
            continue
        for op in ("!=", "==", "="):
            index = term.find(op)
            if index > 0:
                label, value = term[:index], _unescape(term[index + len(op) :], term)
                break
        else:
            raise status.bad_request(f"invalid selector: '{raw}'; can't understand '{term}'")
        getter = resource.field_labels.get(label)
        if getter is None:
            raise status.bad_request(f"field label not supported: {label}")
        tests.append(_field_test(getter, value, negate=op == "!="))
    return lambda obj: all(t(obj) for t in tests)


def _field_test(getter: Callable[[dict[str, Any]], str], value: str, *, negate: bool) -> Predicate:
    return lambda obj: (getter(obj) == value) != negate


_SET = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(!=|==|=)\s*([A-Za-z0-9_.-]*))?\s*$")


def _label_terms(raw: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in raw:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


LabelTest = Callable[[Mapping[str, str]], bool]


def label_selector(raw: str) -> Predicate:
    tests: list[LabelTest] = []
    for term in _label_terms(raw):
        m = _SET.match(term)
        if m is None or (m.group(1) and (m.group(3) or m.group(5))):
            raise status.bad_request(f"unable to parse requirement: found '{term}', expected: identifier")
        tests.append(_label_test(*m.groups()))
    return lambda obj: all(t(obj.get("metadata", {}).get("labels") or {}) for t in tests)


def _label_test(
    bang: str, key: str, set_op: str | None, values: str | None, op: str | None, value: str | None
) -> LabelTest:
    if bang:
        return lambda labels: key not in labels
    if set_op:
        allowed = frozenset(v.strip() for v in (values or "").split(",") if v.strip())
        if set_op == "in":
            return lambda labels: labels.get(key) in allowed
        return lambda labels: labels.get(key) not in allowed
    if op == "!=":
        return lambda labels: labels.get(key) != value
    if op:
        return lambda labels: labels.get(key) == value
    return lambda labels: key in labels
