"""What the benchmarks share: a synthetic cluster served in its own process, child runs, CPU and memory.

Every measurement runs in a fresh child process so that its peak RSS is its own; the servers run in
other processes and share the cores with it, as a real API server on the same machine would.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = {"cpu": (20, 50), "memory": (30, 70), "pods": (50, 90)}
"""The benchmarks' LowNodeUtilization thresholds and targets per resource, in percent."""


def resource_set(text: str) -> str:
    """``--resources``: a comma-separated set of cpu, memory and pods that names cpu (always thresholded)."""
    names = text.split(",")
    unknown = [name for name in names if name not in THRESHOLDS]
    if unknown or "cpu" not in names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--resources {text!r}: cpu and optionally memory, pods, comma-separated")
    return ",".join(name for name in THRESHOLDS if name in names)


def thresholds(resources: str, cpu_target: int = THRESHOLDS["cpu"][1]) -> tuple[str, str]:
    """The ``thresholds`` and ``targetThresholds`` mappings' YAML flow contents for ``resources``."""
    names = resources.split(",")
    targets = {**{name: high for name, (_, high) in THRESHOLDS.items()}, "cpu": cpu_target}
    return ", ".join(f"{n}: {THRESHOLDS[n][0]}" for n in names), ", ".join(f"{n}: {targets[n]}" for n in names)


def kubeconfig(url: str) -> str:
    path = Path(tempfile.mkdtemp()) / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "bench", "cluster": {"server": url}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                "current-context": "bench",
            }
        )
    )
    return str(path)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """This process's resident memory now (Linux /proc)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Received:
    """Bytes this process received over sockets (every ``recv_into``, as http.client reads a response)."""

    total = 0

    @classmethod
    def install(cls) -> None:
        original = socket.socket.recv_into
        if getattr(original, "counted", False):
            return

        def recv_into(sock: socket.socket, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
            got = original(sock, buffer, nbytes, flags)
            cls.total += got
            return got

        recv_into.counted = True  # type: ignore[attr-defined]
        socket.socket.recv_into = recv_into  # type: ignore[method-assign]


def bytes_read() -> int:
    """Bytes this process has received over sockets so far: across a read of the cluster, the bytes on the
    wire (HTTP headers and chunk framing included). Counting starts at the first call."""
    _Received.install()
    return _Received.total


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process so far (Linux /proc; 0.0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Served:
    url: str
    pid: int
    load_s: float


@contextmanager
def ready_child(argv: list[str], what: str, words: int) -> Iterator[tuple[int, list[str]]]:
    """A child process that prints ``READY`` and ``words - 1`` values on its first line once it serves, and
    stops when its standard input closes: (its pid, that line's words), until the block ends."""
    child = subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().split()
        if len(ready) != words or ready[0] != "READY":
            raise SystemExit(f"{what} did not start: {ready}")
        yield child.pid, ready
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=60)


@contextmanager
def served_cluster(nodes: int, pods: int) -> Iterator[Served]:
    """The test API server with a synthetic cluster (bench.serve_cluster), in its own process."""
    argv = [sys.executable, "-m", "bench.serve_cluster", "--nodes", str(nodes), "--pods", str(pods)]
    with ready_child(argv, "the test API server", 3) as (pid, ready):
        yield Served(ready[1], pid, float(ready[2]))


def run_child(module: str, mode: str, args: list[str]) -> dict[str, Any]:
    """Run ``python -m module --child mode *args`` and read the JSON object it prints last."""
    out = subprocess.run(
        [sys.executable, "-m", module, "--child", mode, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{module} --child {mode} failed:\n{out.stderr[-4000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def not_scraped_here(query: str) -> bool:
    """The fallback node sources' queries (node_exporter's series, the pods' memory summed by node): the
    canned cluster has the root cgroup of every node, so the cycle reads its nodes from there."""
    return "kube_pod_info" in query or (
        "container_memory_working_set_bytes{" in query and "id=" not in query and "sum by (node)" in query
    )
