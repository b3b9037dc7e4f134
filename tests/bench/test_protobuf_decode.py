"""The protobuf measurement's encoder and decoders: same pods as the JSON path, clear errors, figures printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import cluster_gen, k8s_protobuf
from bench.protobuf_decode import ProtobufError, pages, pod_protobuf, python_decoder, python_pods
from rebalancer.adapters.kube import decode, protobuf_lists
from rebalancer.domain.model import Pod
from rebalancer.planning.protections import MIRROR_ANNOTATION
from tests.kubeapi import builders as b

ROOT = Path(__file__).resolve().parents[2]
ANNOTATIONS = frozenset({"prometheus.io/scrape", "kubectl.kubernetes.io/restartedAt"})


def json_pods(page: bytes) -> list[Pod]:
    with decode.PodDecoder(ANNOTATIONS, {}).converting_list() as pod_list:
        return decode.converted(pod_list.decode(page).items)


def upb_pods(page: bytes) -> list[Pod]:
    """The pods read as the shipping protobuf path reads them (upb, converted as built)."""
    pod_decoder = decode.PodDecoder(ANNOTATIONS, {})
    with pod_decoder.converting_list() as pod_list:
        return decode.converted(protobuf_lists.PodLists(pod_decoder.wire, pod_list)("pods", page).items)


def protobuf_pods(page: bytes) -> tuple[list[Pod], str]:
    pod_decoder = decode.PodDecoder(ANNOTATIONS, {})
    out: list[Pod] = []
    token = python_pods(page, python_decoder(pod_decoder.wire), pod_decoder.pod, out)
    return out, token


@settings(max_examples=15, deadline=None)
@given(start=st.integers(0, 200_000), count=st.integers(1, 40), node_count=st.integers(1, 6000))
def test_the_protobuf_of_a_served_pod_is_its_json_encoded_field_by_field(
    start: int, count: int, node_count: int
) -> None:
    for i in range(start, start + count):
        item = cluster_gen.pod_bytes(i, node_count)[2]
        assert pod_protobuf(i, node_count) == k8s_protobuf.message("Pod", msgspec.json.decode(item))


@settings(max_examples=10, deadline=None)
@given(count=st.integers(1, 1200), node_count=st.integers(1, 500))
def test_both_encodings_give_the_same_pods(count: int, node_count: int) -> None:
    json_pages, proto_pages = pages(count, node_count)

    read = [protobuf_pods(page) for page in proto_pages]

    assert [pod for pods, _ in read for pod in pods] == [pod for page in json_pages for pod in json_pods(page)]
    assert [token for _, token in read] == [f"page-{stop}" for stop in range(500, count, 500)] + [""]


def test_a_truncated_body_is_an_error_naming_the_field_never_fewer_pods() -> None:
    body = pages(3, 1)[1][0]
    with pytest.raises(ProtobufError, match=r"^raw: missing or truncated"):
        protobuf_pods(body[:-1])

    # The envelope is whole but the last pod is cut inside its metadata (its own length says so).
    items = [pod_protobuf(i, 1) for i in range(3)]
    cut = k8s_protobuf.list_body("Pod", {}, [*items[:2], items[2][:100]])
    with pytest.raises(ProtobufError, match=r"^items\[2\]\.metadata: truncated field"):
        protobuf_pods(cut)


def test_an_unknown_wire_type_names_its_field() -> None:
    meta = b"\x0f" + k8s_protobuf.message("ObjectMeta", {"name": "a"})  # field 1 of wire type 7: there is none
    pod = b"\x0a" + k8s_protobuf.varint(len(meta)) + meta
    body = k8s_protobuf.list_body("Pod", {}, [pod])

    with pytest.raises(ProtobufError, match=r"^items\[0\]\.metadata\.#1: unknown wire type 7"):
        protobuf_pods(body)


def test_the_encoder_names_a_field_it_does_not_know() -> None:
    with pytest.raises(k8s_protobuf.EncodeError, match=r"^spec\.containers\[0\]\.frobnicate: no field"):
        k8s_protobuf.message("Pod", {"spec": {"containers": [{"name": "app", "frobnicate": 1}]}})


def test_the_benchmark_prints_each_path_against_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.protobuf_decode", "1000", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    sizes = re.search(r"1,000 pods in 2 pages .*: JSON (\d+) MB, protobuf (\d+) MB \((\d+\.\d+)x\)", done.stdout)
    assert sizes is not None, done.stdout
    assert 0 < float(sizes.group(3)) < 1
    paths = dict(re.findall(r"^ +(\S.*?) +\d+\.\d+ s \(.*\) +\d+\.\d+ us/pod +(\d+\.\d+)x$", done.stdout, re.M))
    expected = {"json", "json decode only", "python", "upb", "upb parse only"}
    assert set(paths) == expected and paths["json"] == "1.00"
    received = re.search(r"receive the pages .*: JSON (\d+\.\d+) s, protobuf (\d+\.\d+) s \((\d+\.\d+)x\)", done.stdout)
    assert received is not None, done.stdout
    both = re.findall(r"received and decoded: json \d+\.\d+ s, (\w+) \d+\.\d+ s \(\d+\.\d+x\)", done.stdout)
    assert set(both) == expected - {"json", "json decode only", "upb parse only"}


_QUANTITY = st.sampled_from(["100m", "1", "250m", "1.5", "64Mi", "1Gi", "500M"])
_CONTAINER = st.builds(
    b.container,
    cpu=st.none() | _QUANTITY,
    memory=st.none() | _QUANTITY,
    limit_cpu=st.none() | _QUANTITY,
    limit_memory=st.none() | _QUANTITY,
)
_SIDECAR = st.builds(b.container, st.just("sidecar"), cpu=_QUANTITY, restart_policy=st.just("Always"))
_TERM = st.lists(
    st.tuples(
        st.sampled_from(["pool", "zone"]),
        st.sampled_from(["In", "NotIn", "Exists"]),
        st.lists(st.text(max_size=3), max_size=2),
    ),
    min_size=1,
    max_size=2,
)


_TOLERATIONS: list[dict[str, Any]] = [b.DEFAULT_TOLERATIONS[0], {"key": "k", "value": "v", "effect": "NoSchedule"}]


@st.composite
def _pods(draw: st.DrawFn) -> dict[str, object]:
    """Pods of the test builders with every field the snapshot reads varied."""
    qos: dict[str, Any] = {} if draw(st.booleans()) else {"qos": None}  # None: no status.qosClass, computed
    return b.pod(
        draw(st.text("abcdef-", min_size=1, max_size=8)),
        namespace=draw(st.sampled_from(["default", "team-a"])),
        node=draw(st.none() | st.sampled_from(["node-1", "node-2"])),
        containers=draw(st.lists(_CONTAINER, min_size=1, max_size=3)),
        init_containers=draw(st.lists(st.one_of(_CONTAINER, _SIDECAR), max_size=2)),
        owners=draw(
            st.lists(
                st.builds(
                    b.owner, st.sampled_from(["ReplicaSet", "Job", "Node"]), st.just("w"), controller=st.booleans()
                ),
                max_size=2,
            )
        ),
        labels=draw(st.dictionaries(st.sampled_from(["app", "tier", "x/y"]), st.text(max_size=4), max_size=3)),
        annotations=draw(
            st.dictionaries(
                st.sampled_from([*ANNOTATIONS, MIRROR_ANNOTATION, "other"]), st.text(max_size=5), max_size=3
            )
        ),
        tolerations=draw(st.none() | st.just(_TOLERATIONS)),
        node_selector=draw(
            st.none() | st.dictionaries(st.sampled_from(["pool", "zone"]), st.text(max_size=3), max_size=2)
        ),
        affinity=draw(
            st.none() | st.lists(_TERM, min_size=1, max_size=2).map(lambda terms: b.required_affinity(*terms))
        ),
        volumes=draw(
            st.lists(
                st.sampled_from([{"name": "t", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {}}]), max_size=2
            )
        ),
        phase=draw(st.sampled_from(["Running", "Pending", "Succeeded"])),
        ready=draw(st.booleans()),
        priority=draw(st.none() | st.integers(-(2**31), 2**31 - 1)),
        priority_class=draw(st.none() | st.sampled_from(["high", ""])),
        overhead=draw(st.none() | st.fixed_dictionaries({"cpu": _QUANTITY})),
        deleting=draw(st.booleans()),
        **qos,
    )


@settings(max_examples=60, deadline=None)
@given(items=st.lists(_pods(), min_size=1, max_size=4))
def test_both_encodings_give_the_same_pods_whatever_the_fields(items: list[dict[str, object]]) -> None:
    json_page = msgspec.json.encode({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
    proto_page = k8s_protobuf.list_body("Pod", {}, [k8s_protobuf.message("Pod", item) for item in items])

    expected = json_pods(json_page)
    assert protobuf_pods(proto_page)[0] == expected
    assert upb_pods(proto_page) == expected
