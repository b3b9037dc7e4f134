"""A thread-safe, versioned in-memory store with etcd's semantics, holding raw JSON objects.

Like etcd behind the API server: one cluster-wide revision that every write increases (it is
the ``resourceVersion``), old revisions kept until compaction, lists served as of a revision,
keys ordered as ``<namespace>/<name>``. A continue token records the list's revision and the
next key; once that revision is compacted the token is answered 410 Expired.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import threading
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tests.kubeapi import resources, status
from tests.kubeapi.resources import ResourceType

_NODE_NAME = re.compile(rb'"nodeName":"([^"]*)"')


@dataclass
class _Version:
    revision: int
    decoded: dict[str, Any] | None  # None with no ``encoded``: deleted at this revision (a tombstone)
    encoded: bytes | None = None  # the list item's JSON (no kind/apiVersion), built once
    typed: tuple[str, str] | None = None  # bulk-loaded: (apiVersion, kind) the decoded object gets

    _node_name: str | None = None

    def node_name(self) -> str:
        """spec.nodeName, found once per stored version (from the bytes when never decoded)."""
        if self._node_name is None:
            if self.decoded is not None:
                self._node_name = str((self.decoded.get("spec") or {}).get("nodeName") or "")
            else:
                found = _NODE_NAME.search(self.encoded or b"")
                self._node_name = found.group(1).decode() if found else ""
        return self._node_name

    @property
    def deleted(self) -> bool:
        return self.decoded is None and self.encoded is None

    @property
    def obj(self) -> dict[str, Any] | None:
        if self.decoded is None and self.encoded is not None:  # bulk-loaded: decoded on first use
            decoded = msgspec.json.decode(self.encoded)
            if self.typed is not None:  # as the object was stored: a GET or a PATCH sees its kind
                decoded = {"apiVersion": self.typed[0], "kind": self.typed[1], **decoded}
            self.decoded = decoded
        return self.decoded

    def item_bytes(self) -> bytes:
        if self.encoded is None:
            assert self.decoded is not None
            self.encoded = msgspec.json.encode(
                {k: v for k, v in self.decoded.items() if k not in ("kind", "apiVersion")}
            )
        return self.encoded


@dataclass
class Page:
    items: list[bytes]
    revision: int
    continue_token: str
    remaining: int | None


@dataclass
class _Snapshot:
    keys: list[str]
    versions: list[_Version]
    by_node: dict[str, list[int]] | None = None  # pods: spec.nodeName -> positions (built on first use)

    def positions_on(self, node: str) -> list[int]:
        """Like the real API server's watch-cache index on spec.nodeName: no scan of every pod per
        request. Read from the stored bytes when the object was never decoded (bulk-loaded pods)."""
        if self.by_node is None:
            index: dict[str, list[int]] = {}
            for position, version in enumerate(self.versions):
                index.setdefault(version.node_name(), []).append(position)
            self.by_node = index
        return self.by_node.get(node, [])


@dataclass(frozen=True)
class Change:
    """One write to a table, as a watch reports it: ADDED, MODIFIED or DELETED."""

    revision: int
    type: str
    key: str
    version: _Version  # the object after the write; for DELETED, the last live version
    previous: _Version | None  # the live version before the write (None for ADDED)


@dataclass
class _Table:
    versions: dict[str, list[_Version]] = field(default_factory=dict)
    sorted_keys: list[str] | None = None
    changed_at: list[int] = field(default_factory=lambda: [0])  # revisions that wrote to this table
    changes: list[Change] = field(default_factory=list)  # the watch history, oldest first, until compaction

    def last_change(self, at: int) -> int:
        """The newest revision <= ``at`` that changed this table: its content as of ``at``."""
        return self.changed_at[bisect_right(self.changed_at, at) - 1]

    def ordered_keys(self) -> list[str]:
        if self.sorted_keys is None:
            self.sorted_keys = sorted(self.versions)
        return self.sorted_keys


def _clone(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy (through JSON: several times faster than copy.deepcopy, and JSON-only)."""
    clone: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(obj))
    return clone


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode_continue(revision: int, start_key: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start_key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if data["v"] != "meta.k8s.io/v1" or not data["start"]:
            raise ValueError("unknown version or empty start key")
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise status.bad_request(f"invalid continue token: continue key is not valid: {exc}") from None


class Store:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[str, _Table] = {r.plural: _Table() for r in resources.RESOURCES}
        self._revision = 1
        self._compacted = 0
        self._snapshots: dict[tuple[str, int], _Snapshot] = {}
        self._changed = threading.Condition(self._lock)

    # --- revisions --------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    def compact(self, revision: int | None = None) -> None:
        """Drop history up to ``revision`` (default: the current one), as etcd compaction does."""
        with self._lock:
            target = self._revision if revision is None else min(revision, self._revision)
            self._compacted = max(self._compacted, target)
            for table in self._tables.values():
                table.changes = [c for c in table.changes if c.revision > target]
                for key in list(table.versions):
                    history = table.versions[key]
                    keep = [v for v in history if v.revision > target]
                    older = [v for v in history if v.revision <= target]
                    if older and not older[-1].deleted:
                        keep.insert(0, older[-1])
                    if keep:
                        table.versions[key] = keep
                    else:
                        del table.versions[key]
                        table.sorted_keys = None

    def expire_continue_tokens(self) -> None:
        """Make every continue token handed out so far expire.

        A real cluster's revision moves on constantly (Leases, Events), and compaction runs every
        five minutes; this advances the revision by one unrelated write and compacts up to it.
        """
        with self._lock:
            self._revision += 1
            self.compact()

    # --- writes -----------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rtype = resources.of(obj)
            stored = _clone(obj)
            meta = stored.setdefault("metadata", {})
            if rtype.namespaced:
                meta.setdefault("namespace", "default")
            key = rtype.key(meta.get("namespace"), meta["name"])
            if self._latest(rtype, key) is not None:
                raise status.already_exists(rtype.plural, rtype.group, meta["name"])
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            return self._write(rtype, key, stored)

    def load_encoded(self, plural: str, items: Iterable[tuple[str | None, str, bytes]]) -> None:
        """Bulk-load objects given as (namespace, name, list-item JSON), all at one new revision.

        For benchmarks: a 150,000-pod cluster is held as its wire bytes (about 1.3 GB) and an object
        is decoded only when a selector or a GET needs it. The JSON must already carry the metadata
        the server would add (uid, creationTimestamp, resourceVersion) and no kind/apiVersion.
        """
        with self._lock:
            rtype = resources.BY_PLURAL[plural]
            table = self._tables[plural]
            self._revision += 1
            for namespace, name, encoded in items:
                key = rtype.key(namespace, name)
                version = _Version(self._revision, None, encoded, typed=(rtype.api_version, rtype.kind))
                history = table.versions.setdefault(key, [])
                previous = history[-1] if history and not history[-1].deleted else None
                history.append(version)
                table.changes.append(
                    Change(self._revision, "MODIFIED" if previous else "ADDED", key, version, previous)
                )
            table.changed_at.append(self._revision)
            table.sorted_keys = None
            self._changed.notify_all()

    def update(self, obj: dict[str, Any], *, check_version: bool = False) -> dict[str, Any]:
        """Replace an object; with ``check_version`` its resourceVersion must be the stored one (else 409)."""
        with self._lock:
            rtype = resources.of(obj)
            stored = _clone(obj)
            meta = stored["metadata"]
            key = rtype.key(meta.get("namespace"), meta["name"])
            current = self._latest(rtype, key)
            if current is None:
                raise status.not_found(rtype.plural, rtype.group, meta["name"])
            if check_version and meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise status.conflict(
                    rtype.plural,
                    rtype.group,
                    meta["name"],
                    "the object has been modified; please apply your changes to the latest version and try again",
                )
            meta["uid"] = current["metadata"]["uid"]
            meta["creationTimestamp"] = current["metadata"]["creationTimestamp"]
            return self._write(rtype, key, stored)

    def delete(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self._lock:
            rtype = resources.BY_PLURAL[plural]
            key = rtype.key(namespace, name)
            current = self._latest(rtype, key)
            if current is None:
                raise status.not_found(rtype.plural, rtype.group, name)
            self._revision += 1
            table = self._tables[plural]
            last = table.versions[key][-1]
            table.versions[key].append(_Version(self._revision, None))
            table.changed_at.append(self._revision)
            table.changes.append(Change(self._revision, "DELETED", key, last, last))
            self._changed.notify_all()
            return current

    def _write(self, rtype: ResourceType, key: str, stored: dict[str, Any]) -> dict[str, Any]:
        self._revision += 1
        stored["metadata"]["resourceVersion"] = str(self._revision)
        table = self._tables[rtype.plural]
        if key not in table.versions:
            table.versions[key] = []
            table.sorted_keys = None
        history = table.versions[key]
        previous = history[-1] if history and not history[-1].deleted else None
        version = _Version(self._revision, stored)
        history.append(version)
        table.changed_at.append(self._revision)
        table.changes.append(Change(self._revision, "MODIFIED" if previous else "ADDED", key, version, previous))
        self._changed.notify_all()
        return _clone(stored)

    # --- reads ------------------------------------------------------------------------------

    def _latest(self, rtype: ResourceType, key: str, at: int | None = None) -> dict[str, Any] | None:
        version = self._version(self._tables[rtype.plural], key, self._revision if at is None else at)
        return None if version is None else version.obj

    @staticmethod
    def _version(table: _Table, key: str, at: int) -> _Version | None:
        history = table.versions.get(key)
        if not history:
            return None
        for version in reversed(history):
            if version.revision <= at:
                return None if version.deleted else version
        return None

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            rtype = resources.BY_PLURAL[plural]
            obj = self._latest(rtype, rtype.key(namespace, name))
            return _clone(obj) if obj is not None else None

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the live objects of a type (of one namespace), in key order: for server logic."""
        with self._lock:
            rtype = resources.BY_PLURAL[plural]
            table = self._tables[plural]
            prefix = f"{namespace}/" if namespace is not None and rtype.namespaced else ""
            out = []
            for key in table.ordered_keys():
                if key.startswith(prefix):
                    version = self._version(table, key, self._revision)
                    if version is not None and version.obj is not None:
                        out.append(_clone(version.obj))
            return out

    def check_revision(self, requested: int, *, exact: bool) -> int:
        """The revision to serve for a resourceVersion parameter (Exact or NotOlderThan)."""
        with self._lock:
            if requested > self._revision:
                raise status.too_large_resource_version(requested, self._revision)
            if exact and requested < self._compacted:
                raise status.expired_resource_version(requested, self._compacted)
            return requested if exact else self._revision

    def changes_after(self, plural: str, revision: int, wait: float) -> tuple[list[Change], int]:
        """The writes to ``plural`` after ``revision`` (waiting up to ``wait`` seconds for one), and the
        store's revision they bring a watcher to. A compacted ``revision`` is 410 Expired, as etcd says."""
        with self._lock:
            if revision < self._compacted:
                raise status.expired_resource_version(revision, self._compacted)
            table = self._tables[plural]
            found = self._changes_after(table, revision)
            if not found and wait > 0:
                self._changed.wait(wait)
                if revision < self._compacted:
                    raise status.expired_resource_version(revision, self._compacted)
                found = self._changes_after(table, revision)
            return found, self._revision

    @staticmethod
    def _changes_after(table: _Table, revision: int) -> list[Change]:
        changes = table.changes  # ordered by revision
        return changes[bisect_right(changes, revision, key=lambda c: c.revision) :]

    def live(self, plural: str) -> tuple[list[tuple[str, _Version]], int]:
        """The live objects of a table now, with the revision they are as of (a watch's initial state)."""
        with self._lock:
            snap = self._snapshot(plural, self._revision)
            return list(zip(snap.keys, snap.versions, strict=True)), self._revision

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        limit: int,
        continue_token: str | None,
        revision: int | None,
        predicate: Callable[[dict[str, Any]], bool] | None,
        node_name: str | None = None,
    ) -> Page:
        """One page of ``rtype`` as of ``revision`` (None: latest), starting at the token's key."""
        with self._lock:
            start = ""
            if continue_token:
                revision, start = decode_continue(continue_token)
                if revision == -1:  # an inconsistent continuation handed out with a 410
                    revision = self._revision
                elif revision < self._compacted:
                    raise status.expired_continue(encode_continue(-1, start))
            at = self._revision if revision is None else revision
            snap = self._snapshot(rtype.plural, at)
            lo, hi = 0, len(snap.keys)
            if namespace:  # the keys of one namespace: [ns + "/", ns + "0"), "0" following "/"
                lo, hi = bisect_left(snap.keys, f"{namespace}/"), bisect_left(snap.keys, f"{namespace}0")
            index = max(lo, bisect_left(snap.keys, start, lo, hi)) if start else lo
            if node_name is not None and rtype.plural == "pods":  # indexed: only that node's pods are looked at
                return self._indexed_page(snap, node_name, lo, hi, index, limit, at, predicate)
            items: list[bytes] = []
            last = index
            while index < hi and not (limit and len(items) >= limit):
                version = snap.versions[index]
                if predicate is None or predicate(version.obj or {}):
                    items.append(version.item_bytes())
                    last = index
                index += 1
            if index >= hi:
                return Page(items, at, "", None)
            # As the real server: the count of what follows is only known without a selector.
            remaining = hi - index if predicate is None else None
            return Page(items, at, encode_continue(at, snap.keys[last] + "\x00"), remaining)

    def _indexed_page(
        self,
        snap: _Snapshot,
        node_name: str,
        lo: int,
        hi: int,
        index: int,
        limit: int,
        at: int,
        predicate: Callable[[dict[str, Any]], bool] | None,
    ) -> Page:
        positions = [p for p in snap.positions_on(node_name) if lo <= p < hi and p >= index]
        items: list[bytes] = []
        for count, position in enumerate(positions):
            version = snap.versions[position]
            if predicate is None or predicate(version.obj or {}):
                items.append(version.item_bytes())
            if limit and len(items) >= limit and count + 1 < len(positions):
                return Page(items, at, encode_continue(at, snap.keys[position] + "\x00"), None)
        return Page(items, at, "", None)

    def _snapshot(self, plural: str, at: int) -> _Snapshot:
        """The live keys and versions of a table as of revision ``at`` (immutable, so cached, and shared by
        every revision that did not write to this table: writing an Event does not rebuild the pods')."""
        table = self._tables[plural]
        at = table.last_change(at)
        cache_key = (plural, at)
        snap = self._snapshots.get(cache_key)
        if snap is None:
            keys: list[str] = []
            versions: list[_Version] = []
            for key in table.ordered_keys():
                version = self._version(table, key, at)
                if version is not None:
                    keys.append(key)
                    versions.append(version)
            snap = self._snapshots[cache_key] = _Snapshot(keys, versions)
            while len(self._snapshots) > 8:
                del self._snapshots[next(iter(self._snapshots))]
        return snap
