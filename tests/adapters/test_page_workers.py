"""Page workers: real worker processes decoding pod pages, and KubeSource using them against the test API server."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import KubeSource, connect, decode, page_workers, split_list
from rebalancer.kube.bodies import decode_body
from rebalancer.kube.page_workers import PageWorkers, Session, WorkerFailed
from rebalancer.model import Pod
from rebalancer.protections import Protections
from rebalancer.settings import ProtectionSettings
from tests.kubeapi import Request, TestApiServer
from tests.kubeapi import builders as b

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
OWNERS = {("ns-1", "web-7f9c"): ("Deployment", "web")}
SETUP = page_workers.pods_setup(ANNOTATIONS, OWNERS)
PODS = "/api/v1/pods"


@pytest.fixture
def workers() -> Iterator[PageWorkers]:
    pool = PageWorkers(2)
    yield pool
    pool.stop()


def page(*pods: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"kind": "PodList", "metadata": {"continue": "next"}, "items": list(pods)})


def some_pods(count: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        b.pod(
            f"web-7f9c-{i:04d}",
            namespace=f"ns-{i % 3}",
            node=f"node-{i % 4}",
            owners=[b.owner("ReplicaSet", "web-7f9c")],
            annotations={"controller.kubernetes.io/pod-deletion-cost": str(i), "kubectl.io/other": "x"},
            containers=[b.container(cpu="250m", memory="64Mi"), b.container("side", cpu="50m")],
            volumes=[{"name": "tmp", "emptyDir": {}}],
        )
        for i in range(first, first + count)
    ]


def in_process(raw: bytes) -> list[Pod]:
    """What the listing thread makes of a page."""
    with decode.PodDecoder(ANNOTATIONS, OWNERS).converting_list() as pod_list:
        return decode.converted(decode_body(SETUP, pod_list, raw).items)


def in_process_error(raw: bytes) -> KubeUnavailable:
    with pytest.raises(KubeUnavailable) as caught:
        in_process(raw)
    return caught.value


def convert_all(session: Session | None, *pages: bytes) -> list[Pod]:
    """The pods of ``pages`` converted by the workers, as the fetching thread drives them: each page
    is offered until a worker takes it (none does before it has started, or while it is busy)."""
    assert session is not None
    got: list[Pod] = []
    deadline = time.monotonic() + 30
    for raw in pages:
        while not session.offer(raw):
            assert time.monotonic() < deadline, "no worker became free"
            for pods in session.done(wait=False):
                got.extend(pods)
            time.sleep(0.005)
    for pods in session.done(wait=True):
        got.extend(pods)
    return got


# --- the workers ------------------------------------------------------------------------------


def test_workers_convert_pages_as_the_listing_thread_does_in_offer_order(workers: PageWorkers) -> None:
    pages = [page(*some_pods(40, first)) for first in range(0, 200, 40)]

    with workers.session(SETUP) as session:
        got = convert_all(session, *pages)

    expected = [p for raw in pages for p in in_process(raw)]
    assert got == expected
    assert [p.name for p in got] == [f"web-7f9c-{i:04d}" for i in range(200)]
    assert got[1].workload is not None and got[1].workload.name == "web"  # owners resolved in the worker
    assert dict(got[7].annotations) == {"controller.kubernetes.io/pod-deletion-cost": "7"}
    # values pods share are shared, as in-process: one object per worker and list, not one per pod
    assert got[0].tolerations is got[39].tolerations and got[0].volume_kinds is got[39].volume_kinds
    assert got[1].workload is got[4].workload
    assert got[0].namespace is got[198].namespace  # strings interned, whichever worker converted them


def test_pages_too_big_for_a_slot_go_through_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_workers, "SLOT_BYTES", 20_000)  # before the workers start: one pod fits, five do not
    pool = PageWorkers(1)
    small, big = page(*some_pods(1)), page(*some_pods(5, 1))
    assert len(small) < page_workers.SLOT_BYTES < len(big)
    try:
        with pool.session(SETUP) as session:
            got = convert_all(session, small, big, small, big, big)
    finally:
        pool.stop()

    assert got == [p for raw in (small, big, small, big, big) for p in in_process(raw)]


@pytest.mark.parametrize(
    "bad",
    [
        {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "2 cores"}}}]}},  # a bad quantity
        {"spec": {"priority": "high"}},  # a wrong JSON type
        {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": 5}}},  # a kept annotation
    ],
)
def test_a_bad_pod_in_a_worker_gives_the_error_the_listing_thread_gives(
    workers: PageWorkers, bad: dict[str, Any]
) -> None:
    broken = b.pod("broken", namespace="team-b")
    for part, fields in bad.items():
        broken[part].update(fields)
    raw = page(*some_pods(3), broken)

    with pytest.raises(KubeUnavailable) as caught, workers.session(SETUP) as session:
        convert_all(session, raw)

    expected = in_process_error(raw)
    assert str(caught.value) == str(expected)
    assert str(caught.value).startswith("pod team-b/broken: ")
    assert (caught.value.reason, caught.value.status) == (expected.reason, expected.status)
    assert type(caught.value) is KubeUnavailable


def test_a_page_that_is_not_json_fails_as_in_process(workers: PageWorkers) -> None:
    raw = b"<html>502 Bad Gateway</html>"

    with pytest.raises(KubeUnavailable) as caught, workers.session(SETUP) as session:
        convert_all(session, raw)

    assert str(caught.value) == str(in_process_error(raw))
    assert str(caught.value).startswith("list pods: malformed response: JSON is malformed")


def test_a_worker_that_dies_fails_the_list_and_the_next_list_starts_new_ones(workers: PageWorkers) -> None:
    with pytest.raises(WorkerFailed) as caught, workers.session(SETUP) as session:  # noqa: PT012
        convert_all(session, page(*some_pods(5)), page(*some_pods(5)))
        for pid in workers.pids():
            os.kill(pid, signal.SIGKILL)  # the workers this test started
        convert_all(session, page(*some_pods(5)))  # an offer or a result meets a dead worker

    assert isinstance(caught.value, KubeUnavailable)  # a failed source: the cycle makes no eviction
    assert str(caught.value).startswith("list pods: a page worker process (pid ")
    assert f"exited with code {-signal.SIGKILL}" in str(caught.value)
    assert workers.pids() == []  # stopped after the failed list

    with workers.session(SETUP) as session:  # new workers
        assert len(convert_all(session, page(*some_pods(5)))) == 5


def test_a_second_list_meanwhile_decodes_in_process(workers: PageWorkers) -> None:
    with workers.session(SETUP) as first:
        assert first is not None
        with workers.session(SETUP) as second:
            assert second is None


def test_workers_end_when_stopped(workers: PageWorkers) -> None:
    workers.warm_up()
    processes = [w.process for w in workers._workers]
    assert len(processes) == 2

    workers.stop()

    assert all(p.poll() is not None for p in processes)


def test_workers_only_with_cpus_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_workers, "available_cpus", lambda: 1)
    assert page_workers.auto_workers() == 0
    monkeypatch.setattr(page_workers, "available_cpus", lambda: 2)
    assert page_workers.auto_workers() == 1
    monkeypatch.setattr(page_workers, "available_cpus", lambda: 3)
    assert page_workers.auto_workers() == 2
    monkeypatch.setattr(page_workers, "available_cpus", lambda: 8)
    assert page_workers.auto_workers() == page_workers.MAX_AUTO_WORKERS


# --- KubeSource with workers against the test API server ------------------------------------


@pytest.fixture
def workers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page after the first waits for a worker (none is decoded by the listing thread)."""
    monkeypatch.setattr(split_list, "LOCAL_AHEAD", 0)


def add_cluster(server: TestApiServer, count: int) -> None:
    server.add(*(b.node(f"node-{i}") for i in range(4)))
    server.add(b.deployment("web", namespace="ns-1"), b.replica_set("web-7f9c", namespace="ns-1", deployment="web"))
    server.add(*some_pods(count))


def source(kubeconfig: Path, workers: int) -> KubeSource:
    return KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, page_size=25, decode_workers=workers)


@pytest.mark.usefixtures("workers_only")
def test_a_read_with_workers_gives_the_facts_of_a_read_without(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_cluster(kube_server, 300)
    alone = source(kubeconfig, 0).read_facts()

    shared = source(kubeconfig, 1)
    facts = shared.read_facts()

    assert facts == alone
    assert shared.last_stats.pages["pods"] == 12
    assert shared.last_stats.offloaded["pods"] == 11
    assert [p.key for p in facts.pods] == sorted(p.key for p in facts.pods)  # the server's order


@pytest.mark.usefixtures("workers_only")
def test_a_bad_pod_in_a_later_page_names_the_pod_and_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_cluster(kube_server, 100)
    kube_server.add(b.pod("zz-bad", namespace="ns-2", created="yesterday"))  # sorted last: the last page

    with pytest.raises(KubeUnavailable) as caught:
        source(kubeconfig, 1).read_facts()

    assert (
        str(caught.value)
        == "pod ns-2/zz-bad: metadata.creationTimestamp: not an RFC 3339 time 'yesterday' (a time with its zone)"
    )


@pytest.mark.usefixtures("workers_only")
def test_an_expired_token_restarts_the_list_with_workers(kube_server: TestApiServer, kubeconfig: Path) -> None:
    add_cluster(kube_server, 200)
    expired: list[bool] = []

    def compact_mid_list(request: Request) -> None:
        if request.path == PODS and request.query.get("continue") and len(kube_server.requests_to(PODS)) == 4:
            expired.append(True)
            kube_server.store.create(b.pod("late-arrival", namespace="ns-0", node="node-1"))
            kube_server.store.expire_continue_tokens()

    kube_server.on_request(compact_mid_list)
    reader = source(kubeconfig, 1)

    facts = reader.read_facts()

    assert expired == [True]
    assert len(facts.pods) == 201
    assert len({p.key for p in facts.pods}) == 201
    assert reader.last_stats.relists["pods"] == 1
