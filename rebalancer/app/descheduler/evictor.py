"""The DefaultEvictor's arguments as rebalancer protections (pure).

rebalancer's protections hold for the whole policy, the DefaultEvictor's for its profile: the profiles'
protections are combined so that none is lost (:mod:`rebalancer.app.descheduler.tighten`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebalancer.app.descheduler.notes import Note, Notes
from rebalancer.app.descheduler.source import BOTH_THRESHOLDS, SourceProblem, mapping

SYSTEM_CRITICAL = (
    "rebalancer never evicts system-critical pods (priority 2000000000 and above, system-node-critical, "
    "system-cluster-critical): not imported"
)
UNSUPPORTED_ARGS = {
    "evictFailedBarePods": "rebalancer never evicts a pod without a controller (nothing would recreate it), and "
    "failed pods are no load to move: not imported",
    "evictDaemonSetPods": "rebalancer never evicts DaemonSet pods (the replacement comes back on the same node): "
    "not imported",
    "minReplicas": "no minimum replica count; nearest: limits.workload.maxUnavailable (see the migration guide)",
    "minPodAge": "no minimum pod age; the bounce-back guard (efficiency:) keeps recently moved pods in place",
    "ignorePodsWithoutPDB": "no equivalent: pods without a PodDisruptionBudget stay evictable",
    "noEvictionPolicy": "no equivalent: rebalancer reads the opt-out annotation protections.optOutAnnotation",
    "nodeSelector": "see nodeSelector (the top-level one): rebalancer selects source nodes with limits.lists.nodes",
}


def protections_of(evictor: Mapping[str, Any], path: str, notes: Notes) -> dict[str, Any]:
    """The protections the DefaultEvictor's ``evictor`` arguments ask for (keys in rebalancer's YAML names)."""
    out: dict[str, Any] = {}
    for key, value in evictor.items():
        at = f"{path}.{key}"
        if key == "evictLocalStoragePods":
            out["evictLocalStoragePods"] = flag(value, at)
        elif key == "ignorePvcPods":
            out["evictPodsWithPVC"] = not flag(value, at)
        elif key == "evictSystemCriticalPods":
            if flag(value, at):
                notes.add(Note.unsupported(at, SYSTEM_CRITICAL))
        elif key == "nodeFit":
            notes.add(
                Note.differs(
                    at,
                    "always on in rebalancer: a pod moves only when some destination fits its requests, taints, "
                    "nodeSelector and required affinity" + ("" if flag(value, at) else " (nodeFit was false)"),
                )
            )
        elif key == "labelSelector":
            out["labelSelector"] = label_selector(value, at)
        elif key == "namespaces":
            out["evictableNamespaces"] = namespaces(value, at)
        elif key == "priorityThreshold":
            out.update(_priority(mapping(value, at), at, notes))
        elif key == "podProtections":
            out.update(_pod_protections(mapping(value, at), at, notes))
        elif key in UNSUPPORTED_ARGS:
            notes.add(Note.unsupported(at, UNSUPPORTED_ARGS[key]))
        else:
            notes.add(Note.unsupported(at, "unknown DefaultEvictor argument: not imported"))
    return out


POD_PROTECTIONS = {  # (list, protection) -> the protections: field and value it means
    ("defaultDisabled", "PodsWithLocalStorage"): ("evictLocalStoragePods", True),
    ("extraEnabled", "PodsWithPVC"): ("evictPodsWithPVC", False),
}


def _pod_protections(value: Mapping[str, Any], path: str, notes: Notes) -> dict[str, Any]:
    out = {}
    for key, names in value.items():
        for name in names if isinstance(names, list) else [names]:
            at = f"{path}.{key}.{name}"
            if (key, name) in POD_PROTECTIONS:
                field, setting = POD_PROTECTIONS[(key, name)]
                out[field] = setting
                notes.add(Note.differs(at, f"protections.{field}: {str(setting).lower()}"))
            elif key == "defaultDisabled" and name == "SystemCriticalPods":
                notes.add(Note.unsupported(at, SYSTEM_CRITICAL))
            elif key == "defaultDisabled" and name in ("FailedBarePods", "DaemonSetPods"):
                notes.add(Note.unsupported(at, "rebalancer always protects these pods: not imported"))
            else:
                notes.add(Note.unsupported(at, "no matching protection: not imported"))
    return out


def _priority(value: Mapping[str, Any], path: str, notes: Notes) -> dict[str, Any]:
    if "value" in value and "name" in value:
        raise SourceProblem(path, BOTH_THRESHOLDS)
    if "value" in value and isinstance(value["value"], int) and not isinstance(value["value"], bool):
        return {"priorityThreshold": value["value"]}
    if "name" in value and isinstance(value["name"], str):
        notes.add(
            Note.differs(
                f"{path}.name",
                f"protections.protectedPriorityClasses: [{value['name']}]: pods of that class stay protected, but a "
                "threshold by PriorityClass name cannot be resolved offline, so pods of higher classes (below the "
                "system-critical ones) become evictable: set protections.priorityThreshold to the class's value "
                f"(kubectl get priorityclass {value['name']} -o jsonpath='{{.value}}')",
            )
        )
        return {"protectedPriorityClasses": [value["name"]]}
    raise SourceProblem(path, "expected value: <integer> or name: <PriorityClass>")


def namespaces(value: object, path: str) -> dict[str, list[str]]:
    """``{include: [...]}`` or ``{exclude: [...]}``, as the descheduler and rebalancer both write it."""
    found = mapping(value, path)
    out = {}
    for key in ("include", "exclude"):
        names = found.get(key)
        if names:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise SourceProblem(f"{path}.{key}", "expected a list of namespace names")
            out[key] = list(names)
    extra = set(found) - {"include", "exclude"}
    if extra:
        raise SourceProblem(f"{path}.{sorted(extra)[0]}", "expected include or exclude")
    return out


def label_selector(value: object, path: str) -> dict[str, Any]:
    """A metav1.LabelSelector, kept as written (rebalancer reads the same matchLabels / matchExpressions)."""
    found = mapping(value, path)
    extra = set(found) - {"matchLabels", "matchExpressions"}
    if extra:
        raise SourceProblem(f"{path}.{sorted(extra)[0]}", "expected matchLabels or matchExpressions")
    return {k: v for k, v in found.items() if v}


def flag(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise SourceProblem(path, f"expected true or false, not {value!r}")
    return value
