"""Recorded per-entity CPU usage for back-tests: a Bitbrains directory, or a CSV / Parquet table.

- A directory: one Bitbrains VM per ``N.csv.gz`` (or ``N.csv``) file, read by :mod:`rebalancer.offline.traces`.
  The sample is a Dutch data centre's month, so its days are Europe/Amsterdam days.
- A ``.csv`` / ``.csv.gz`` / ``.parquet`` file in long form, one row per sample, columns ``entity``,
  ``timestamp`` (epoch seconds, or ISO 8601 with an offset), ``usage`` and ``capacity`` (same unit, for
  example millicores). Its days are UTC days unless a time zone is given.

Utilization is usage / capacity in percent. Rows without capacity (0 or empty) are unknown and dropped.
Bad input raises :class:`~rebalancer.domain.errors.ConfigError` naming the file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rebalancer.domain.errors import ConfigError
from rebalancer.offline.traces import TraceError, load_bitbrains

BITBRAINS_TIME_ZONE = "Europe/Amsterdam"
COLUMNS = ("entity", "timestamp", "usage", "capacity")

Progress = Callable[[int, int, str], None]
"""progress(done, total, what): called as files are read and as the back-test advances."""


@dataclass(frozen=True, slots=True)
class UsageData:
    frame: pd.DataFrame  # entity (str), timestamp (int64 epoch seconds), pct (float): sorted by entity, time
    time_zone: str
    source: str
    skipped: tuple[str, ...] = ()  # entities without one usable row (for example VMs never provisioned)

    @property
    def entities(self) -> tuple[str, ...]:
        return tuple(pd.unique(self.frame["entity"]))


def _vm_number(path: Path) -> tuple[int, str]:
    stem = path.name.split(".")[0]
    return (int(stem), stem) if stem.isdigit() else (2**62, stem)


def load_usage(
    path: str | Path,
    *,
    entities: Sequence[str] | None = None,
    limit: int | None = None,
    time_zone: str | None = None,
    progress: Progress | None = None,
) -> UsageData:
    """Read recorded usage; ``entities`` or ``limit`` (the first N, in VM-number order) keep a subset."""
    p = Path(path)
    if p.is_dir():
        return _load_bitbrains_dir(p, entities, limit, time_zone, progress)
    if not p.exists():
        raise ConfigError(str(p), [("", "no such file or directory")])
    if p.name.endswith(".parquet"):
        try:
            raw = pd.read_parquet(p)
        except ImportError as exc:
            raise ConfigError(
                str(p),
                [("", f"reading Parquet needs pyarrow, not installed: pip install pyarrow ({exc})")],
            ) from exc
        except (OSError, ValueError) as exc:
            raise ConfigError(str(p), [("", f"cannot read Parquet: {exc}")]) from exc
    else:
        try:
            raw = pd.read_csv(p, compression="infer")
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise ConfigError(str(p), [("", f"cannot read CSV: {exc}")]) from exc
    frame = _long_form(raw, str(p))
    if entities is not None:
        frame = frame[frame["entity"].isin(set(entities))]
    if limit is not None:
        frame = frame[frame["entity"].isin(set(pd.unique(frame["entity"])[:limit]))]
    if progress is not None:
        progress(1, 1, f"read {p.name}")
    return UsageData(_sorted(frame), time_zone or "UTC", str(p))


def _long_form(raw: pd.DataFrame, source: str) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise ConfigError(source, [("", f"missing column(s) {', '.join(missing)}; need {', '.join(COLUMNS)}")])
    ts = raw["timestamp"]
    try:
        if pd.api.types.is_numeric_dtype(ts):
            seconds = ts.to_numpy(dtype=np.float64)
        else:
            since_epoch = pd.to_datetime(ts, utc=True) - pd.Timestamp(0, tz="UTC")
            seconds = (since_epoch / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64)
        usage = pd.to_numeric(raw["usage"]).to_numpy(dtype=np.float64)
        capacity = pd.to_numeric(raw["capacity"]).to_numpy(dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise ConfigError(source, [("", f"bad timestamp, usage or capacity value: {exc}")]) from exc
    if np.isnan(seconds).any():
        raise ConfigError(source, [("timestamp", "empty timestamps")])
    if (usage < 0).any():
        raise ConfigError(source, [("usage", "negative usage")])
    known = (capacity > 0) & ~np.isnan(usage)
    return pd.DataFrame(
        {
            "entity": raw["entity"].astype(str).to_numpy()[known],
            "timestamp": seconds[known].astype(np.int64),
            "pct": 100.0 * usage[known] / capacity[known],
        }
    )


def _load_bitbrains_dir(
    directory: Path,
    entities: Sequence[str] | None,
    limit: int | None,
    time_zone: str | None,
    progress: Progress | None,
) -> UsageData:
    files = sorted(
        (f for f in directory.iterdir() if f.name.endswith((".csv.gz", ".csv"))),
        key=_vm_number,
    )
    if entities is not None:
        wanted = set(entities)
        files = [f for f in files if f.name.split(".")[0] in wanted]
    if limit is not None:
        files = files[:limit]
    if not files:
        raise ConfigError(str(directory), [("", "no Bitbrains files (N.csv.gz) to read")])
    parts: list[pd.DataFrame] = []
    skipped: list[str] = []
    for done, f in enumerate(files, start=1):
        try:
            trace = load_bitbrains(f)
        except TraceError as exc:
            raise ConfigError(str(f), [("", str(exc))]) from exc
        if trace is None:
            skipped.append(f.name.split(".")[0])
        else:
            parts.append(
                pd.DataFrame(
                    {
                        "entity": trace.name,
                        "timestamp": trace.timestamps,
                        "pct": 100.0 * trace.millicores / trace.capacity_m,
                    }
                )
            )
        if progress is not None:
            progress(done, len(files), f"read {f.name}")
    frame = (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in ("entity", "timestamp", "pct")})
    )
    return UsageData(frame, time_zone or BITBRAINS_TIME_ZONE, str(directory), tuple(skipped))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values(["entity", "timestamp"], kind="stable")
    return frame.drop_duplicates(["entity", "timestamp"], keep="first").reset_index(drop=True)
