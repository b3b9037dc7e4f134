"""Relief before the predicted peak with a perfect forecast: ``predictive-guard`` with perfect foresight.

A foresight variant is ``predictive-guard`` (same policy: limits, landing guard, placement prediction, the
reactive strategy after the predictive one) whose predictor, instead of the pods' past days, reads the
*actual* usage of the day the cycle is in: every current pod's daily peak is that day's P95 of its slot and
its profile that day's mean per time-of-day bucket, repeated over the ``predictor.days`` days it
aggregates (identical days aggregate to themselves), so every node's coincident peak, and when it comes, is
that day's exactly, at the bucket width. A replacement knows its slot's day from its first cycle (no
workload fallback). Not something a user can run: what a perfect forecast gives the same policy.

    python -m bench.predictive_bound --traces data/bitbrains-rnd-2013-07 --repeat 5 [--buckets 24 --buckets 96]

Any option of ``rebalancer simulate`` is accepted (``--variant`` picks the compared policies; default
``none``, ``predictive-guard``, ``current-predicted-guard``, ``current-ideal``). Prints the mean
[min, max] table over the seeds (stdout) and each variant's end time (stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from rebalancer.domain.model import PodKey
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.offline.simulate.cluster import Cluster, build_cluster
from rebalancer.offline.simulate.command import config_from, hot_threshold, load_shapes
from rebalancer.offline.simulate.engine import HistoryReader, simulate
from rebalancer.offline.simulate.options import DEFAULT_POLICY, add_parser
from rebalancer.offline.simulate.readings import daily_table, profile_table
from rebalancer.offline.simulate.result import VariantResult
from rebalancer.offline.simulate.summary import figures, summary_table
from rebalancer.offline.simulate.variants import Variant, variant_named
from rebalancer.offline.simulate.world import World
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.profile import DailyProfiles
from rebalancer.policy import load_policy

BOUNDED = "predictive-guard"  # the variant a foresight variant is the upper bound of
COMPARED = ("none", BOUNDED, "current-predicted-guard", "current-ideal")
DEFAULT_BUCKETS = (24, 96)


class Foresight:
    """The predictor's history with perfect foresight of the day a step is in (a :data:`HistoryReader`)."""

    def __init__(self, cluster: Cluster, buckets: int, settings: PredictorSettings) -> None:
        self.per_day = cluster.config.steps_per_day
        self.days = settings.days
        self.peaks = daily_table(cluster, settings.quantile, cluster.usage)  # (slots, days): the demand
        self.profiles = profile_table(cluster, buckets, cluster.usage)  # (slots, days, buckets)

    def __call__(self, world: World, step: int) -> tuple[DailyPeaks[PodKey], DailyProfiles[PodKey]]:
        today = step // self.per_day
        keys = tuple(pod.key for pod in world.pods)  # slot order: a replacement takes its slot's usage
        peaks = np.repeat(self.peaks[:, today, None], self.days, axis=1)
        profiles = np.repeat(self.profiles[:, today, None, :], self.days, axis=1)
        return DailyPeaks(keys, peaks), DailyProfiles(keys, profiles)


def foresight_variant(buckets: int) -> Variant:
    """``predictive-guard`` named and described as the upper bound it is, at ``buckets`` a day."""
    minutes = 1440 // buckets
    width = f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"
    bounded = variant_named(BOUNDED)
    return replace(
        bounded,
        name=f"foresight-{width}",
        description=f"upper bound: {BOUNDED} whose predictor knows each pod's {width} means of the coming day",
        overrides={**bounded.overrides, "predictor": {"profileBuckets": buckets}},
    )


def parse(argv: list[str]) -> tuple[argparse.Namespace, argparse.Namespace]:
    ours = argparse.ArgumentParser(prog="python -m bench.predictive_bound", description=__doc__.split("\n")[0])
    ours.add_argument("--buckets", type=int, action="append", metavar="N",
                      help=f"time-of-day buckets a day of a foresight variant (repeatable; default {DEFAULT_BUCKETS})")  # fmt: skip
    ours.add_argument("--json", metavar="FILE", help="also write the per-seed and summary figures as JSON")
    known, rest = ours.parse_known_args(argv)
    top = argparse.ArgumentParser(prog="rebalancer")
    add_parser(top.add_subparsers())
    return known, top.parse_args(["simulate", *rest])


def main(argv: list[str] | None = None) -> int:
    began = time.perf_counter()
    ours, args = parse(sys.argv[1:] if argv is None else argv)
    policy = load_policy(args.policy or DEFAULT_POLICY)
    config = config_from(args, policy)
    threshold = hot_threshold(args, policy)
    compared = [variant_named(name) for name in (args.variant or COMPARED)]
    foresights = [foresight_variant(b) for b in ours.buckets or DEFAULT_BUCKETS]
    at = next((i + 1 for i, v in enumerate(compared) if v.name == BOUNDED), len(compared))
    variants = [*compared[:at], *foresights, *compared[at:]]
    seeds = [config.seed + i for i in range(args.repeat)]
    traces = load_shapes(args, config) if args.traces else None
    runs: list[tuple[VariantResult, ...]] = []
    for seed in seeds:
        seeded = replace(config, seed=seed)
        cluster = build_cluster(seeded, traces or load_shapes(args, seeded))
        histories: dict[str, HistoryReader] = {
            v.name: Foresight(cluster, b, policy.predictor)
            for v, b in zip(foresights, ours.buckets or DEFAULT_BUCKETS, strict=True)
        }

        def progress(name: str, seed: int = seed) -> None:
            print(f"predictive_bound: seed {seed} {name} done at {time.perf_counter() - began:.0f} s", file=sys.stderr)

        runs.append(simulate(cluster, policy, threshold, variants, progress, histories))
    print(summary_table(runs, seeds, f"{cluster.description}; hot = real CPU above {threshold:g}% of allocatable"))
    if ours.json:
        record = {"seeds": seeds, "summary": figures(runs),
                  "perSeed": [[r.record() for r in run] for run in runs]}  # fmt: skip
        Path(ours.json).write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
