"""How fast pods are decoded from LIST pages, and a whole read_facts against the test API server.

    .venv/bin/python -m bench.kube_list [pods] [end_to_end_pods]

Prints figures; it is not a timed test. Pods are about 8 KB of JSON each (managedFields, env,
probes, a last-applied-configuration annotation), as in a real cluster.
"""

from __future__ import annotations

import gc
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from rebalancer.adapters.kube import KubeSource, connect, decode
from rebalancer.app.collector import paused as collector_paused
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

PAGE = 500
ANNOTATIONS = frozenset({"descheduler.alpha.kubernetes.io/evict", "controller.kubernetes.io/pod-deletion-cost"})


def realistic_pod(i: int) -> dict[str, Any]:
    rs = f"web-{i // 50:05d}-5887b1109c"
    return b.pod(
        f"{rs}-{i:06d}",
        namespace=f"team-{i % 40}",
        node=f"node-{i % 500}",
        owners=[b.owner("ReplicaSet", rs)],
        labels={"app": f"web-{i // 50}", "pod-template-hash": "5887b1109c", "team": f"team-{i % 40}"},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 3000 + "}"},
        containers=[
            b.container("app", cpu="250m", memory="256Mi", limit_memory="512Mi"),
            b.container("proxy", cpu="50m", memory="64Mi"),
        ],
        init_containers=[b.container("init", cpu="100m", memory="32Mi")],
        affinity=b.required_affinity([("pool", "In", ["general"])]),
        volumes=[{"name": "tmp", "emptyDir": {}}],
    )


def decode_only(total: int) -> None:
    items = [realistic_pod(i) for i in range(PAGE)]
    page = msgspec.json.encode({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
    print(f"page of {PAGE} pods: {len(page) / 1e6:.2f} MB ({len(page) // PAGE} bytes per pod)")
    for label, paused in (("gc enabled", False), ("gc paused", True)):
        gc.collect()
        pods: list[Any] = []
        started = time.perf_counter()
        if paused:
            with collector_paused():
                _decode_pages(page, total, pods)
        else:
            _decode_pages(page, total, pods)
        elapsed = time.perf_counter() - started
        print(f"decode {total:,} pods ({label}): {elapsed:.2f} s, {total / elapsed:,.0f} pods/s")
        del pods


def _decode_pages(page: bytes, total: int, out: list[Any]) -> None:
    """As a snapshot does: each pod converted as soon as msgspec has decoded it."""
    with decode.PodDecoder(ANNOTATIONS, {}).converting_list() as pod_list:
        for _ in range(total // PAGE):
            out.extend(decode.converted(pod_list.decode(page).items))


def end_to_end(count: int) -> None:
    with TestApiServer() as server, tempfile.TemporaryDirectory() as tmp:
        server.add(*(b.node(f"node-{i}") for i in range(500)))
        for i in range(count):
            server.store.create(realistic_pod(i))
        config = b.write_kubeconfig(Path(tmp) / "kubeconfig", server.url, token=None)
        source = KubeSource(connect(kubeconfig=str(config)), ANNOTATIONS)
        source.read_facts()  # warm the server's encoded-item cache: time the client, not the double
        started = time.perf_counter()
        facts = source.read_facts()
        elapsed = time.perf_counter() - started
    print(f"read_facts over loopback, {len(facts.pods):,} pods and {len(facts.nodes)} nodes: {elapsed:.2f} s")


if __name__ == "__main__":
    decode_only(int(sys.argv[1]) if len(sys.argv) > 1 else 150_000)
    end_to_end(int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
