"""`rebalancer predict`: the demo prediction and the back-test (the live mode, which reads the pods' history
from Prometheus through the composition root, plugs in here with the same rendering).

Exit codes as the rest of the command line: 0 done, 2 invalid input (policy, options, data file, a missing
optional package), 1 unexpected. Tables and JSON go to stdout; the progress bar and timings to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from rebalancer.errors import ConfigError
from rebalancer.policy import load_policy, validation_problems
from rebalancer.predict.backtest import backtest
from rebalancer.predict.render import ProgressBar, backtest_json, backtest_table, prediction_json, prediction_table
from rebalancer.predict.settings import AGGREGATIONS, PredictorSettings
from rebalancer.predict.usage import load_usage

EXIT_OK, EXIT_CONFIG = 0, 2


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


def predict_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.backtest:
        return _backtest(args, settings)
    if args.demo:
        return _demo(args, settings)
    print(
        "rebalancer predict: reading the pods' history from Prometheus is not wired yet; use --demo or --backtest DATA",
        file=sys.stderr,
    )
    return EXIT_CONFIG


def _demo(args: argparse.Namespace, settings: PredictorSettings) -> int:
    from rebalancer.demo import load_demo, load_demo_history
    from rebalancer.predict.predictor import predict

    history = load_demo_history()
    if settings.aggregation == "pooled_p95" and settings.days != len(history.days):
        raise ConfigError("command line", [("--days", f"pooled_p95 on the demo needs {len(history.days)} days")])
    facts = load_demo().facts
    prediction = predict(facts, history.pod_history(settings.days), settings, history.system_history(settings.days))
    actual = history.actual_utilization(facts)
    if args.output == "json":
        sys.stdout.buffer.write(prediction_json(prediction, history.description, actual))
    else:
        sys.stdout.write(prediction_table(prediction, history.description, actual))
    return EXIT_OK


def _backtest(args: argparse.Namespace, settings: PredictorSettings) -> int:
    try:
        if args.time_zone:
            ZoneInfo(args.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError("command line", [("--time-zone", f"unknown time zone {args.time_zone!r}")]) from None
    if args.margin and any(m < 0 for m in args.margin):
        raise ConfigError("command line", [("--margin", "must not be negative")])
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    bar = ProgressBar(sys.stderr) if show else None
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
    done = time.perf_counter()
    if args.output == "json":
        sys.stdout.buffer.write(backtest_json(report))
    else:
        sys.stdout.write(backtest_table(report))
    if args.plot:
        from rebalancer.predict.plot import plot_backtest

        print(f"rebalancer predict: wrote {plot_backtest(report, args.plot)}", file=sys.stderr)
    print(
        f"rebalancer predict: read {len(data.frame)} samples in {loaded - started:.2f} s, "
        f"back-test {done - loaded:.2f} s",
        file=sys.stderr,
    )
    return EXIT_OK
