"""Protections from several places of a descheduler policy, combined so that none is lost (pure).

The descheduler filters a pod through its strategy's ``evictableNamespaces`` and its profile's DefaultEvictor
both; rebalancer's protections hold for the whole policy. So two sets of protections combine into one that
protects every pod either protects: namespace excludes are joined, include lists intersected (less the
excluded namespaces), flags that allow an eviction stay on only when both allow it, the lower priority
threshold wins, label selectors must both match, protected PriorityClasses are joined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rebalancer.app.descheduler.source import SourceProblem


def tightened(protections: Mapping[str, Any], more: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``protections`` with ``more`` (found at ``path``) added, every pod protected by either still protected."""
    out = dict(protections)
    for key, value in more.items():
        out[key] = value if key not in out else _COMBINE[key](out[key], value, f"{path}: {key}")
    return out


def _namespaces(a: Mapping[str, list[str]], b: Mapping[str, list[str]], path: str) -> dict[str, list[str]]:
    exclude = list(dict.fromkeys([*a.get("exclude", []), *b.get("exclude", [])]))
    includes = [set(f["include"]) for f in (a, b) if f.get("include")]
    if not includes:
        return {"exclude": exclude}
    first = a.get("include") or b.get("include") or []
    include = [n for n in first if all(n in i for i in includes) and n not in exclude]
    if not include:
        raise SourceProblem(path, "the namespace filters leave no namespace evictable: the include lists "
                            f"{sorted(sorted(i) for i in includes)} less the excluded {exclude}")  # fmt: skip
    return {"include": include}


def _selectors(a: Mapping[str, Any], b: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A pod must match both: the labels of both, a label the two want differently as two In expressions."""
    labels = dict(a.get("matchLabels") or {})
    expressions = [*(a.get("matchExpressions") or []), *(b.get("matchExpressions") or [])]
    for key, value in (b.get("matchLabels") or {}).items():
        if labels.setdefault(key, value) != value:
            expressions.append({"key": key, "operator": "In", "values": [value]})  # matches no pod, as intended
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = labels
    if expressions:
        out["matchExpressions"] = expressions
    return out


_COMBINE: dict[str, Callable[[Any, Any, str], Any]] = {
    "evictableNamespaces": _namespaces,
    "labelSelector": _selectors,
    "evictLocalStoragePods": lambda a, b, _: a and b,
    "evictPodsWithPVC": lambda a, b, _: a and b,
    "priorityThreshold": lambda a, b, _: min(a, b),
    "protectedPriorityClasses": lambda a, b, _: list(dict.fromkeys([*a, *b])),
}
