"""Backfill a synthetic history (``bench.history_gen``) into a Prometheus TSDB, cached by its parameters.

promtool 2.42's ``tsdb create-blocks-from openmetrics`` writes 2 h blocks and parses its whole input once
more for every block it writes, so one file for 9 days would be parsed ~110 times. The history is written
as one OpenMetrics file per 2 h block instead (consecutive small blocks share a file of about 2 MB), each
handed to promtool as soon as it is written (two promtool processes at a time, the machine's two cores),
and deleted once its blocks exist.

Then (unless ``compact`` is off) the real Prometheus is started once on the directory so that its own
compactor merges the 2 h blocks as a long-running server would have (2 h -> 6 h -> 18 h with the default
15-day retention); the benchmark then measures queries on those blocks, with no compaction running.
``manifest.json``, written last, marks a complete directory: reruns reuse it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.history_gen import BlockWriter, Shape
from bench.snapshot_bench import process_cpu_s
from tests.adapters.prom_fixture import PrometheusServer, require_binary

DEFAULT_CACHE = Path("/tmp/rebalancer-predictor-bench")
RETENTION = "15d"  # Prometheus' default, passed explicitly because the test fixture's default is 30d
PROMTOOL_AT_ONCE = 2
# promtool parses a file once per 2 h block in it: small blocks share a file (fewer promtool start-ups),
# large ones get a file each
FILE_BYTES = 2_000_000
COMPACTION_TIMEOUT = 1800.0

Log = Callable[[str], None]


def prometheus_on(root: Path) -> PrometheusServer:
    """The real Prometheus on a backfilled directory, with its default query limits (no flag changes them)."""
    return PrometheusServer(root, retention=RETENTION)


def ensure_tsdb(shape: Shape, cache: Path, *, rebuild: bool, compact: bool, log: Log) -> tuple[Path, dict[str, Any]]:
    """The directory of the backfilled TSDB for ``shape`` (``<root>/data``) and its manifest."""
    root = cache / (shape.key() + ("" if compact else "-2h"))
    manifest_path = root / "manifest.json"
    if manifest_path.exists() and not rebuild:
        manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        log(f"backfill: reusing {root} (built in {manifest['seconds']['total']:.0f} s; --rebuild to redo it)")
        return root, manifest
    shutil.rmtree(root, ignore_errors=True)
    (root / "data").mkdir(parents=True)
    started = time.perf_counter()
    built = _backfill(shape, root, log)
    seconds = built.pop("seconds")
    backfilled = time.perf_counter()
    blocks_before = _block_count(root / "data")
    compaction = _compact(root, log) if compact else {}
    manifest = {
        "shape": asdict(shape),
        "key": shape.key(),
        **built,
        "blocks_written": blocks_before,
        "blocks": _block_count(root / "data"),
        "disk_mb": _size_mb(root / "data"),
        "compaction": compaction,
        "seconds": {
            **seconds,
            "compact": time.perf_counter() - backfilled,
            "total": time.perf_counter() - started,
        },
    }
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return root, manifest


def _backfill(shape: Shape, root: Path, log: Log) -> dict[str, Any]:
    promtool = require_binary("promtool")
    text_dir = root / "text"
    text_dir.mkdir()
    writer = BlockWriter(shape)
    blocks = len(shape.blocks())
    log(
        f"backfill: {writer.pop.size} pods with history ({int(writer.pop.served.sum())} served), {shape.days} days, "
        f"{shape.form} form every {shape.step} s, {blocks} blocks of 2 h -> {root}"
    )
    generate_s = 0.0
    text_bytes = 0
    files = 0
    pending: list[Future[float]] = []
    batch: list[bytes] = []
    started = time.perf_counter()

    def flush(pool: ThreadPoolExecutor) -> None:
        nonlocal files
        path = text_dir / f"blocks-{files:04d}.om"
        path.write_bytes(b"".join(batch) + b"# EOF\n")
        batch.clear()
        files += 1
        pending.append(pool.submit(_promtool, promtool, path, root / "data"))
        while len(pending) > PROMTOOL_AT_ONCE:  # at most a few files on disk at once
            pending.pop(0).result()

    with ThreadPoolExecutor(max_workers=PROMTOOL_AT_ONCE) as pool:
        for done, block in enumerate(shape.blocks(), start=1):
            t0 = time.perf_counter()
            text = writer.block_text(block)
            generate_s += time.perf_counter() - t0
            text_bytes += len(text)
            batch.append(text)
            del text
            if sum(map(len, batch)) >= FILE_BYTES:
                flush(pool)
            if done % 12 == 0 or done == blocks:
                log(f"  {done}/{blocks} blocks generated, {time.perf_counter() - started:.0f} s")
        if batch:
            flush(pool)
        for future in pending:
            future.result()
    text_dir.rmdir()
    return {
        "samples": writer.samples,
        "series_pods": writer.pop.size,
        "text_gb": text_bytes / 1e9,
        "promtool_files": files,
        "seconds": {"generate": generate_s, "backfill": time.perf_counter() - started},
    }


def _promtool(promtool: str, path: Path, data: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed on {path}:\n{done.stdout}\n{done.stderr}")
    path.unlink()
    return time.perf_counter() - started


def _compact(root: Path, log: Log) -> dict[str, Any]:
    """Lets Prometheus compact the 2 h blocks (its first compaction starts a minute after start-up)."""
    log(f"compaction: starting Prometheus on {_block_count(root / 'data')} blocks; it compacts after a minute")
    server = prometheus_on(root).start()
    try:
        pid = server.pid
        assert pid is not None
        deadline = time.monotonic() + COMPACTION_TIMEOUT
        while time.monotonic() < deadline:
            metrics = _metrics(server.url)
            if metrics.get("prometheus_tsdb_compactions_triggered_total", 0) >= 1:
                cpu = process_cpu_s(pid)
                time.sleep(5)
                if process_cpu_s(pid) - cpu < 0.25:  # idle: the compactor has nothing left to do
                    break
            else:
                time.sleep(2)
        else:
            raise RuntimeError(f"Prometheus did not finish compacting within {COMPACTION_TIMEOUT:.0f} s")
        metrics = _metrics(server.url)
    finally:
        server.stop()
    log(f"compaction: {int(metrics.get('prometheus_tsdb_compactions_total', 0))} compactions")
    return {
        "compactions": metrics.get("prometheus_tsdb_compactions_total", 0),
        "failed": metrics.get("prometheus_tsdb_compactions_failed_total", 0),
    }


def _metrics(url: str) -> dict[str, float]:
    """Prometheus' own unlabelled metrics (``name value`` lines of /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


def _block_count(data: Path) -> int:
    return sum(1 for p in data.iterdir() if (p / "meta.json").exists())


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
