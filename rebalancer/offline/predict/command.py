"""`rebalancer predict`: on a live cluster (the composition root hands in ``live``, which lists the cluster and
reads the pods' daily peaks from Prometheus), on the embedded demo, or as a back-test on recorded usage.

Exit codes as the rest of the command line: 0 done, 2 invalid input (policy, options, data file, a missing
optional package), 1 unexpected. Tables and JSON go to stdout; the progress bar and timings to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from rebalancer.domain import output
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.predictor import AGGREGATIONS, PredictorSettings
from rebalancer.offline.predict.backtest import backtest
from rebalancer.offline.predict.render import (
    BACKTEST_KIND,
    CURRENT,
    PREDICTION_KIND,
    ProgressBar,
    backtest_record,
    backtest_table,
    prediction_record,
    prediction_table,
)
from rebalancer.offline.predict.usage import Progress, load_usage
from rebalancer.planning.predict.predictor import Prediction
from rebalancer.policy import Policy, load_policy, validation_problems

EXIT_OK, EXIT_CONFIG = 0, 2


class LiveResult(Protocol):
    @property
    def prediction(self) -> Prediction: ...
    @property
    def description(self) -> str: ...
    @property
    def current(self) -> Mapping[str, Mapping[str, float]] | None: ...
    @property
    def current_problem(self) -> str | None: ...
    @property
    def seconds(self) -> dict[str, float]: ...


LivePredict = Callable[[Policy, argparse.Namespace, Progress | None], LiveResult]


def settings_from(args: argparse.Namespace) -> PredictorSettings:
    """The policy's predictor: section (or the defaults), with the command line's overrides, validated."""
    base = load_policy(args.policy).predictor if args.policy else PredictorSettings()
    overrides: dict[str, Any] = {}
    if args.days is not None:
        overrides["days"] = args.days
    if args.min_history_days is not None:
        overrides["minHistoryDays"] = args.min_history_days
    if args.threshold is not None:
        overrides["hotThreshold"] = args.threshold
    if not overrides:
        return base
    try:
        return PredictorSettings.model_validate({**base.model_dump(by_alias=True), **overrides})
    except ValidationError as exc:
        raise ConfigError("command line", [(f"predictor.{p}", m) for p, m in validation_problems(exc)]) from exc


def predict_command(args: argparse.Namespace, live: LivePredict | None = None) -> int:
    settings = settings_from(args)
    if args.backtest:
        return _backtest(args, settings)
    if args.demo:
        return _demo(args, settings)
    if not args.policy or live is None:
        print("rebalancer predict: --policy FILE is required (or --demo, or --backtest DATA)", file=sys.stderr)
        return EXIT_CONFIG
    return _live(args, load_policy(args.policy).model_copy(update={"predictor": settings}), live)


def _live(args: argparse.Namespace, policy: Policy, live: LivePredict) -> int:
    bar = _progress_bar(args)
    try:
        result = live(policy, args, bar)
    finally:
        if bar is not None:
            bar.close()
    if result.current_problem:
        print(f"rebalancer predict: {result.current_problem}", file=sys.stderr)
    now = result.current or {}
    others = {resource: pcts for resource, pcts in now.items() if resource != "cpu"}
    shown = (result.prediction, result.description, now.get("cpu") if result.current else None, CURRENT, others)
    output.write(args.output, PREDICTION_KIND, lambda: prediction_record(*shown), lambda: prediction_table(*shown))
    timings = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in result.seconds.items())
    print(f"rebalancer predict: {timings}", file=sys.stderr)
    return EXIT_OK


def _progress_bar(args: argparse.Namespace) -> ProgressBar | None:
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    return ProgressBar(sys.stderr) if show else None


def _demo(args: argparse.Namespace, settings: PredictorSettings) -> int:
    from rebalancer.offline.demo import load_demo, load_demo_history
    from rebalancer.planning.predict.predictor import predict

    history = load_demo_history()
    if settings.aggregation == "pooled_p95" and settings.days != len(history.days):
        raise ConfigError("command line", [("--days", f"pooled_p95 on the demo needs {len(history.days)} days")])
    facts = load_demo().facts
    prediction = predict(facts, history.pod_history(settings.days), settings, history.system_history(settings.days))
    actual = history.actual_utilization(facts)
    shown = (prediction, history.description, actual)
    output.write(args.output, PREDICTION_KIND, lambda: prediction_record(*shown), lambda: prediction_table(*shown))
    return EXIT_OK


def _node_backtest(args: argparse.Namespace, settings: PredictorSettings) -> tuple[dict[str, Any], str] | None:
    """The node-level back-test (record, table) when the data is a directory of Bitbrains VMs, which the
    simulation can pack into nodes; None for a usage table (it names no VM shapes to pack)."""
    if not Path(args.backtest).is_dir() or args.entities or args.limit:
        return None
    from rebalancer.offline.predict.node_backtest import node_backtest, packed_cluster
    from rebalancer.offline.predict.node_backtest_render import node_backtest_record, node_backtest_table
    from rebalancer.offline.traces import TraceError

    try:
        cluster = packed_cluster(args.backtest, settings.days)
        report = node_backtest(cluster, settings, tuple(args.aggregation or AGGREGATIONS))
    except (TraceError, ValueError) as exc:
        raise ConfigError(str(args.backtest), [("", f"node-level back-test: {exc}")]) from exc
    return node_backtest_record(report), node_backtest_table(report)


def _backtest(args: argparse.Namespace, settings: PredictorSettings) -> int:
    try:
        if args.time_zone:
            ZoneInfo(args.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError("command line", [("--time-zone", f"unknown time zone {args.time_zone!r}")]) from None
    if args.margin and any(m < 0 for m in args.margin):
        raise ConfigError("command line", [("--margin", "must not be negative")])
    bar = _progress_bar(args)
    if not 0 < args.min_coverage <= 1:
        raise ConfigError("command line", [("--min-coverage", "must be above 0 and at most 1")])
    entities = [e.strip() for e in args.entities.split(",") if e.strip()] if args.entities else None
    started = time.perf_counter()
    try:
        data = load_usage(args.backtest, entities=entities, limit=args.limit, time_zone=args.time_zone, progress=bar)
        loaded = time.perf_counter()
        report = backtest(
            data,
            settings,
            tuple(args.aggregation or AGGREGATIONS),
            tuple(args.margin) if args.margin else (settings.safety_margin,),
            min_coverage=args.min_coverage,
            progress=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    nodes = _node_backtest(args, settings)
    done = time.perf_counter()

    def record() -> dict[str, Any]:
        out = backtest_record(report)
        if nodes is not None:
            out["nodePeaks"] = nodes[0]
        return out

    def table() -> str:
        return backtest_table(report) + ("" if nodes is None else "\n" + nodes[1])

    output.write(args.output, BACKTEST_KIND, record, table)
    if args.plot:
        from rebalancer.offline.predict.plot import plot_backtest

        print(f"rebalancer predict: wrote {plot_backtest(report, args.plot)}", file=sys.stderr)
    print(
        f"rebalancer predict: read {len(data.frame)} samples in {loaded - started:.2f} s, "
        f"back-test {done - loaded:.2f} s",
        file=sys.stderr,
    )
    return EXIT_OK
