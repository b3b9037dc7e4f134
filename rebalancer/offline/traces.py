"""Real CPU-usage traces (the Bitbrains GWA-T-12 format) for the demo, the simulator and back-tests.

Each file holds one VM: ``;``+tab separated, epoch-second timestamps (the header says ms, the values are
seconds), CPU cores, capacity in MHz and usage in MHz. Usage becomes millicores: MHz / (MHz per core).

Rows with 0 cores or 0 MHz capacity are samples of a VM that was not provisioned at that time: they
carry no usage (their usage column is 0 because nothing was measured, not because nothing ran), so they
are dropped as *unknown* and the VM's other rows are kept. A VM with no provisioned row at all is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

_COLUMNS = ("timestamp", "cores", "capacity_mhz", "usage_mhz")


class TraceError(ValueError):
    """A trace file cannot be read."""


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    timestamps: npt.NDArray[np.int64]  # epoch seconds, sorted, unique
    millicores: npt.NDArray[np.float64]
    capacity_m: npt.NDArray[np.float64]  # provisioned cores x 1000 at each sample (always > 0)
    unprovisioned: int = 0  # rows dropped because the VM had 0 cores or 0 MHz capacity then

    def window_quantile(self, end: float, seconds: float, q: float) -> float | None:
        """Quantile of the samples in (end - seconds, end]; None when the window holds none."""
        lo = np.searchsorted(self.timestamps, end - seconds, side="right")
        hi = np.searchsorted(self.timestamps, end, side="right")
        if hi <= lo:
            return None
        return float(np.quantile(self.millicores[lo:hi], q))


def load_bitbrains(path: str | Path) -> Trace | None:
    """Read one VM; None when no row has provisioned cores and capacity (the data README says skip them)."""
    p = Path(path)
    try:
        frame = pd.read_csv(
            p,
            sep=";",
            header=0,
            usecols=range(len(_COLUMNS)),
            names=list(_COLUMNS),
            dtype="float64",
            compression="infer",
            engine="c",
        )
    except OSError as exc:
        raise TraceError(f"{p}: {exc}") from exc
    except (ValueError, pd.errors.ParserError) as exc:
        raise TraceError(f"{p}: {exc}") from exc
    frame = frame.dropna()  # short rows
    ts = frame["timestamp"].to_numpy()
    if np.any(ts != np.floor(ts)):
        raise TraceError(f"{p}: timestamps must be whole epoch seconds")
    cores, capacity = frame["cores"].to_numpy(), frame["capacity_mhz"].to_numpy()
    provisioned = (cores > 0) & (capacity > 0)
    if not provisioned.any():
        return None
    ts_arr = ts[provisioned].astype(np.int64)
    cores, capacity = cores[provisioned], capacity[provisioned]
    usage = frame["usage_mhz"].to_numpy()[provisioned] / (capacity / cores) * 1000.0
    order = np.argsort(ts_arr, kind="stable")
    ts_arr = ts_arr[order]
    keep = np.concatenate(([True], np.diff(ts_arr) > 0))  # a few files repeat timestamps: keep the first
    name = p.name.split(".")[0]
    return Trace(
        name=name,
        timestamps=ts_arr[keep],
        millicores=usage[order][keep],
        capacity_m=(cores * 1000.0)[order][keep],
        unprovisioned=int((~provisioned).sum()),
    )
