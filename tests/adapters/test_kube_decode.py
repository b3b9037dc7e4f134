"""Edge cases of the narrow decoder (wire JSON -> domain), without a server."""

from __future__ import annotations

import gc
import re
import weakref
from typing import Any

import msgspec
import pytest

from rebalancer.adapters.kube import decode, wire
from rebalancer.adapters.kube.bodies import malformed
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.model import Pod, WorkloadRef
from rebalancer.planning.protections import MIRROR_ANNOTATION
from tests.kubeapi import builders as b

KEEP = frozenset({"keep.me/please"})


def decode_pods(*raw: dict[str, Any], owners: decode.RsOwners | None = None) -> list[Pod]:
    body = msgspec.json.encode({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(raw)})
    decoder = decode.PodDecoder(KEEP, owners or {})
    return decoder.pods(decoder.wire.pod_list.decode(body).items)


def decode_pod(raw: dict[str, Any], **kwargs: Any) -> Pod:
    return decode_pods(raw, **kwargs)[0]


def test_unknown_and_missing_fields_never_fail() -> None:
    pod = decode_pod({"metadata": {"name": "x", "futureField": {"a": [1, 2]}}, "spec": {"newThing": True}})
    assert (pod.name, pod.namespace, pod.phase, pod.cpu_request_m, pod.created) == ("x", "", "", 0, 0.0)
    assert (pod.workload, pod.node_name, pod.qos) == (None, None, "BestEffort")
    empty = decode.node(msgspec.json.decode(b"{}", type=wire.Node))
    assert (empty.allocatable_cpu_m, empty.ready) == (0, False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T08:00:00Z", 1714550400.0),
        ("2024-05-01T08:00:00.250Z", 1714550400.25),
        ("2024-05-01T10:00:00+02:00", 1714550400.0),
    ],
)
def test_timestamps(text: str, expected: float) -> None:
    assert decode.timestamp(text, "pod a/b", "metadata.creationTimestamp") == expected


@pytest.mark.parametrize("text", ["2024-05-01T08:00:00", "yesterday", ""])
def test_bad_timestamps(text: str) -> None:
    with pytest.raises(KubeUnavailable, match=rf"^pod a/b: metadata.creationTimestamp: not an RFC 3339 time '{text}'"):
        decode.timestamp(text, "pod a/b", "metadata.creationTimestamp")


def test_pod_level_resources_replace_the_container_sum_for_what_they_name() -> None:
    raw = b.pod("p", containers=[b.container(cpu="100m", memory="1Gi")], overhead={"cpu": "10m"})
    raw["spec"]["resources"] = {"requests": {"cpu": "2"}}
    pod = decode_pod(raw)
    assert (pod.cpu_request_m, pod.memory_request) == (2010, 2**30)


def test_sidecars_count_only_for_init_containers_after_them() -> None:
    pod = decode_pod(
        b.pod(
            "p",
            containers=[b.container(cpu="100m")],
            init_containers=[
                b.container("big-init", cpu="900m"),  # runs before the sidecar starts: 900m alone
                b.container("sidecar-1", cpu="50m", restart_policy="Always"),
                b.container("sidecar-2", cpu="50m", restart_policy="Always"),
                b.container("late-init", cpu="820m"),  # beside both sidecars: 920m
            ],
        )
    )
    assert pod.cpu_request_m == 920  # max(100 + 50 + 50, 900, 820 + 100)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda p: p["spec"]["initContainers"][0]["resources"]["requests"].update(cpu="lots"),
            "spec.initContainers[0]",
        ),
        (lambda p: p["spec"].update(overhead={"memory": "lots"}), "spec.overhead.memory"),
        (lambda p: p["spec"].update(resources={"requests": {"cpu": "lots"}}), "spec.resources.requests.cpu"),
    ],
)
def test_malformed_quantities_name_the_field(mutate: Any, path: str) -> None:
    raw = b.pod("p", namespace="ns", init_containers=[b.container("i", cpu="1")])
    mutate(raw)
    with pytest.raises(KubeUnavailable, match=rf"^pod ns/p: {re.escape(path)}.*: not a quantity 'lots'$") as caught:
        decode_pod(raw)
    assert caught.value.reason == "Malformed"


def test_malformed_node_allocatable() -> None:
    raw = b.node("n1", allocatable={"cpu": "4 cpus"})
    with pytest.raises(KubeUnavailable, match=r"^node n1: status.allocatable.cpu: not a quantity '4 cpus'$"):
        decode.node(msgspec.json.decode(msgspec.json.encode(raw), type=wire.Node))


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([b.container()], "BestEffort"),
        ([b.container(cpu="1", limit_cpu="1000m", memory="1Gi", limit_memory="1024Mi")], "Guaranteed"),
        ([b.container(limit_cpu="1", limit_memory="1Gi"), b.container("b", cpu="1")], "Burstable"),
        ([b.container(cpu="1", limit_cpu="2", memory="1Gi", limit_memory="1Gi")], "Burstable"),
    ],
)
def test_qos_when_the_status_lacks_it(containers: list[dict[str, Any]], expected: str) -> None:
    assert decode_pod(b.pod("p", containers=containers, qos=None)).qos == expected


def test_qos_from_the_status_wins() -> None:
    assert decode_pod(b.pod("p", containers=[b.container()], qos="Guaranteed")).qos == "Guaranteed"


def test_annotations_filtered_and_shared_empties() -> None:
    a, c = decode_pods(
        b.pod("a", annotations={"keep.me/please": "1", "drop.me": "2"}),
        b.pod("c", annotations={"drop.me": "2"}),
    )
    assert dict(a.annotations) == {"keep.me/please": "1"}
    assert c.annotations == {}
    assert c.annotations is c.node_selector  # one shared empty mapping, not one per pod


def test_replica_set_resolution_uses_the_owner_map() -> None:
    raw = b.pod("p", namespace="ns", owners=[b.owner("ReplicaSet", "rs-1")])
    assert decode_pod(raw, owners={("ns", "rs-1"): ("Deployment", "web")}).workload == WorkloadRef(
        "Deployment", "ns", "web"
    )
    assert decode_pod(raw, owners={("other", "rs-1"): ("Deployment", "web")}).workload == WorkloadRef(
        "ReplicaSet", "ns", "rs-1"
    )
    rs = msgspec.json.decode(msgspec.json.encode(b.replica_set("rs-1", "ns")), type=wire.ReplicaSet)
    assert decode.replica_set_owner(rs) is None
    rs = msgspec.json.decode(msgspec.json.encode(b.replica_set("rs-1", "ns", deployment="web")), type=wire.ReplicaSet)
    assert decode.replica_set_owner(rs) == (("ns", "rs-1"), ("Deployment", "web"))


def test_budget_values() -> None:
    raw = b.pdb("x", min_available=0, selector=None)
    budget = decode.budget(msgspec.json.decode(msgspec.json.encode(raw), type=wire.PodDisruptionBudget))
    assert (budget.selector, budget.min_available, budget.max_unavailable) == (None, 0, None)


def test_malformed_names_the_item_when_it_can() -> None:
    pod_list = decode.pod_wire(KEEP).pod_list
    call: ListCall[Any] = ListCall("pods", "pod", lambda **_: None, pod_list)
    raw = msgspec.json.encode({"items": [{"metadata": {"name": "ok"}}, {"metadata": {"name": "bad", "namespace": "n"},
                                                                        "spec": {"priority": "high"}}]})  # fmt: skip
    with pytest.raises(msgspec.ValidationError) as caught:
        pod_list.decode(raw)
    assert str(malformed(call, raw, caught.value)) == "pod n/bad: spec.priority: Expected `int | null`, got `str`"
    with pytest.raises(msgspec.ValidationError) as caught:
        pod_list.decode(b'{"metadata": {"resourceVersion": 5}}')
    assert str(malformed(call, b"", caught.value)).startswith("list pods: malformed response: Expected `str`")


# --- pods: the annotations struct, volumes, shared shapes ------------------------------------------


def test_the_annotations_struct_has_exactly_the_kept_keys_and_the_mirror_one() -> None:
    keys = frozenset({"a.example/x", "b.example/y"})
    pod_wire = decode.pod_wire(keys)

    assert set(type(pod_wire.no_annotations).__struct_encode_fields__) == keys | {MIRROR_ANNOTATION}
    assert sorted(key for _, key in pod_wire.keys) == sorted(keys)
    assert decode.pod_wire(frozenset(keys)) is pod_wire  # built once per set of keys


def test_kept_annotations_are_read_others_skipped_and_the_mirror_one_only_noticed() -> None:
    raw = b.pod("m", annotations={"keep.me/please": "", "drop.me": "2"})
    raw["metadata"]["annotations"][MIRROR_ANNOTATION] = {"any": ["json"]}  # presence only: never read
    raw["metadata"]["annotations"]["drop.me/too"] = [1, 2]

    pod = decode_pod(raw)

    assert dict(pod.annotations) == {"keep.me/please": ""}  # an empty value is a value
    assert pod.mirror


def test_the_mirror_annotation_is_kept_when_asked_for() -> None:
    raw = b.pod("m", annotations={MIRROR_ANNOTATION: "d41d8cd9", "drop.me": "2"})
    decoder = decode.PodDecoder(frozenset({MIRROR_ANNOTATION}), {})
    body = msgspec.json.encode({"items": [raw]})

    pod = decoder.pods(decoder.wire.pod_list.decode(body).items)[0]

    assert (dict(pod.annotations), pod.mirror) == ({MIRROR_ANNOTATION: "d41d8cd9"}, True)


def test_a_kept_annotation_that_is_not_a_string_names_pod_and_key() -> None:
    pod_list = decode.pod_wire(KEEP).pod_list
    call: ListCall[Any] = ListCall("pods", "pod", lambda **_: None, pod_list)
    bad = b.pod("bad", namespace="n")
    bad["metadata"]["annotations"] = {"keep.me/please": 1, "drop.me": 2}
    raw = msgspec.json.encode({"items": [b.pod("ok"), bad]})

    with pytest.raises(msgspec.ValidationError) as caught:
        pod_list.decode(raw)

    assert str(malformed(call, raw, caught.value)) == (
        "pod n/bad: metadata.annotations[keep.me/please]: Expected `str`, got `int`"
    )


# Every source kind of core/v1 VolumeSource, as the API spells it.
VOLUME_KINDS = [
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "persistentVolumeClaim",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "rbd",
    "scaleIO",
    "secret",
    "storageos",
    "vsphereVolume",
]


def test_every_volume_kind_is_reported_as_the_api_spells_it() -> None:
    volumes = [{"name": f"v{i}", kind: {"some": {"source": [i]}}} for i, kind in enumerate(VOLUME_KINDS)]
    volumes.append({"name": "future", "someNewKind": {}})  # a kind newer than rebalancer: not reported

    pod = decode_pod(b.pod("p", volumes=volumes))

    assert pod.volume_kinds == {*VOLUME_KINDS, "projected"}  # the builder adds the service account volume


def test_pods_of_one_template_share_figures_but_not_their_differences() -> None:
    def pod(name: str, **overrides: Any) -> dict[str, Any]:
        return b.pod(name, containers=[b.container(cpu="100m", memory="64Mi")], **overrides)

    same, overhead, volumes = decode_pods(
        pod("a"), pod("b"), pod("c", overhead={"cpu": "10m"}), pod("d", volumes=[{"name": "x", "emptyDir": {}}])
    )[1:]

    assert (same.cpu_request_m, same.memory_request, same.volume_kinds) == (100, 64 * 2**20, {"projected"})
    assert (overhead.cpu_request_m, overhead.volume_kinds) == (110, {"projected"})
    assert (volumes.cpu_request_m, volumes.volume_kinds) == (100, {"projected", "emptyDir"})


def test_a_bad_quantity_fails_every_pod_of_its_template_each_by_name() -> None:
    decoder = decode.PodDecoder(KEEP, {})

    def decode_with_one_decoder(raw: dict[str, Any]) -> list[Pod]:
        return decoder.pods(decoder.wire.pod_list.decode(msgspec.json.encode({"items": [raw]})).items)

    for name in ("first", "second"):
        bad = b.pod(name, namespace="ns", containers=[b.container(cpu="lots")])
        with pytest.raises(KubeUnavailable, match=rf"^pod ns/{name}: spec.containers\[0\].resources.requests.cpu: "):
            decode_with_one_decoder(bad)


def test_qos_counts_only_cpu_and_memory_as_the_api_server_does() -> None:
    raw = b.pod("p", containers=[b.container()], qos=None)
    raw["spec"]["containers"][0]["resources"] = {"requests": {"ephemeral-storage": "1Gi"}}

    assert decode_pod(raw).qos == "BestEffort"


def test_converting_while_decoding_gives_the_same_pods_in_order() -> None:
    raw = [
        b.pod(
            f"p{i}",
            namespace=f"ns-{i % 3}",
            owners=[b.owner("ReplicaSet", "rs-1")],
            annotations={"keep.me/please": "1"},
        )
        for i in range(7)
    ]
    body = msgspec.json.encode({"metadata": {"continue": "t"}, "items": raw})
    decoder = decode.PodDecoder(KEEP, {("ns-0", "rs-1"): ("Deployment", "web")})

    with decoder.converting_list() as pod_list:
        page = pod_list.decode(body)

    assert page.metadata.continue_ == "t"
    assert decode.converted(page.items) == decoder.pods(decoder.wire.pod_list.decode(body).items)
    assert [p.name for p in decode.converted(page.items)] == [f"p{i}" for i in range(7)]


def test_a_conversion_error_comes_out_of_the_converting_decode_naming_the_pod() -> None:
    raw = [b.pod("fine"), b.pod("bad", namespace="ns", created="yesterday")]
    body = msgspec.json.encode({"items": raw})

    with (
        decode.PodDecoder(KEEP, {}).converting_list() as pod_list,
        pytest.raises(KubeUnavailable, match=r"^pod ns/bad: metadata.creationTimestamp: not an RFC 3339 time"),
    ):
        pod_list.decode(body)


def test_the_converting_types_do_not_keep_the_decoder_alive_after_the_read() -> None:
    decoder = decode.PodDecoder(KEEP, {})
    alive = weakref.ref(decoder)
    gc.disable()  # the struct types built for the read wait for the collector: the decoder must not
    try:
        with decoder.converting_list() as pod_list:
            assert len(decode.converted(pod_list.decode(msgspec.json.encode({"items": [b.pod("p")]})).items)) == 1
        del decoder
        assert alive() is None
        del pod_list
    finally:
        gc.enable()
