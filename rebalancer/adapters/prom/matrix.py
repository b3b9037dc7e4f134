"""Range-query answers with one series per pod, decoded straight into flat numpy arrays and strictly checked.

A profile read asks for tens of thousands of pods x 24 (or more) points per day: msgspec decodes the body
into typed structs, the points a group of series at a time (the values' strings parsed as floats on the
way), and they land in three flat arrays: no Python object per point outlives its group. Anything else is
:class:`~rebalancer.domain.errors.MetricsMalformed` naming the query and the cause: not a success, not a
matrix, an answer with ``warnings`` (partial data), a series without its namespace or pod label, a pod twice
(unless raw samples are read), a value that is NaN, infinite, negative or not a number, a point outside the
time span asked for (an answer for another time, from a cache or proxy in front of Prometheus).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Annotated, Any, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from rebalancer.domain.errors import MetricsMalformed
from rebalancer.domain.model import PodKey

K = TypeVar("K", bound=Hashable)
_Label = Annotated[str, msgspec.Meta(min_length=1)]
_MAX_SHOWN = 300
_MS = 0.001  # Prometheus keeps times in milliseconds


class _PodLabels(msgspec.Struct, gc=False):
    namespace: _Label
    pod: _Label


class _PodSeries(msgspec.Struct, gc=False):
    metric: _PodLabels
    values: msgspec.Raw  # decoded a group of series at a time (_points)


class _Data(msgspec.Struct, gc=False):
    result: list[_PodSeries]
    result_type: str = msgspec.field(default="", name="resultType")


class _Answer(msgspec.Struct, gc=False):
    status: str
    data: _Data | None = None
    error: str = ""
    error_type: str = msgspec.field(default="", name="errorType")
    warnings: Any = None


_DECODER = msgspec.json.Decoder(_Answer)
_POINTS = msgspec.json.Decoder(list[list[tuple[float, float]]], strict=False)  # strict=False: "0.25" is 0.25
GROUP = 4096
"""Series whose points are decoded at a time: a point decoded is a Python tuple of two floats (over 100
bytes), so a whole answer's (1.7 million points for 70,000 pods) would take several times its arrays."""


class _HeadData(msgspec.Struct):
    result_type: str = msgspec.field(default="", name="resultType")


class _Head(msgspec.Struct):
    status: str = ""
    data: _HeadData | None = None


_HEAD = msgspec.json.Decoder(_Head)


@dataclass(frozen=True, slots=True)
class PodMatrix:
    """Points of a range answer: ``keys[series[i]]`` had ``values[i]`` (cores) at ``times[i]``."""

    keys: tuple[PodKey, ...]
    series: npt.NDArray[np.int64]
    times: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]


def pod_matrix(name: str, body: bytes, *, span: tuple[float, float], one_per_pod: bool = True) -> PodMatrix:
    """The checked points of a range answer with one series per (namespace, pod), each within ``span`` (the
    earliest and latest time a point may have, in seconds; Prometheus keeps times to the millisecond); without ``one_per_pod`` a pod may
    have several (raw samples keep the node label: a pod rescheduled within the batch's nodes)."""
    try:
        answer = _DECODER.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError included: names the place in the answer
        raise MetricsMalformed(f"query {name}: {_what_instead(body)}: {_clip(str(exc))}") from exc
    if answer.status != "success" or answer.data is None:
        raise MetricsMalformed(
            f"query {name}: Prometheus answered {answer.status} ({answer.error_type}): {answer.error}"
        )
    if answer.data.result_type != "matrix":
        raise MetricsMalformed(f"query {name}: expected a range vector (matrix), got {answer.data.result_type!r}")
    refuse_warnings(name, answer.warnings)
    result = answer.data.result
    keys = tuple((s.metric.namespace, s.metric.pod) for s in result)
    if one_per_pod and len(set(keys)) != len(keys):
        seen: set[PodKey] = set()
        for ns, pod in keys:
            if (ns, pod) in seen:
                raise MetricsMalformed(f"query {name}: more than one series for pod {ns}/{pod}")
            seen.add((ns, pod))
    try:
        counts, points = _points(result)
    except msgspec.DecodeError as exc:
        raise MetricsMalformed(f"query {name}: {_what_instead(body)}: {_clip(str(exc))}") from exc
    times, values = points[0::2], points[1::2]
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        first = int(np.argmax(bad))
        series = int(np.searchsorted(np.cumsum(counts), first, side="right"))
        ns, pod = keys[series]
        raise MetricsMalformed(f"query {name}: series of pod {ns}/{pod} has the value {float(values[first])}")
    earliest, latest = span
    outside = (times < earliest - _MS / 2) | (times > latest + _MS / 2)
    if outside.any():
        first = int(np.argmax(outside))
        ns, pod = keys[int(np.searchsorted(np.cumsum(counts), first, side="right"))]
        raise MetricsMalformed(
            f"query {name}: series of pod {ns}/{pod} has a point at {float(times[first]):.3f}, outside "
            f"{earliest:.3f}..{latest:.3f} asked for: an answer for another time (from a cache or proxy that "
            "ignores the query's time?) is not used"
        )
    return PodMatrix(keys, np.repeat(np.arange(len(keys), dtype=np.int64), counts), times, values)


def _points(result: Sequence[_PodSeries]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each series' number of points, and all points' (time, value) pairs flat, series after series."""
    counts = np.empty(len(result), dtype=np.int64)
    flats = [np.empty(0, dtype=np.float64)]
    for start in range(0, len(result), GROUP):
        group = _POINTS.decode(b"[" + b",".join(s.values for s in result[start : start + GROUP]) + b"]")
        counts[start : start + len(group)] = [len(points) for points in group]
        pairs = chain.from_iterable(group)
        flats.append(np.fromiter(chain.from_iterable(pairs), dtype=np.float64, count=2 * sum(map(len, group))))
    return counts, np.concatenate(flats)


_INFO = "PromQL info:"
"""An advisory about the query, not the data (rate() of a counter whose name does not end in _total):
Prometheus 2.47 to 2.53 put these in ``warnings``, later ones in ``infos``."""


def refuse_warnings(name: str, warnings: object) -> None:
    """An answer with ``warnings`` may be partial (a remote-read endpoint failed, a partial response): the
    error quotes them. PromQL's info annotations are not warnings."""
    if isinstance(warnings, list):
        warnings = [w for w in warnings if not (isinstance(w, str) and w.startswith(_INFO))]
    if warnings:
        shown = "; ".join(map(str, warnings)) if isinstance(warnings, list) else repr(warnings)
        raise MetricsMalformed(
            f"query {name}: Prometheus answered with warnings, so its answer may be partial and is not used: "
            f"{_clip(' '.join(shown.split()))}"
        )


def rows_of(index: dict[K, int], keys: Sequence[K]) -> npt.NDArray[np.int64]:
    """Each key's row in ``index``; a key not in it yet gets the next row (added to ``index``). Looked up in
    one C loop: after the first answer nearly every key is known."""
    rows = list(map(index.get, keys))
    if None in rows:
        rows = [index.setdefault(key, len(index)) if row is None else row for key, row in zip(keys, rows, strict=True)]
    return np.array(rows, dtype=np.int64)


def _what_instead(body: bytes) -> str:
    try:
        head = _HEAD.decode(body)
    except msgspec.DecodeError:
        return "not a range vector of pod series"
    kind = head.data.result_type if head.data is not None else ""
    if head.status == "success" and kind != "matrix":
        return f"expected a range vector (matrix), got {kind or 'no resultType'!r}"
    return "not a range vector of pod series"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
