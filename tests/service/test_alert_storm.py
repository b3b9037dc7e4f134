"""Alert storm: 2,000 webhook posts within 10 s for 50 nodes, over real HTTP, into the production
runner, planner, limiters and evictor (the cluster behind them in memory). No crash, work coalesced per
node, every cap held, memory bounded."""

from __future__ import annotations

import http.client
import json
import resource
import threading
import time
from pathlib import Path

from rebalancer.actions.evictor import Evictor
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.protections import Protections
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from rebalancer.service import make_app, serve_http
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Service, Trigger
from tests.builders import node, pod
from tests.unit.eviction_doubles import MemoryCluster, MemoryStore

HOT = [f"hot-{i:02d}" for i in range(50)]
COLD = [f"cold-{i:02d}" for i in range(50)]
CAP = 20
POLICY = f"""
pools: {{label: pool}}
strategies:
- {{kind: LowNodeUtilization, thresholds: {{cpu: 20}}, targetThresholds: {{cpu: 70}}, schedule: {{interval: 1h}}}}
limits: {{global: {{maxPerPeriod: [{{count: {CAP}, period: 1h}}]}}}}
service: {{runOnStart: false, webhook: {{alertNodeCooldown: 1s}}}}
"""


class Cluster:
    """Facts and usage that follow the evictions, and the cycle the runner calls."""

    def __init__(self) -> None:
        pods = [pod(f"{n}-p{j}", n, workload=f"w{j}") for n in HOT for j in range(4)]
        self.memory = MemoryCluster(tuple(pods), ())
        self.store = MemoryStore()
        self.backoff = MemoryStore()
        self.cycles: list[frozenset[str]] = []

    def __call__(self, policy: Policy, trigger: Trigger) -> CycleResult:
        self.cycles.append(trigger.nodes or frozenset())
        live = tuple(self.memory.pods.values())
        node_usage = dict.fromkeys(HOT, 9000) | dict.fromkeys(COLD, 500)
        usage = UsageReport(node_cpu_m=node_usage, pod_cpu_m={p.key: 2000 for p in live})
        facts = ClusterFacts(tuple(node(n, pool="a") for n in (*HOT, *COLD)), live, ())
        snapshot, plan = plan_cycle(facts, usage, policy, time.time(), trigger.nodes)
        evictor = Evictor(self.memory, self.store, self.backoff, policy.limits,
                          Protections.from_settings(policy.protections))  # fmt: skip
        return CycleResult(plan, evictor.apply(plan, snapshot))


def body(node_name: str, i: int) -> bytes:
    alert = {"status": "firing", "labels": {"alertname": "NodeCPUHigh", "node": node_name},
             "annotations": {}, "startsAt": "2026-11-22T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
             "generatorURL": "", "fingerprint": f"{i:016x}"}  # fmt: skip
    payload = {"version": "4", "groupKey": f"{{}}:{{node=\"{node_name}\"}}", "truncatedAlerts": 0,
               "status": "firing", "receiver": "rebalancer", "groupLabels": {"node": node_name},
               "commonLabels": alert["labels"], "commonAnnotations": {}, "externalURL": "", "alerts": [alert]}  # fmt: skip
    return json.dumps(payload).encode()


def test_two_thousand_alerts_in_ten_seconds(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    cluster = Cluster()
    metrics = Metrics()
    service = Service(policy_file, cluster, metrics, lambda: True)
    app = make_app(
        metrics=metrics,
        submit=lambda alerts: service.submit_alerts((a.node, a.status, a.reason_if_unusable or "") for a in alerts),
        is_leader=lambda: True,
        known_nodes=lambda: frozenset((*HOT, *COLD)),
    )
    server = serve_http(app, "127.0.0.1", 0)
    service.start()
    codes: list[int] = []
    lock = threading.Lock()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def sender(worker: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for i in range(worker, 2000, 8):
            data = body(HOT[i % len(HOT)], i)
            connection.request("POST", "/webhook/alertmanager", data, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            with lock:
                codes.append(answer.status)
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

    started = time.monotonic()
    threads = [threading.Thread(target=sender, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    time.sleep(1.5)  # let the last coalesced cycle run
    service.stop()
    server.stop()

    assert elapsed < 10, f"2,000 posts took {elapsed:.1f} s"
    assert codes.count(202) == 2000, {c: codes.count(c) for c in set(codes)}
    assert 1 <= len(cluster.cycles) < 400, len(cluster.cycles)  # coalesced: far fewer cycles than alerts
    assert max(len(nodes) for nodes in cluster.cycles) > 1  # several nodes per cycle
    evicted = len(cluster.memory.evicted)
    assert 0 < evicted <= CAP  # the global cap held across every alert-driven cycle
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 200, f"peak RSS grew by {grown_mb:.0f} MB"
