"""Which pods may never be evicted, and why: the one place that decides.

Strategies call it when they choose pods; the evictor calls it again just before acting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import DELETION_COST_ANNOTATION, SYSTEM_CRITICAL_PRIORITY, Pod
from rebalancer.domain.settings.shared import ProtectionSettings

DESCHEDULER_EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
LOCAL_STORAGE_KINDS = frozenset({"emptyDir", "hostPath"})
DELETION_COST_OWNER_ANNOTATION = "rebalancer.io/pod-deletion-cost"  # the pod-deletion-cost rebalancer last set
STEERING_OPT_OUT_ANNOTATION = "rebalancer.io/deletion-cost-steering"  # "false": never steer this workload
SYSTEM_NAMESPACE = "kube-system"  # evictable only when evictableNamespaces.include names it


@dataclass(frozen=True, slots=True)
class Protections:
    """Compiled protection rules; build once per cycle with :meth:`from_settings`."""

    settings: ProtectionSettings
    label_selector: LabelSelector | None
    protected_selector: LabelSelector | None

    @classmethod
    def from_settings(cls, settings: ProtectionSettings) -> Protections:
        return cls(
            settings=settings,
            label_selector=settings.label_selector.to_selector() if settings.label_selector else None,
            protected_selector=(
                settings.protected_label_selector.to_selector() if settings.protected_label_selector else None
            ),
        )

    def annotations_read(self) -> frozenset[str]:
        """The pod annotations these rules look at (adapters keep only these)."""
        return frozenset(
            {
                DESCHEDULER_EVICT_ANNOTATION,
                MIRROR_ANNOTATION,
                DELETION_COST_ANNOTATION,
                DELETION_COST_OWNER_ANNOTATION,
                STEERING_OPT_OUT_ANNOTATION,
                self.settings.opt_out_annotation,
            }
        )

    def steering_reason(self, pod: Pod) -> str | None:
        """Why deletion-cost steering must leave ``pod``'s annotations alone, or None when it may set them.

        Steering evicts nothing, so only the rules about consent and scope apply: terminating pods, pods
        opted out (the opt-out annotation, or rebalancer.io/deletion-cost-steering, set to "false"), and
        pods outside evictableNamespaces, labelSelector or inside protectedLabelSelector."""
        why = self.steering_opt_out(pod.annotations)
        if why is not None:
            return why
        for rule in (_terminating, _namespace, _selectors):
            why = rule(self, pod)
            if why:
                return why
        return None

    def opted_in(self, pod: Pod) -> bool:
        if pod.annotations.get(self.settings.opt_out_annotation, "").lower() == "true":
            return True
        return self.settings.honor_descheduler_opt_in and DESCHEDULER_EVICT_ANNOTATION in pod.annotations

    def reason(self, pod: Pod) -> str | None:
        """Why ``pod`` must not be evicted, or None when it may be."""
        for rule in _ALWAYS:
            why = rule(self, pod)
            if why:
                return why
        if self.opted_in(pod):
            return None
        for rule in _UNLESS_OPTED_IN:
            why = rule(self, pod)
            if why:
                return why
        return None

    def steering_opt_out(self, annotations: Mapping[str, str]) -> str | None:
        """Why annotations (a pod's, as read or as the API server has it now) opt it out of steering, or None."""
        if not annotations:  # most pods keep none of the annotations read
            return None
        for key in (STEERING_OPT_OUT_ANNOTATION, self.settings.opt_out_annotation):
            value = annotations.get(key, "")
            if value.lower() == "false":
                return f"opted out by annotation {key}={value}"
        return None


def foreign_deletion_cost(annotations: Mapping[str, str]) -> str | None:
    """The pod-deletion-cost someone other than rebalancer set (rebalancer's ownership annotation does not
    record it), or None when there is none or rebalancer set it."""
    current = annotations.get(DELETION_COST_ANNOTATION)
    if current is None or annotations.get(DELETION_COST_OWNER_ANNOTATION) == current:
        return None
    return current


def _terminating(_: Protections, pod: Pod) -> str | None:
    return "terminating" if pod.terminating else None


def _not_running(_: Protections, pod: Pod) -> str | None:
    return None if pod.phase == "Running" else f"not running (phase {pod.phase})"


def _mirror_or_static(_: Protections, pod: Pod) -> str | None:
    if pod.mirror or MIRROR_ANNOTATION in pod.annotations:
        return "mirror pod of a static pod"
    return "static pod (owned by its Node)" if pod.owner_kind == "Node" else None


def _daemonset(_: Protections, pod: Pod) -> str | None:
    return "DaemonSet pod" if pod.owner_kind == "DaemonSet" else None


def _system_critical(_: Protections, pod: Pod) -> str | None:
    if pod.priority >= SYSTEM_CRITICAL_PRIORITY:
        return f"system-critical priority {pod.priority}"
    return None


def _opted_out(p: Protections, pod: Pod) -> str | None:
    value = pod.annotations.get(p.settings.opt_out_annotation, "")
    return f"opted out by annotation {p.settings.opt_out_annotation}={value}" if value.lower() == "false" else None


def _namespace(p: Protections, pod: Pod) -> str | None:
    f = p.settings.evictable_namespaces
    if f.include and pod.namespace not in f.include:
        return f"namespace {pod.namespace} not in evictableNamespaces.include"
    if pod.namespace in f.exclude:
        return f"namespace {pod.namespace} in evictableNamespaces.exclude"
    if pod.namespace == SYSTEM_NAMESPACE and not f.include:  # an exclude list given does not drop this
        return f"namespace {SYSTEM_NAMESPACE}: protected unless evictableNamespaces.include names it"
    return None


def _selectors(p: Protections, pod: Pod) -> str | None:
    if p.protected_selector is not None and p.protected_selector.matches(pod.labels):
        return "matches protectedLabelSelector"
    if p.label_selector is not None and not p.label_selector.matches(pod.labels):
        return "does not match labelSelector"
    return None


def _priority(p: Protections, pod: Pod) -> str | None:
    threshold = p.settings.priority_threshold
    if threshold is not None and pod.priority >= threshold:
        return f"priority {pod.priority} >= priorityThreshold {threshold}"
    if pod.priority_class and pod.priority_class in p.settings.protected_priority_classes:
        return f"priority class {pod.priority_class} is protected"
    return None


def _bare(_: Protections, pod: Pod) -> str | None:
    return "bare pod: no controller would recreate it" if pod.workload is None else None


def _local_storage(p: Protections, pod: Pod) -> str | None:
    local = sorted(pod.volume_kinds & LOCAL_STORAGE_KINDS)
    if local and not p.settings.evict_local_storage_pods:
        return f"local storage ({', '.join(local)}); set evictLocalStoragePods to allow"
    return None


def _pvc(p: Protections, pod: Pod) -> str | None:
    if "persistentVolumeClaim" in pod.volume_kinds and not p.settings.evict_pods_with_pvc:
        return "mounts a PersistentVolumeClaim; evictPodsWithPVC is false"
    return None


_Rule = Callable[[Protections, Pod], str | None]
# Never overridden, not even by an explicit opt-in annotation; scope rules (namespaces, selectors)
# belong here too, because they say what the operator allowed rebalancer to touch at all.
_ALWAYS: tuple[_Rule, ...] = (
    _terminating,
    _not_running,
    _mirror_or_static,
    _daemonset,
    _system_critical,
    _opted_out,
    _namespace,
    _selectors,
)
# Overridden by an explicit opt-in (descheduler.alpha.kubernetes.io/evict, or the opt-out
# annotation set to "true"): the pod owner accepted the risk.
_UNLESS_OPTED_IN: tuple[_Rule, ...] = (_priority, _bare, _local_storage, _pvc)
