"""Serve a synthetic cluster from the test API server until stdin closes (a benchmark helper).

    python -m bench.serve_cluster --nodes 5000 --pods 150000

Prints ``READY <url> <seconds to load>`` once every object is loaded. Besides the Kubernetes API it
answers ``GET /bench/evictions?after=N&wait=S``: the eviction requests received from the N-th on (waiting
up to S seconds for one), each with the wall-clock time it reached the server, so that a benchmark times
an eviction where it lands instead of by listing pods, and waits for it without polling over HTTP.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.cluster_gen import list_item, node, pod_bytes, replica_sets_for
from tests.kubeapi import TestApiServer
from tests.kubeapi.server import Request, Response

EVICTIONS_PATH = "/bench/evictions"


def evictions_route(server: TestApiServer) -> None:
    def answer(request: Request) -> Response:
        after = int(request.query.get("after") or 0)
        deadline = time.monotonic() + float(request.query.get("wait") or 0)
        while len(server.eviction.records) <= after and time.monotonic() < deadline:
            time.sleep(0.002)  # in-process and cheap: no request per check
        records = server.eviction.records[after:]
        return Response.of(
            200,
            [{"namespace": r.namespace, "name": r.name, "code": r.code, "receivedAt": r.received_at} for r in records],
        )

    server.route("GET", EVICTIONS_PATH, answer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    server = TestApiServer()
    server.record_requests = False
    evictions_route(server)
    store = server.store
    store.load_encoded("nodes", (list_item(node(i)) for i in range(args.nodes)))
    store.load_encoded("replicasets", (list_item(rs) for rs in replica_sets_for(args.pods)))
    store.load_encoded("pods", (pod_bytes(i, args.nodes) for i in range(args.pods)))
    print(f"READY {server.url} {time.perf_counter() - started:.1f}", flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop()


if __name__ == "__main__":
    main()
