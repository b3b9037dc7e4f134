"""The disruption controller's arithmetic (pkg/controller/disruption/disruption.go), run on demand.

For one PodDisruptionBudget, from the pods its selector matches in its namespace:

- ``currentHealthy``: matched pods that are Ready, not terminating, and not in ``disruptedPods``
  (an eviction approved less than 2 minutes ago whose pod is not yet terminating);
- ``expectedPods`` and ``desiredHealthy``: ``minAvailable`` as an integer: all matched pods, and that
  integer; ``minAvailable`` as a percentage or ``maxUnavailable``: the sum of the ``replicas`` of the
  controllers of the matched pods (ReplicaSet, or the Deployment owning it; StatefulSet), pods without
  a controller left out, with ``desiredHealthy = ceil(minAvailable% x expected)`` or
  ``expected - maxUnavailable`` (percentages rounded up), never below 0;
- ``disruptionsAllowed = currentHealthy - desiredHealthy`` when positive and ``expectedPods > 0``,
  else 0; ``observedGeneration = metadata.generation``; the ``DisruptionAllowed`` condition.

A pod whose controller cannot be found, or a malformed percentage, makes the controller "fail safe":
``disruptionsAllowed`` 0 and the condition ``SyncFailed``, as the real one does. Deviation: owner
references are resolved by name (the builders do not link uids); a ReplicationController or a custom
controller with a scale subresource is not found, so such budgets fail safe.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi.store import Store

DELETION_TIMEOUT = 120.0  # seconds: an approved eviction whose pod is still not terminating is forgotten


class SyncFailed(Exception):
    """The controller cannot compute the budget: it fails safe (no disruption allowed)."""


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels); nil or invalid matches nothing."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), set(req.get("values") or [])
        if op == "In":
            ok = labels.get(key) in values
        elif op == "NotIn":
            ok = labels.get(key) not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            return False  # an invalid selector matches no pod
        if not ok:
            return False
    return True


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def ready(pod: Mapping[str, Any]) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def scaled(value: int | str, total: int, what: str) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    if not value.endswith("%") or not value[:-1].isdigit():
        raise SyncFailed(f"invalid value for IntOrString: invalid type: string is not a percentage ({what})")
    return math.ceil(int(value[:-1]) * total / 100)


class DisruptionController:
    """Computes and stores the status of budgets; ``clock`` is the controller's time (epoch seconds)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def budgets_for(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The budgets of the pod's namespace whose selector matches it (eviction.go getPodDisruptionBudgets)."""
        namespace, labels = pod["metadata"].get("namespace"), labels_of(pod)
        return [
            pdb
            for pdb in self.store.objects("poddisruptionbudgets", namespace)
            if selector_matches(pdb.get("spec", {}).get("selector"), labels)
        ]

    def sync(self, pdb: dict[str, Any]) -> dict[str, Any]:
        """Recompute ``pdb``'s status from the current pods; store it when it changed; return the stored budget."""
        old = pdb.get("status") or {}
        new = dict(old)
        try:
            new.update(self._computed(pdb))
            if not new["disruptedPods"]:
                del new["disruptedPods"]  # omitempty
        except SyncFailed as exc:
            new["disruptionsAllowed"] = 0
            set_condition(new, False, "SyncFailed", str(exc), self.clock())
        else:
            set_condition(new, new["disruptionsAllowed"] > 0, "", "", self.clock())
        if new == old:
            return pdb
        return self.store.update({**pdb, "status": new})

    def sync_all(self) -> None:
        for pdb in self.store.objects("poddisruptionbudgets"):
            self.sync(pdb)

    def _computed(self, pdb: dict[str, Any]) -> dict[str, Any]:
        spec, meta = pdb.get("spec") or {}, pdb["metadata"]
        selector = spec.get("selector")
        pods = [
            p for p in self.store.objects("pods", meta.get("namespace")) if selector_matches(selector, labels_of(p))
        ]
        now = self.clock()
        disrupted = self._disrupted(pdb, pods, now)
        healthy = sum(1 for p in pods if not terminating(p) and p["metadata"]["name"] not in disrupted and ready(p))
        name = meta["name"]
        if spec.get("maxUnavailable") is not None:
            expected = self._expected_scale(pods)
            desired = max(0, expected - scaled(spec["maxUnavailable"], expected, f"{name} maxUnavailable"))
        elif isinstance(spec.get("minAvailable"), int):
            expected, desired = len(pods), spec["minAvailable"]
        elif spec.get("minAvailable") is not None:
            expected = self._expected_scale(pods)
            desired = scaled(spec["minAvailable"], expected, f"{name} minAvailable")
        else:
            expected, desired = 0, 0
        allowed = healthy - desired if expected > 0 and healthy > desired else 0
        return {
            "observedGeneration": meta.get("generation", 0),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptedPods": disrupted,
        }

    def _disrupted(self, pdb: dict[str, Any], pods: list[dict[str, Any]], now: float) -> dict[str, str]:
        """buildDisruptedPodMap: entries of pods still present, not terminating, approved < 2 minutes ago."""
        recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
        live = {p["metadata"]["name"] for p in pods if not terminating(p)}
        return {
            name: when for name, when in recorded.items() if name in live and _epoch(when) + DELETION_TIMEOUT >= now
        }

    def _expected_scale(self, pods: list[dict[str, Any]]) -> int:
        scale: dict[tuple[str, str], int] = {}
        for pod in pods:
            ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None:
                continue  # an unmanaged pod: left out of the expected count
            found = self._controller(pod["metadata"]["namespace"], ref["kind"], ref["name"])
            if found is None:
                raise SyncFailed(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scale[found[0]] = found[1]
        return sum(scale.values())

    def _controller(self, namespace: str, kind: str, name: str) -> tuple[tuple[str, str], int] | None:
        plural = {"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}.get(kind)
        obj = self.store.get(plural, name, namespace) if plural else None
        if obj is None:
            return None
        if kind == "ReplicaSet":
            owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if owner is not None and owner.get("kind") == "Deployment":
                deployment = self.store.get("deployments", owner["name"], namespace)
                if deployment is None:
                    return None
                obj, kind = deployment, "Deployment"
        replicas = (obj.get("spec") or {}).get("replicas")
        return (kind, obj["metadata"]["name"]), 1 if replicas is None else int(replicas)


def set_condition(status: dict[str, Any], allowed: bool, reason: str, message: str, now: float) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition / the failSafe condition (meta.SetStatusCondition)."""
    state = "True" if allowed else "False"
    reason = reason or ("SufficientPods" if allowed else "InsufficientPods")
    conditions = [dict(c) for c in status.get("conditions") or []]
    current = next((c for c in conditions if c.get("type") == "DisruptionAllowed"), None)
    if current is None:
        current = {"type": "DisruptionAllowed", "lastTransitionTime": rfc3339(now)}
        conditions.append(current)
    elif current.get("status") != state:
        current["lastTransitionTime"] = rfc3339(now)
    current.update(status=state, reason=reason, message=message, observedGeneration=status.get("observedGeneration", 0))
    status["conditions"] = conditions
