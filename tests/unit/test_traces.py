"""The Bitbrains reader: unprovisioned rows are unknown (dropped), not a reason to lose the whole VM."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from rebalancer.offline.traces import TraceError, load_bitbrains
from tests.shared_data import TRACE_DIR

HEADER = "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%]\n"


def write_vm(path: Path, rows: list[tuple[int, int, float, float]]) -> Path:
    body = "".join(f"{ts};\t{cores};\t{cap};\t{mhz};\t0.0\n" for ts, cores, cap, mhz in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(HEADER + body)
    else:
        path.write_text(HEADER + body, encoding="utf-8")
    return path


def test_unprovisioned_rows_are_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    rows = [
        (1000, 2, 4000.0, 1000.0),  # 2 cores of 2000 MHz: 1000 MHz is half a core
        (1300, 0, 0.0, 0.0),  # not provisioned: unknown
        (1600, 2, 4000.0, 3000.0),
        (1900, 2, 0.0, 0.0),  # capacity 0: unknown
        (2200, 4, 8000.0, 8000.0),
    ]
    trace = load_bitbrains(write_vm(tmp_path / "7.csv.gz", rows))
    assert trace is not None
    assert trace.name == "7"
    assert trace.timestamps.tolist() == [1000, 1600, 2200]
    np.testing.assert_allclose(trace.millicores, [500.0, 1500.0, 4000.0])
    np.testing.assert_allclose(trace.capacity_m, [2000.0, 2000.0, 4000.0])
    assert trace.unprovisioned == 2


def test_duplicate_timestamp_keeps_the_provisioned_row(tmp_path: Path) -> None:
    rows = [(1000, 0, 0.0, 0.0), (1000, 1, 2000.0, 2000.0), (1000, 1, 2000.0, 500.0), (700, 1, 2000.0, 200.0)]
    trace = load_bitbrains(write_vm(tmp_path / "3.csv", rows))
    assert trace is not None
    assert trace.timestamps.tolist() == [700, 1000]
    np.testing.assert_allclose(trace.millicores, [100.0, 1000.0])


def test_a_vm_never_provisioned_is_skipped(tmp_path: Path) -> None:
    assert load_bitbrains(write_vm(tmp_path / "1.csv.gz", [(1000, 0, 0.0, 0.0), (1300, 0, 0.0, 0.0)])) is None


def test_malformed_value_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "9.csv"
    path.write_text(HEADER + "1000;\t2;\tlots;\t5.0;\t0\n")
    with pytest.raises(TraceError, match=r"9\.csv"):
        load_bitbrains(path)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope"):
        load_bitbrains(tmp_path / "nope.csv.gz")


def test_bitbrains_vm_with_unprovisioned_hours_is_kept() -> None:
    trace = load_bitbrains(TRACE_DIR / "138.csv.gz")  # 4,052 rows, a few hundred with 0 cores
    assert trace is not None
    assert trace.unprovisioned > 0
    assert len(trace.timestamps) > 3000
    assert np.all(np.diff(trace.timestamps) > 0)
    assert np.all(trace.capacity_m > 0)
