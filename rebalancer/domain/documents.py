"""One validated store for the documents kept in ConfigMaps: the limiter state, the eviction backoff and
the efficiency records (bounce-back memory included).

A :class:`DocumentKind` says what a document is, reads it strictly (its schema name and version first,
then every field: anything else raises its :class:`~rebalancer.domain.errors.DocumentCorrupt`, naming the field)
and writes it. A :class:`DocumentStore` keeps one document under one ConfigMap key through a
:class:`StateStore` (the adapter: a create when there was no ConfigMap, else a write conditional on the
resourceVersion read, :class:`~rebalancer.domain.errors.StateConflict` when another writer came first). A corrupt
or newer document is an error that also names the ConfigMap; what follows is its owner's rule (the
limiter state is replaced conservatively, the advisory backoff and the records start afresh, logged), and
so is what to do after a conflict (read again, decide again, write again). The JSON written is each
document's own, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rebalancer.domain.errors import DocumentCorrupt, DocumentTooLarge

D = TypeVar("D")


class StateStore(Protocol):
    """One text under one ConfigMap key, with the ConfigMap's resourceVersion."""

    @property
    def where(self) -> str: ...

    def load(self) -> tuple[str | None, str | None]: ...

    def save(self, text: str, resource_version: str | None) -> str: ...


@dataclass(frozen=True, slots=True)
class DocumentKind(Generic[D]):
    what: str  # names it in messages: "limiter state"
    empty: Callable[[], D]  # what a missing document reads as
    decode: Callable[[str, float], D]  # (text, now): strict, raises DocumentCorrupt
    encode: Callable[[D], str]
    max_bytes: int | None = None  # a longer text is not written (DocumentTooLarge)


@dataclass(frozen=True, slots=True)
class Loaded(Generic[D]):
    document: D
    version: str | None  # the ConfigMap's resourceVersion (None: there is no ConfigMap)


class DocumentStore(Generic[D]):
    def __init__(self, texts: StateStore, kind: DocumentKind[D]) -> None:
        self._texts = texts
        self._kind = kind

    def load(self, now: float) -> Loaded[D]:
        """The document as stored (empty when missing). Raises the kind's :class:`DocumentCorrupt` naming the
        field and the ConfigMap, carrying the resourceVersion read; an unreachable API server raises as the
        adapter does."""
        text, version = self._texts.load()
        if text is None:
            return Loaded(self._kind.empty(), version)
        try:
            return Loaded(self._kind.decode(text, now), version)
        except DocumentCorrupt as exc:
            raise type(exc)(exc.problem, self._texts.where, version, newer=exc.newer) from exc

    def save(self, document: D, version: str | None) -> str:
        """Write it over ``version`` (None: there was no ConfigMap); returns the new resourceVersion. Raises
        :class:`~rebalancer.domain.errors.StateConflict` when someone wrote since, :class:`DocumentTooLarge`
        (nothing written) when it would not fit."""
        text = self._kind.encode(document)
        limit = self._kind.max_bytes
        if limit is not None and len(text) > limit:
            raise DocumentTooLarge(self._kind.what, self._texts.where, len(text), limit)
        return self._texts.save(text, version)
