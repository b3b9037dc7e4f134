"""The evictor's collaborators, timed: each call to the cluster adds to a step of the cycle's timeline."""

from __future__ import annotations

from collections.abc import Mapping

from rebalancer.actions.evictor import ClusterActions
from rebalancer.domain.documents import StateStore
from rebalancer.domain.model import Pod
from rebalancer.domain.timeline import Timeline


class TimedActions:
    """A :class:`ClusterActions` whose calls are timed (``pod-get``, ``evict``, ``event``); the moment
    the first eviction request goes out is marked ``eviction-sent``."""

    def __init__(self, inner: ClusterActions, timeline: Timeline) -> None:
        self._inner, self._timeline = inner, timeline

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        with self._timeline.step("pod-get"):
            return self._inner.get_pod(namespace, name, annotations)

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None:
        self._timeline.mark("eviction-sent")
        with self._timeline.step("evict"):
            self._inner.evict(namespace, name, uid, dry_run=dry_run, annotations=annotations)

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool:
        with self._timeline.step("event"):
            return self._inner.record_event(pod, reason=reason, message=message, action=action)


class TimedStore:
    """A :class:`StateStore` whose loads and saves are timed as ``<what>-load`` and ``<what>-save``."""

    def __init__(self, inner: StateStore, timeline: Timeline, what: str) -> None:
        self._inner, self._timeline, self._what = inner, timeline, what

    @property
    def where(self) -> str:
        return self._inner.where

    def load(self) -> tuple[str | None, str | None]:
        with self._timeline.step(f"{self._what}-load"):
            return self._inner.load()

    def save(self, text: str, resource_version: str | None) -> str:
        with self._timeline.step(f"{self._what}-save"):
            return self._inner.save(text, resource_version)
