"""Real CPU-usage traces (the Bitbrains GWA-T-12 format) for the demo, the simulator and back-tests.

Each file holds one VM: ``;``+tab separated, epoch-second timestamps (the header says ms, the values are
seconds), CPU cores, capacity in MHz and usage in MHz. Usage becomes millicores: MHz / (MHz per core).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt


class TraceError(ValueError):
    """A trace file cannot be read."""


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    timestamps: npt.NDArray[np.int64]  # epoch seconds, sorted, unique
    millicores: npt.NDArray[np.float64]

    def window_quantile(self, end: float, seconds: float, q: float) -> float | None:
        """Quantile of the samples in (end - seconds, end]; None when the window holds none."""
        lo = np.searchsorted(self.timestamps, end - seconds, side="right")
        hi = np.searchsorted(self.timestamps, end, side="right")
        if hi <= lo:
            return None
        return float(np.quantile(self.millicores[lo:hi], q))


def load_bitbrains(path: str | Path) -> Trace | None:
    """Read one VM; None for VMs with no provisioned cores or capacity (the README says skip them)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    times: list[int] = []
    usage: list[float] = []
    try:
        with opener(p, "rt", encoding="utf-8") as fh:
            next(fh, None)  # header
            for lineno, line in enumerate(fh, start=2):
                fields = line.split(";")
                if len(fields) < 4:
                    continue
                try:
                    ts, cores, capacity, mhz = int(fields[0]), float(fields[1]), float(fields[2]), float(fields[3])
                except ValueError as exc:
                    raise TraceError(f"{p}:{lineno}: {exc}") from exc
                if cores <= 0 or capacity <= 0:
                    return None
                times.append(ts)
                usage.append(mhz / (capacity / cores) * 1000.0)
    except OSError as exc:
        raise TraceError(f"{p}: {exc}") from exc
    if not times:
        return None
    ts_arr = np.asarray(times, dtype=np.int64)
    order = np.argsort(ts_arr, kind="stable")
    ts_arr, values = ts_arr[order], np.asarray(usage, dtype=np.float64)[order]
    keep = np.concatenate(([True], np.diff(ts_arr) > 0))  # a few files repeat timestamps
    name = p.name.split(".")[0]
    return Trace(name=name, timestamps=ts_arr[keep], millicores=values[keep])
