"""How fast pods are decoded from LIST pages, and a whole read_facts against the test API server.

    .venv/bin/python -m bench.kube_list [pods] [end_to_end_pods] [list modes, default watchList,paged]

Prints figures; it is not a timed test. Pods are about 8 KB of JSON each (managedFields, env,
probes, a last-applied-configuration annotation), as in a real cluster. The whole read (against the test API server
in its own process, serving bench.cluster_gen's pods) is timed once per list mode (policy ``kubernetes.listMode``), three rounds with the modes alternating, with this process's
CPU time and the bytes it read from the wire beside the wall time (medians).
"""

from __future__ import annotations

import gc
import resource
import statistics
import sys
import time
from typing import Any

import msgspec

from bench.harness import bytes_read, kubeconfig, served_cluster
from rebalancer.adapters.kube import KubeSource, connect, decode
from rebalancer.app.collector import paused as collector_paused
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


def end_to_end(count: int, modes: list[str], rounds: int = 3) -> None:
    """The whole read against the test API server in its own process (bench.serve_cluster's cluster)."""
    figures: dict[str, list[tuple[float, float, int]]] = {mode: [] for mode in modes}
    with served_cluster(max(1, count // 30), count) as served:
        api = connect(kubeconfig(served.url))
        KubeSource(api, ANNOTATIONS).read_facts()  # warm the server's encoded-item cache: time the client
        for _ in range(rounds):
            for mode in modes:
                source = KubeSource(api, ANNOTATIONS, list_mode=mode)  # type: ignore[arg-type]
                cpu, read, started = time.process_time(), bytes_read(), time.perf_counter()
                with collector_paused():
                    facts = source.read_facts()
                elapsed = time.perf_counter() - started
                figures[mode].append((elapsed, time.process_time() - cpu, bytes_read() - read))
                assert source.last_stats.modes["pods"] == ("paged" if mode == "paged" else "watchList")
    print(f"read_facts over loopback, {len(facts.pods):,} pods and {len(facts.nodes)} nodes, medians of {rounds}:")
    for mode, runs in figures.items():
        wall, cpu, wire = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"  {mode}: {wall:.2f} s wall, {cpu:.2f} s client CPU, {wire / 1e6:.0f} MB on the wire")


if __name__ == "__main__":
    decode_only(int(sys.argv[1]) if len(sys.argv) > 1 else 150_000)
    end_to_end(
        int(sys.argv[2]) if len(sys.argv) > 2 else 20_000,
        (sys.argv[3] if len(sys.argv) > 3 else "watchList,paged").split(","),
    )
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
