"""The document store over the real ConfigMap store against tests/kubeapi: the stored JSON is each document's
own, documents written before still load, and a corrupt or newer document is an error naming the ConfigMap
and the field, never an empty document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.actions.backoff import EVICTION_BACKOFF, BackoffCorrupt, BackoffState, PodBackoff
from rebalancer.adapters.kube import ConfigMapStateStore, connect
from rebalancer.domain.documents import DocumentKind, DocumentStore
from rebalancer.domain.efficiency_records import EFFICIENCY_RECORDS, BounceBack, EfficiencyState, RecordsCorrupt
from rebalancer.domain.errors import DocumentCorrupt, DocumentTooLarge, StateConflict
from rebalancer.planning.limits import LIMITER_STATE, LimiterState, StateCorrupt
from rebalancer.planning.limits.state import Bucket, Reservation
from tests.kubeapi import TestApiServer

NS, NAME = "rebalancer", "rebalancer-state"
T0 = 1_700_000_000.0
WHERE = f"configmap {NS}/{NAME}, key state.json"

# As earlier builds wrote them (key order and all): they must keep loading.
OLD_LIMITER_STATE = (
    '{"buckets":{"global":{"level":2.5,"updatedAt":1699999990.0}},"nodeLastEviction":{"n1":1699999900.0},'
    '"recoveringUntil":null,"reservations":[{"at":1699999900.0,"pool":"general","node":"n1",'
    '"workload":"Deployment/default/web","namespace":"default","pod":"web-1"}],'
    '"schema":"rebalancer.io/limiter-state","version":1,"workloadLastEviction":{"Deployment/default/web":1699999900.0}}'
)
OLD_BACKOFF = '{"pods":{"default/web-1":{"until":1700000060.0,"attempts":1}},"schema":"rebalancer.io/eviction-backoff","version":1}'


def texts(kubeconfig: Path) -> ConfigMapStateStore:
    return ConfigMapStateStore(connect(kubeconfig=str(kubeconfig)), NS, NAME, "state.json", request_timeout=5.0)


def stored_text(kube_server: TestApiServer) -> str:
    [cm] = kube_server.objects("configmaps", NS)
    text: str = cm["data"]["state.json"]
    return text


def test_a_missing_document_reads_empty_with_no_version(kube_server: TestApiServer, kubeconfig: Path) -> None:
    loaded = DocumentStore(texts(kubeconfig), LIMITER_STATE).load(T0)
    assert (loaded.document, loaded.version) == (LimiterState(), None)


@pytest.mark.parametrize(
    ("kind", "document"),
    [
        (LIMITER_STATE, LimiterState(reservations=(Reservation(T0, "general", "n1", None, "default", "p"),),
                                     buckets={"global": Bucket(1.0, T0)})),
        (EVICTION_BACKOFF, BackoffState({"default/p": PodBackoff(T0 + 60, 1)})),
        (EFFICIENCY_RECORDS, EfficiencyState(bounce_backs=(BounceBack(T0, "Deployment/default/web", "n1", "general",
                                                                      "n2", T0 - 60),))),
    ],
)  # fmt: skip
def test_each_document_is_stored_as_its_own_json_and_read_back(
    kube_server: TestApiServer, kubeconfig: Path, kind: DocumentKind[object], document: object
) -> None:
    store = DocumentStore(texts(kubeconfig), kind)
    version = store.save(document, None)

    assert stored_text(kube_server) == kind.encode(document)
    loaded = store.load(T0)
    assert (loaded.document, loaded.version) == (document, version)


@pytest.mark.parametrize(("kind", "text"), [(LIMITER_STATE, OLD_LIMITER_STATE), (EVICTION_BACKOFF, OLD_BACKOFF)])
def test_documents_written_before_still_load(
    kube_server: TestApiServer, kubeconfig: Path, kind: DocumentKind[object], text: str
) -> None:
    texts(kubeconfig).save(text, None)
    loaded = DocumentStore(texts(kubeconfig), kind).load(T0)
    assert kind.encode(loaded.document) == kind.encode(kind.decode(text, T0))
    assert json.loads(kind.encode(loaded.document)) == json.loads(text)


def test_a_corrupt_field_is_named_with_the_configmap(kube_server: TestApiServer, kubeconfig: Path) -> None:
    version = texts(kubeconfig).save(OLD_LIMITER_STATE.replace('"pod":"web-1"', '"pod":7'), None)

    with pytest.raises(StateCorrupt) as caught:
        DocumentStore(texts(kubeconfig), LIMITER_STATE).load(T0)

    assert "$.reservations[0].pod" in caught.value.problem
    assert str(caught.value).startswith("limiter state corrupt: ")
    assert str(caught.value).endswith(f"(in {WHERE})")
    assert (caught.value.where, caught.value.version) == (WHERE, version)  # to write a replacement over it


@pytest.mark.parametrize(
    ("kind", "text", "error"),
    [
        (LIMITER_STATE, OLD_LIMITER_STATE.replace('"version":1', '"version":2'), StateCorrupt),
        (EVICTION_BACKOFF, OLD_BACKOFF.replace('"version":1', '"version":2'), BackoffCorrupt),
        (EFFICIENCY_RECORDS, '{"schema":"rebalancer.io/efficiency-records","version":2}', RecordsCorrupt),
    ],
)
def test_a_newer_schema_is_refused_never_read_as_empty(
    kube_server: TestApiServer, kubeconfig: Path, kind: DocumentKind[object], text: str, error: type[DocumentCorrupt]
) -> None:
    version = texts(kubeconfig).save(text, None)

    with pytest.raises(
        error, match=r"written by a newer rebalancer: schema version 2, and this build reads version 1"
    ) as caught:
        DocumentStore(texts(kubeconfig), kind).load(T0)
    assert WHERE in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert caught.value.newer and caught.value.version == version  # kept through the store: callers leave it


def test_a_stale_write_is_a_conflict_and_changes_nothing(kube_server: TestApiServer, kubeconfig: Path) -> None:
    first, second = (
        DocumentStore(texts(kubeconfig), EVICTION_BACKOFF),
        DocumentStore(texts(kubeconfig), EVICTION_BACKOFF),
    )
    version = first.save(BackoffState(), None)
    first.save(BackoffState({"default/a": PodBackoff(T0, 1)}), version)

    with pytest.raises(StateConflict):
        second.save(BackoffState({"default/b": PodBackoff(T0, 2)}), version)
    assert second.load(T0).document == BackoffState({"default/a": PodBackoff(T0, 1)})


def test_a_document_over_its_bound_is_not_written(kube_server: TestApiServer, kubeconfig: Path) -> None:
    huge = LimiterState(node_last_eviction={f"node-{i:07d}": T0 for i in range(40_000)})
    store = DocumentStore(texts(kubeconfig), LIMITER_STATE)

    with pytest.raises(DocumentTooLarge, match=f"limiter state would be [0-9]+ bytes, over 900000 .* in {WHERE}"):
        store.save(huge, None)
    assert kube_server.objects("configmaps", NS) == []
