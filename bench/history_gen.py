"""Synthetic per-pod CPU history for the predictor benchmark (numpy, generated one 2 h block at a time).

The pods are the ones ``bench.serve_cluster`` serves (same names, namespaces and nodes, from
``bench.cluster_gen.pod_bytes``), plus pods that are gone from the cluster but still have history.
Each pod's CPU, in cores at time ``t``:

    level(workload) x spread(pod) x diurnal(workload, hour) x weekend(workload) x day(pod, day) x noise
    + a burst on some days only for "hot-day" pods

- the workload (namespace + ReplicaSet) sets the level (log-normal) and the daily curve (peak hour, width,
  height); its pods sit at different levels around it;
- some workloads are quieter on weekends; every pod's day varies a little; samples are noisy;
- about 8 % of pods are hot for 1-4 hours on about a third of the days only;
- churn: about 10 % of the served pods were created during the last days (1 % today: no history in the
  window at all), and 4 % more pods ended days ago (history only, not in the cluster).

Values are integers in 1e-4 cores (``UNIT``), so the text Prometheus reads is exact and the daily quantiles
the benchmark expects can be recomputed from the same integers. Noise comes from a generator seeded by
(seed, block, series kind), so any block can be regenerated on its own to check what Prometheus answers.

Two series forms:

- ``rule``: the output of a recording rule ``namespace_pod:cpu_usage:rate5m{namespace,pod,node}`` every
  ``step`` seconds (a gauge: the pod's cores), the hourly rule ``namespace_pod:cpu_usage:avg1h`` over it
  (at 23 minutes past every hour, as a rule group's fixed offset puts it: the mean of the samples in the
  hour before, written with 9 decimals), plus the last 15 minutes of cAdvisor counters so that the
  predictor's "current usage" read finds something;
- ``cadvisor``: ``container_cpu_usage_seconds_total`` counters scraped every ``step`` seconds for the whole
  history, two containers per pod (app and sidecar, as the served pods have) and the node's root cgroup
  (``id="/"``: system daemons plus every pod), which the default subquery form reads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from bench.cluster_gen import pod_bytes

DAY = 86_400
BLOCK = 7_200  # promtool 2.42 writes 2 h blocks aligned on multiples of 2 h
UNIT = 10_000  # values in 1e-4 cores
MAX_CORES_UNITS = 99_999  # a pod never uses more than 9.9999 cores (one digit before the point)
HISTORY_START = 1_709_510_400  # 2024-03-04T00:00:00Z, a Monday
RULE = "namespace_pod:cpu_usage:rate5m"
PROFILE_RULE = "namespace_pod:cpu_usage:avg1h"  # avg_over_time(RULE[1h]), recorded every hour
HOUR = 3600
PROFILE_OFFSET = 23 * 60  # the hourly rule's samples are at hh:23
PROFILE_DECIMALS = 9
COUNTER = "container_cpu_usage_seconds_total"
SUBQUERY_STEP = 300  # the predictor's default resolution (5m): expected subquery values use it
TAIL = 900  # the rule form's cAdvisor tail: the 15 minutes a current-usage read looks at (10m window, 5m rate)
TAIL_STEP = 60
GENERATOR_VERSION = 3  # bump when the generated samples change (it is part of the cache key)

Form = Literal["rule", "cadvisor"]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Shape:
    """What to generate: the cluster's size, how many days, which series form at which sample step."""

    nodes: int
    pods: int
    days: int = 9
    form: Form = "rule"
    step: int = 300  # seconds between samples: the rule's interval, or the cAdvisor scrape interval
    seed: int = 1
    read_hour: int = 6  # the prediction is read at this hour of the day after the last full day

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.pods < 1 or self.days < 2:
            raise ValueError("needs at least 1 node, 1 pod and 2 days")
        if self.step < 60 or self.step % 60 or DAY % self.step:
            raise ValueError(f"step {self.step}s: must be a multiple of 60 s that divides a day")
        if self.form == "cadvisor" and SUBQUERY_STEP % self.step:
            raise ValueError(f"step {self.step}s: the cadvisor form needs a scrape interval that divides 5m")

    @property
    def start(self) -> int:
        return HISTORY_START

    @property
    def at(self) -> int:
        """When the prediction is read: the predictor reads the ``days - 1`` full days before it."""
        return HISTORY_START + self.days * DAY + self.read_hour * 3600

    def key(self) -> str:
        """A directory name for the backfilled TSDB of this shape."""
        return f"{self.form}-n{self.nodes}-p{self.pods}-d{self.days}-s{self.step}-seed{self.seed}-v{GENERATOR_VERSION}"

    def blocks(self) -> range:
        """Start times of the 2 h blocks that hold samples."""
        return range(self.start // BLOCK * BLOCK, self.at // BLOCK * BLOCK + 1, BLOCK)

    def history_times(self, block: int) -> Ints:
        """Sample times of the history series inside one block: (start, at] for the rule, [start, at] for
        counters (their first sample opens the first rate window)."""
        first = self.start + (self.step if self.form == "rule" else 0)
        return _grid(block, max(first, block), min(self.at, block + BLOCK - 1), self.step)

    def profile_times(self, block: int) -> Ints:
        """The rule form's hourly samples inside one block: hh:23 in (start, at]; the cadvisor form has none."""
        if self.form != "rule":
            return np.empty(0, dtype=np.int64)
        first, last = max(self.start + 1, block), min(self.at, block + BLOCK - 1)
        return _grid(block, first - PROFILE_OFFSET, last - PROFILE_OFFSET, HOUR) + PROFILE_OFFSET

    def tail_times(self, block: int) -> Ints:
        """The rule form's cAdvisor tail (for the current-usage read); the cadvisor form has none."""
        if self.form != "rule":
            return np.empty(0, dtype=np.int64)
        return _grid(block, max(self.at - TAIL, block), min(self.at, block + BLOCK - 1), TAIL_STEP)


def _grid(block: int, first: int, last: int, step: int) -> Ints:
    begin = -(-first // step) * step
    return np.arange(begin, last + 1, step, dtype=np.int64) if begin <= last else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Population:
    """Every pod with history: names, node, lifetime, and the parameters of its CPU shape."""

    namespace: tuple[str, ...]
    pod: tuple[str, ...]
    node: tuple[str, ...]
    node_index: Ints
    served: Bools  # in the cluster the benchmark serves (False: gone, history only)
    first: Ints  # first sample time (epoch s, on the 5-minute grid)
    last: Ints  # last sample time
    level: Floats  # cores, before the daily curve
    peak_hour: Floats
    width: Floats  # hours
    height: Floats  # the daily curve peaks at 1 + height
    weekend: Floats  # weekend factor (1 or less)
    day_factor: Floats  # (pods, days + 1)
    burst_start: Floats  # (pods, days + 1): hour a burst starts, NaN on days without one
    burst_hours: Floats  # (pods, days + 1)
    burst_gain: Floats  # (pods, days + 1): extra cores as a multiple of the level
    node_names: tuple[str, ...]
    system_cores: Floats  # (nodes,)

    @property
    def size(self) -> int:
        return len(self.pod)

    @property
    def node_count(self) -> int:
        return len(self.node_names)

    def present(self, times: Ints) -> Bools:
        """(pods, times): the pod has a sample at that time."""
        return (self.first[:, None] <= times[None, :]) & (times[None, :] <= self.last[:, None])


def population(shape: Shape) -> Population:
    """The served pods (``0 .. pods-1``, as ``bench.serve_cluster`` serves them) and the gone ones after."""
    rng = np.random.default_rng([shape.seed, 0])
    gone = max(1, shape.pods * 4 // 100)
    total = shape.pods + gone
    namespaces, names, nodes, workloads = [], [], [], []
    for i in range(total):
        namespace, name, body = pod_bytes(i, shape.nodes)
        at = body.index(b'"nodeName":"') + len(b'"nodeName":"')
        namespaces.append(namespace)
        names.append(name)
        nodes.append(body[at : body.index(b'"', at)].decode())
        workloads.append(f"{namespace}/{name.rsplit('-', 1)[0]}")
    node_names = sorted(set(nodes) | {f"node-{i:05d}" for i in range(shape.nodes)})
    node_index = {n: k for k, n in enumerate(node_names)}
    workload_ids = {w: k for k, w in enumerate(dict.fromkeys(workloads))}
    wid = np.array([workload_ids[w] for w in workloads])
    w = len(workload_ids)
    level = np.exp(rng.normal(np.log(0.085), 0.9, w))[wid] * np.exp(rng.normal(0.0, 0.3, total))
    peak_hour = rng.uniform(9, 21, w)[wid]
    width = rng.uniform(1.5, 4.0, w)[wid]
    height = rng.uniform(0.3, 3.0, w)[wid]
    weekend = np.where(rng.random(w) < 0.4, 0.5, 1.0)[wid]
    days = shape.days + 1
    day_factor = np.exp(rng.normal(0.0, 0.12, (total, days)))
    bursty = rng.random(total) < 0.08
    burst_day = bursty[:, None] & (rng.random((total, days)) < 0.3)
    burst_start = np.where(burst_day, rng.integers(8, 20, (total, days)), np.nan)
    burst_hours = rng.integers(1, 5, (total, days)).astype(np.float64)
    burst_gain = rng.uniform(2.0, 6.0, (total, days))

    grid = 300
    first = np.full(total, shape.start, dtype=np.int64)
    last = np.full(total, shape.at, dtype=np.int64)
    served = np.arange(total) < shape.pods
    today = shape.start + shape.days * DAY
    new = served & (rng.random(total) < 0.10)
    new_at = rng.uniform(max(shape.start + DAY, today - 5 * DAY), today, total)
    new_at = np.where(rng.random(total) < 0.1, rng.uniform(today, shape.at - 3600, total), new_at)  # created today
    first = np.where(new, (new_at // grid * grid).astype(np.int64), first)
    ended_at = rng.uniform(shape.start + DAY, max(shape.start + DAY + grid, today - DAY), total)
    last = np.where(served, last, (ended_at // grid * grid).astype(np.int64))
    return Population(
        namespace=tuple(namespaces),
        pod=tuple(names),
        node=tuple(nodes),
        node_index=np.array([node_index[n] for n in nodes], dtype=np.int64),
        served=served,
        first=first,
        last=last,
        level=level,
        peak_hour=peak_hour,
        width=width,
        height=height,
        weekend=weekend,
        day_factor=day_factor,
        burst_start=burst_start,
        burst_hours=burst_hours,
        burst_gain=burst_gain,
        node_names=tuple(node_names),
        system_cores=rng.uniform(0.3, 0.9, len(node_names)),
    )


def pod_units(shape: Shape, pop: Population, times: Ints, salt: int) -> Ints:
    """(pods, times): each pod's CPU at those times in 1e-4 cores, at least 2 (both containers use some).

    Deterministic for (seed, first time, salt): the same block regenerates the same values."""
    if times.size == 0:
        return np.empty((pop.size, 0), dtype=np.int64)
    rng = np.random.default_rng([shape.seed, int(times[0]), salt])
    since = times - 1 - shape.start  # a sample at midnight closes the day before
    day = np.clip(since // DAY, 0, shape.days).astype(np.int64)
    hour = (times % DAY) / 3600.0
    distance = np.abs(hour[None, :] - pop.peak_hour[:, None])
    distance = np.minimum(distance, 24.0 - distance)
    curve = 1.0 + pop.height[:, None] * np.exp(-0.5 * (distance / pop.width[:, None]) ** 2)
    weekday = (shape.start // DAY + 3 + since // DAY) % 7  # 1970-01-01 was a Thursday (3)
    weekend = np.where(weekday[None, :] >= 5, pop.weekend[:, None], 1.0)
    cores = pop.level[:, None] * curve * weekend * pop.day_factor[:, day]
    start = pop.burst_start[:, day]
    in_burst = (hour[None, :] >= start) & (hour[None, :] < start + pop.burst_hours[:, day])
    cores = cores + np.where(in_burst, pop.level[:, None] * pop.burst_gain[:, day], 0.0)
    cores = cores * np.exp(rng.normal(0.0, 0.15, cores.shape))
    return np.clip(np.rint(cores * UNIT), 2, MAX_CORES_UNITS).astype(np.int64)


def system_units(shape: Shape, pop: Population, times: Ints, salt: int) -> Ints:
    """(nodes, times): non-pod CPU of each node (kubelet, runtime, daemons) in 1e-4 cores."""
    rng = np.random.default_rng([shape.seed, int(times[0]) if times.size else 0, salt, 1])
    noise = np.exp(rng.normal(0.0, 0.1, (pop.node_count, times.size)))
    return np.rint(pop.system_cores[:, None] * noise * UNIT).astype(np.int64)


# --- OpenMetrics text, fixed-width and vectorised ----------------------------------------------


def _write_digits(out: npt.NDArray[np.uint8], column: int, numbers: Ints, count: int) -> None:
    """``count`` decimal digits of ``numbers`` (broadcast over out's first two axes) from ``column``."""
    for k in range(count):
        out[:, :, column + k] = ord("0") + (numbers // 10 ** (count - 1 - k)) % 10


def render_lines(
    prefixes: list[bytes], values: Ints, int_digits: int, times: Ints, present: Bools, decimals: int = 4
) -> bytes:
    """OpenMetrics sample lines ``<prefix><value> <time>`` for series x times, the present ones only, in
    series order then time order. ``values`` are in 10**-decimals (``int_digits`` before the point,
    zero-padded); a prefix is ``name{labels} ``."""
    chunks = []
    scale = 10**decimals
    lengths = np.array([len(p) for p in prefixes])
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        width = int(length) + int_digits + 1 + decimals + 1 + 10 + 1
        out = np.empty((rows.size, times.size, width), dtype=np.uint8)
        prefix = np.frombuffer(b"".join(prefixes[r] for r in rows), dtype=np.uint8).reshape(rows.size, int(length))
        out[:, :, :length] = prefix[:, None, :]
        col = int(length)
        v = values[rows]
        if v.size and (v.min() < 0 or v.max() >= 10**int_digits * scale):
            raise ValueError(f"a value does not fit {int_digits} digit(s) before the point: {v.min()}..{v.max()}")
        _write_digits(out, col, v // scale, int_digits)
        out[:, :, col + int_digits] = ord(".")
        _write_digits(out, col + int_digits + 1, v % scale, decimals)
        col += int_digits + 1 + decimals
        out[:, :, col] = ord(" ")
        _write_digits(out, col + 1, times[None, :], 10)
        out[:, :, width - 1] = ord("\n")
        keep = present[rows]
        lines = out.reshape(-1, width)
        chunks.append(lines.tobytes() if keep.all() else lines[keep.ravel()].tobytes())
    return b"".join(chunks)


@dataclass(frozen=True)
class Labels:
    """The series' label sets, as text prefixes."""

    rule: list[bytes]
    profile_rule: list[bytes]
    containers: list[list[bytes]]  # per container (app, sidecar): one prefix per pod
    roots: list[bytes]  # per node: the root cgroup


CONTAINERS = ("app", "sidecar")
APP_SHARE = 0.9  # of a pod's CPU; the sidecar uses the rest


def labels(pop: Population) -> Labels:
    rule = [
        f'{RULE}{{namespace="{ns}",node="{node}",pod="{pod}"}} '.encode()
        for ns, node, pod in zip(pop.namespace, pop.node, pop.pod, strict=True)
    ]
    profile_rule = [
        f'{PROFILE_RULE}{{namespace="{ns}",node="{node}",pod="{pod}"}} '.encode()
        for ns, node, pod in zip(pop.namespace, pop.node, pop.pod, strict=True)
    ]
    containers = []
    for container in CONTAINERS:
        prefixes = []
        for ns, node, pod in zip(pop.namespace, pop.node, pop.pod, strict=True):
            uid = hashlib.blake2b(f"{ns}/{pod}".encode(), digest_size=16).hexdigest()
            prefixes.append(
                f'{COUNTER}{{container="{container}",cpu="total",id="/kubepods/burstable/pod{uid}/{uid[:12]}{container}",'
                f'image="registry.example/team/{container}:v1",instance="{node}:10250",job="kubelet",'
                f'metrics_path="/metrics/cadvisor",namespace="{ns}",node="{node}",pod="{pod}"}} '.encode()
            )
        containers.append(prefixes)
    roots = [
        f'{COUNTER}{{cpu="total",id="/",instance="{n}:10250",job="kubelet",metrics_path="/metrics/cadvisor",'
        f'node="{n}"}} '.encode()
        for n in pop.node_names
    ]
    return Labels(rule, profile_rule, containers, roots)


COUNTER_DIGITS = 7  # a container's counter stays below 10,000,000 core-seconds (9.9999 cores for 9 days: 7.8 M)
ROOT_DIGITS = 9  # a node's root cgroup: the sum of its pods


class BlockWriter:
    """The OpenMetrics text of each 2 h block in time order (counters carry over from block to block);
    the caller ends a file with ``# EOF``."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.pop = population(shape)
        self.labels = labels(self.pop)
        rng = np.random.default_rng([shape.seed, 2])
        size = self.pop.size
        # core-seconds in 1e-4 used before the first sample: old containers have used some, new ones little
        old = self.pop.first <= shape.start
        self._counters = [
            np.where(old, rng.integers(0, 1_000_000_000, size), rng.integers(0, 100_000, size)).astype(np.int64)
            for _ in CONTAINERS
        ]
        self._roots = rng.integers(0, 10_000_000_000, self.pop.node_count).astype(np.int64)
        self._previous: tuple[Ints, Ints, Bools] | None = None  # the last block's rule samples
        self.samples = 0

    def block_text(self, block: int) -> bytes:
        parts: list[bytes] = []
        history = self.shape.history_times(block)
        if self.shape.form == "rule":
            present = self.pop.present(history)
            units = pod_units(self.shape, self.pop, history, 0)
            if history.size:
                parts.append(f"# TYPE {RULE} gauge\n".encode())
                parts.append(render_lines(self.labels.rule, units, 1, history, present))
                self.samples += int(present.sum())
            parts.append(self._profile_text(block, history, units, present))
            counter_times, step = self.shape.tail_times(block), TAIL_STEP
        else:
            counter_times, step = history, self.shape.step
        if counter_times.size:
            parts.append(f"# TYPE {COUNTER.removesuffix('_total')} counter\n".encode())
            parts.append(self._counter_text(counter_times, step))
        return b"".join(parts)

    def _profile_text(self, block: int, history: Ints, units: Ints, present: Bools) -> bytes:
        """The hourly rule's samples in this block: each the mean of the rule samples in the hour before it
        (this block's and the last one's), for pods with at least one."""
        times = self.shape.profile_times(block)
        if self._previous is not None:
            history = np.concatenate([self._previous[0], history])
            units = np.concatenate([self._previous[1], units], axis=1)
            present = np.concatenate([self._previous[2], present], axis=1)
        keep = history > block + BLOCK - HOUR  # all the next block's first window can reach back to
        self._previous = (history[keep], units[:, keep], present[:, keep])
        if times.size == 0:
            return b""
        inside = (history[None, :] > times[:, None] - HOUR) & (history[None, :] <= times[:, None])  # (hours, samples)
        sums = np.where(present, units, 0) @ inside.T.astype(np.int64)
        counts = present.astype(np.int64) @ inside.T.astype(np.int64)
        scaled = np.rint(sums * (10**PROFILE_DECIMALS // UNIT) / np.maximum(counts, 1)).astype(np.int64)
        self.samples += int((counts > 0).sum())
        header = f"# TYPE {PROFILE_RULE} gauge\n".encode()
        return header + render_lines(self.labels.profile_rule, scaled, 1, times, counts > 0, PROFILE_DECIMALS)

    def _counter_text(self, times: Ints, step: int) -> bytes:
        pop = self.pop
        present = pop.present(times)
        units = pod_units(self.shape, pop, times, 1)
        # the rate during (t - step, t]: no increase at a pod's first sample
        increase = np.where(present & (times[None, :] > pop.first[:, None]), units * step, 0)
        app = np.rint(increase * APP_SHARE).astype(np.int64)
        out = []
        for k, part in enumerate((app, increase - app)):  # the app container and its sidecar
            values = self._counters[k][:, None] + np.cumsum(part, axis=1)
            self._counters[k] = values[:, -1].copy()
            out.append(render_lines(self.labels.containers[k], values, COUNTER_DIGITS, times, present))
            self.samples += int(present.sum())
        node_increase = np.zeros((pop.node_count, times.size), dtype=np.int64)
        np.add.at(node_increase, pop.node_index, increase)
        node_increase += system_units(self.shape, pop, times, 2) * step
        roots = self._roots[:, None] + np.cumsum(node_increase, axis=1)
        self._roots = roots[:, -1].copy()
        out.append(render_lines(self.labels.roots, roots, ROOT_DIGITS, times, np.ones(roots.shape, bool)))
        self.samples += roots.size
        return b"".join(out)


# --- what Prometheus should answer ---------------------------------------------------------------


def expected_points(shape: Shape, pods: Ints) -> tuple[Ints, Floats, Bools]:
    """(times, millicores, valid) of the chosen pods' series as Prometheus evaluates them, recomputed from the
    same generated integers. rule: the samples themselves. cadvisor: the 5-minute subquery points, each the
    increase of the summed container counters over [p - 300, p] divided by 300 (a full window, as pod
    lifetimes start and end on the 5-minute grid), where both samples exist."""
    pop = population(shape)
    collected: list[tuple[Ints, Ints, Bools]] = []
    for block in shape.blocks():
        times = shape.history_times(block)
        if times.size:
            salt = 0 if shape.form == "rule" else 1
            collected.append((times, pod_units(shape, pop, times, salt)[pods], pop.present(times)[pods]))
    times = np.concatenate([c[0] for c in collected])
    units = np.concatenate([c[1] for c in collected], axis=1)
    present = np.concatenate([c[2] for c in collected], axis=1)
    if shape.form == "rule":
        return times, units / UNIT * 1000.0, present
    per_window = SUBQUERY_STEP // shape.step
    on_grid = times % SUBQUERY_STEP == 0
    points = times[on_grid]
    index = np.flatnonzero(on_grid)
    ok = index >= per_window
    points, index = points[ok], index[ok]
    csum = np.concatenate([np.zeros((pods.size, 1)), np.cumsum(units * shape.step, axis=1)], axis=1)
    # samples p - 300 + step .. p carry the increase over (p - 300, p]
    increase = csum[:, index + 1] - csum[:, index + 1 - per_window]
    values = increase / SUBQUERY_STEP / UNIT * 1000.0
    return points, values, present[:, index] & present[:, index - per_window]


def expected_daily_peaks(shape: Shape, pods: Ints, quantile: float = 0.95) -> Floats:
    """(len(pods), days): the daily ``quantile`` of the chosen pods in millicores (NaN on a day without
    samples). Days are the full days (start + d, start + d + 1]."""
    points, values, valid = expected_points(shape, pods)
    ends = shape.start + DAY * np.arange(1, shape.days + 1)
    out = np.full((pods.size, shape.days), np.nan)
    for d, end in enumerate(ends):
        in_day = (points > end - DAY) & (points <= end)
        for row in range(pods.size):
            day_values = values[row, in_day][valid[row, in_day]]
            if day_values.size:
                out[row, d] = float(np.quantile(day_values, quantile))
    return out


def expected_profiles(shape: Shape, pods: Ints, buckets: int) -> Floats:
    """(len(pods), days, buckets): the chosen pods' mean over each time-of-day bucket of each full day (UTC),
    NaN where a bucket holds no sample."""
    points, values, valid = expected_points(shape, pods)
    width = DAY // buckets
    out = np.full((pods.size, shape.days, buckets), np.nan)
    for d in range(shape.days):
        for b in range(buckets):
            end = shape.start + d * DAY + (b + 1) * width
            inside = (points > end - width) & (points <= end)
            for row in range(pods.size):
                bucket_values = values[row, inside][valid[row, inside]]
                if bucket_values.size:
                    out[row, d, b] = float(bucket_values.mean())
    return out


def expected_hourly_profiles(shape: Shape, pods: Ints) -> Floats:
    """(len(pods), days, 24): what the hourly rule holds, placed as the predictor places it: each sample
    at hh:23 is the mean of the chosen pods' rule samples in the hour before it, and lands in the UTC hour
    of its window's middle (hh-1:53) of the day that middle is in; NaN where no window holds a sample."""
    points, values, valid = expected_points(shape, pods)
    out = np.full((pods.size, shape.days, 24), np.nan)
    for d in range(shape.days):
        for hour in range(24):
            end = shape.start + d * DAY + (hour + 1) * HOUR + PROFILE_OFFSET  # the sample's time
            if end > shape.at:
                continue
            inside = (points > end - HOUR) & (points <= end)
            for row in range(pods.size):
                window = values[row, inside][valid[row, inside]]
                if window.size:
                    out[row, d, hour] = float(window.mean())
    return out
