"""`rebalancer simulate`: build the cluster, run every policy, print the comparison (exit 0; 2 on invalid
input, naming the option). The table or JSON goes to stdout, progress and timings to stderr."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Any

from rebalancer.domain import output
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.shared import parse_duration
from rebalancer.offline.simulate.before_after import before_after, before_after_table
from rebalancer.offline.simulate.cluster import Cluster, build_cluster
from rebalancer.offline.simulate.config import SimConfig
from rebalancer.offline.simulate.engine import simulate
from rebalancer.offline.simulate.options import DEFAULT_POLICY
from rebalancer.offline.simulate.plot import write_plot
from rebalancer.offline.simulate.render import KIND, comparison_record, comparison_table, priced_records
from rebalancer.offline.simulate.result import VariantResult
from rebalancer.offline.simulate.shapes import Shapes, bitbrains_shapes, no_gain_shapes, synthetic_shapes
from rebalancer.offline.simulate.summary import figures, summary_table, unavoidable_warning
from rebalancer.offline.simulate.variants import GROUPS, variant_named
from rebalancer.offline.traces import TraceError
from rebalancer.policy import Policy, load_policy

EXIT_OK = 0
SPARE_SYNTHETIC_DAYS = 7  # synthetic shapes span a week more than needed: workloads start on different days


def _seconds(option: str, text: str) -> int:
    if text == "0":
        return 0
    try:
        return int(parse_duration(text).total_seconds())
    except ValueError:
        raise ConfigError("command line", [(option, f"{text!r} is not a duration such as 0, 30s, 5m, 1h")]) from None


def config_from(args: argparse.Namespace, policy: Policy) -> SimConfig:
    config = replace(
        SimConfig(),
        nodes=args.nodes,
        pods_per_node=args.pods_per_node,
        days=args.days,
        history_days=policy.predictor.days,
        step_seconds=_seconds("--step", args.step),
        interval_seconds=_seconds("--interval", args.interval),
        utilization=args.utilization,
        replacement_delay_seconds=_seconds("--replacement-delay", args.replacement_delay),
        budgets=not args.no_budgets,
        seed=args.seed,
    )
    if problems := config.problems():
        raise ConfigError("command line", problems)
    return config


def hot_threshold(args: argparse.Namespace, policy: Policy) -> float:
    if args.hot_threshold is not None:
        return float(args.hot_threshold)
    for strategy in policy.strategies:
        target = getattr(strategy, "target_thresholds", None)
        if (
            target is not None
            and getattr(target, "cpu", None) is not None
            and not getattr(strategy, "use_deviation_thresholds", False)
        ):
            return float(target.cpu)
    return 70.0


def load_shapes(args: argparse.Namespace, config: SimConfig) -> Shapes:
    if not args.traces:
        days = config.history_days + config.days + SPARE_SYNTHETIC_DAYS
        make = no_gain_shapes if getattr(args, "shapes", "diurnal") == "no-gain" else synthetic_shapes
        return make(150, days, config.step_seconds, config.seed)
    try:
        return bitbrains_shapes(args.traces, config.step_seconds)
    except TraceError as exc:
        raise ConfigError("--traces", [("", str(exc))]) from exc


def simulate_command(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    policy = load_policy(args.policy or DEFAULT_POLICY)
    config = config_from(args, policy)
    if args.repeat < 1:
        raise ConfigError("command line", [("--repeat", "must be at least 1")])
    if args.traces and args.shapes != "diurnal":
        raise ConfigError("command line", [("--shapes", "is for synthetic shapes: not with --traces")])
    threshold = hot_threshold(args, policy)
    variants = [variant_named(n) for n in args.variant] if args.variant else list(GROUPS[args.group])
    seeds = [config.seed + i for i in range(args.repeat)]
    traces = load_shapes(args, config) if args.traces else None  # the same files for every seed
    runs: list[tuple[Cluster | None, tuple[VariantResult, ...]]] = []  # only the first cluster is kept
    warnings: list[str] = []
    for seed in seeds:
        seeded = replace(config, seed=seed)
        try:
            cluster = build_cluster(seeded, traces or load_shapes(args, seeded))
        except ValueError as exc:
            raise ConfigError("command line", [("--days", str(exc))]) from exc
        for warning in cluster.warnings:
            warnings.append(f"seed {seed}: {warning}")
            print(f"rebalancer simulate: warning: seed {seed}: {warning}", file=sys.stderr)

        def progress(name: str, seed: int = seed) -> None:
            print(
                f"rebalancer simulate: seed {seed} {name} done at {time.perf_counter() - began:.1f} s", file=sys.stderr
            )

        runs.append((None if runs else cluster, simulate(cluster, policy, threshold, variants, progress)))
    first, results = runs[0]
    assert first is not None
    cluster = first
    start = cluster.time_of(cluster.measured_from)
    header = (
        f"Simulation: {cluster.description}\n"
        f"{config.days} day(s) measured after {config.history_days} of history, step {config.step_seconds} s, "
        f"a cycle every {config.interval_seconds} s unless the variant sets its own; hot = real CPU above {threshold:g}% of allocatable; "
        f"policy {args.policy or 'simulate/policy.yaml'}"
    )
    if unavoidable := unavoidable_warning([r for _, r in runs]):
        warnings.append(unavoidable)
        print(f"rebalancer simulate: warning: {unavoidable}", file=sys.stderr)
    text = comparison_table(results, f"{header}; seed {config.seed}" + "".join(f"\nwarning: {w}" for w in warnings))
    if len(runs) > 1:
        text += "\n" + summary_table([r for _, r in runs], seeds, "All seeds:")
    if table := before_after_table([r for _, r in runs]):
        text += "\n" + table

    def record() -> dict[str, Any]:
        meta = {"cluster": cluster.description, "days": config.days, "historyDays": config.history_days,
                "stepSeconds": config.step_seconds, "intervalSeconds": config.interval_seconds,
                "hotThresholdPct": threshold, "seed": config.seed, "start": start, "warnings": warnings}  # fmt: skip
        extra: dict[str, Any] = {"seeds": [{"seed": seed, "policies": priced_records(run)} for seed, (_, run) in zip(seeds, runs, strict=True)],
                 "summary": figures([r for _, r in runs])}  # fmt: skip
        extra = extra if len(runs) > 1 else {}
        extra["beforeAfter"] = before_after([r for _, r in runs])
        return comparison_record(results, meta, extra)

    output.write(args.output, KIND, record, lambda: text)
    if args.plot:
        print(f"plot written to {write_plot(args.plot, results, start, text)}", file=sys.stderr)
    return EXIT_OK
