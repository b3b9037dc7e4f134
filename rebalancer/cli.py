"""Command line: a thin front over the composition root.

Exit codes: 0 done (nothing to do included); 2 invalid configuration; 3 a source failed, the plan is blocked or
the cycle was aborted; 4 some evictions failed; 1 unexpected.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rebalancer import __version__
from rebalancer.errors import ConfigError, RebalancerError
from rebalancer.policy import Policy, load_policy

if TYPE_CHECKING:
    from rebalancer.predict.command import LiveResult
    from rebalancer.predict.usage import Progress

EXIT_OK, EXIT_UNEXPECTED, EXIT_CONFIG, EXIT_SOURCE, EXIT_FAILED = 0, 1, 2, 3, 4
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _add_global_options(parser: argparse.ArgumentParser, *, command: bool) -> None:
    """The options every command takes, before or after its name. On a command they default to nothing
    (``SUPPRESS``), so that a value given before the command's name is kept; given after, it wins."""
    parser.add_argument("--version", action="version", version=f"rebalancer {__version__}")
    parser.add_argument(
        "--log-level",
        default=argparse.SUPPRESS if command else None,
        choices=LOG_LEVELS,
        help="default: INFO for serve (a line per cycle), WARNING for the other commands",
    )


def log_level(args: argparse.Namespace) -> str:
    """The level asked for, else the command's default: a service logs its cycles, a command its problems."""
    return str(args.log_level or ("INFO" if args.command == "serve" else "WARNING"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rebalancer", description=__doc__.splitlines()[0] if __doc__ else None)
    _add_global_options(parser, command=False)
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check-config", help="validate policy files; exit 2 naming each bad field")
    check.add_argument("files", nargs="+", metavar="FILE")

    plan = sub.add_parser("plan", help="classify nodes and print the evictions a cycle would make (evicts nothing)")
    plan.add_argument("--policy", metavar="FILE", help="policy YAML (default with --demo: the demo's policy)")
    plan.add_argument("--demo", action="store_true", help="plan on the embedded demo snapshot, no cluster needed")
    plan.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    plan.add_argument("--context", help="kubeconfig context")
    plan.add_argument("--output", choices=["table", "json"], default="table")

    run = sub.add_parser("run", help="one cycle: plan, limiters, evict through the Eviction API (CronJob mode)")
    run.add_argument("--once", action="store_true", help="run one cycle and exit (required: `serve` runs on)")
    run.add_argument("--policy", metavar="FILE", required=True, help="policy YAML")
    run.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="off",
        choices=["off", "client", "server"],
        help="client (the default when given): plan and record, change nothing; "
        "server: evict with dryRun=All so the API server checks budgets",
    )
    run.add_argument("--output", choices=["summary", "json"], default="summary")

    serve = sub.add_parser("serve", help="run on the strategies' schedules and on Alertmanager webhooks")
    serve.add_argument("--policy", metavar="FILE", required=True, help="policy YAML (reloaded when it changes)")
    serve.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    serve.add_argument("--context", help="kubeconfig context")
    serve.add_argument("--dry-run", nargs="?", const="client", default="off", choices=["off", "client", "server"])
    explain = sub.add_parser(
        "explain-scale-down",
        help="the N pods the ReplicaSet controller would delete on a scale-down, now and after deletion-cost steering",
    )
    explain.add_argument("workload", metavar="NAMESPACE/WORKLOAD", help="NAMESPACE/NAME (a Deployment) or "
                         "NAMESPACE/KIND/NAME (KIND deployment or replicaset)")  # fmt: skip
    explain.add_argument("count", metavar="N", type=int, help="replicas removed by the scale-down")
    explain.add_argument("--policy", metavar="FILE", help="policy YAML; with a DeletionCostSteering strategy the "
                         "order after steering is shown too")  # fmt: skip
    explain.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    explain.add_argument("--context", help="kubeconfig context")
    explain.add_argument("--output", choices=["table", "json"], default="table")
    _predict_parser(sub)
    _report_parser(sub)
    from rebalancer.simulate.options import add_parser as add_simulate_parser

    add_simulate_parser(sub)
    for command in sub.choices.values():
        _add_global_options(command, command=True)
    return parser


def _report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="efficiency over a period: discovery, eviction and effective rates with reasons, bounce-backs",
    )
    report.add_argument(
        "--policy", metavar="FILE", required=True, help="policy YAML (efficiency:, state:, prometheus:)"
    )
    report.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    report.add_argument("--context", help="kubeconfig context")
    report.add_argument("--period", metavar="DURATION", help="e.g. 24h, 7d (default: efficiency.period)")
    report.add_argument("--bucket", metavar="DURATION", default="1h", help="time step of the figures over time")
    report.add_argument(
        "--until",
        metavar="TIME",
        help="end of the period: ISO 8601 (2026-11-22T08:00:00Z) or epoch seconds (default: now)",
    )
    report.add_argument("--output", choices=["table", "json"], default="table")
    report.add_argument("--plot", metavar="FILE", help="FILE.html (self-contained) or FILE.png (needs matplotlib)")


def _predict_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rebalancer.predict.settings import AGGREGATIONS

    predict = sub.add_parser(
        "predict",
        help="predicted utilization of each node at the next peak; --backtest DATA evaluates the aggregations",
    )
    predict.add_argument(
        "--policy", metavar="FILE", help="policy YAML: its predictor: section, and prometheus: for a live cluster"
    )
    predict.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    predict.add_argument("--context", help="kubeconfig context")
    predict.add_argument("--demo", action="store_true", help="predict on the embedded demo, no cluster needed")
    predict.add_argument(
        "--backtest",
        metavar="DATA",
        help="rolling back-test on recorded usage: a Bitbrains directory, or a CSV / Parquet table with "
        "columns entity, timestamp, usage, capacity",
    )
    predict.add_argument("--output", choices=["table", "json"], default="table")
    predict.add_argument(
        "--aggregation",
        action="append",
        choices=AGGREGATIONS,
        help="back-test this aggregation (repeatable; default: all)",
    )
    predict.add_argument(
        "--margin",
        action="append",
        type=float,
        metavar="M",
        help="back-test at this safety margin (repeatable; default: the policy's safetyMargin)",
    )
    predict.add_argument(
        "--threshold", type=float, metavar="PCT", help="hot above this percent (default: hotThreshold)"
    )
    predict.add_argument("--days", type=int, help="days of history per prediction (default: the policy's days)")
    predict.add_argument("--min-history-days", type=int, metavar="N", help="default: the policy's minHistoryDays")
    predict.add_argument("--limit", type=int, metavar="N", help="back-test only the first N entities")
    predict.add_argument("--entities", metavar="A,B,...", help="back-test only these entities (VM numbers)")
    predict.add_argument(
        "--time-zone", metavar="TZ", help="calendar days of the data (default: Bitbrains Europe/Amsterdam, tables UTC)"
    )
    predict.add_argument(
        "--min-coverage",
        type=float,
        default=0.5,
        metavar="F",
        help="a day with samples over less than this fraction of it is missing (default 0.5)",
    )
    predict.add_argument("--plot", metavar="FILE.png", help="draw predicted against actual (needs matplotlib)")
    predict.add_argument(
        "--progress",
        choices=["auto", "always", "never"],
        default="auto",
        help="progress bar on stderr (auto: only when stderr is a terminal)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=log_level(args), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "check-config":
            return _check_config(args.files)
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "explain-scale-down":
            return _explain_scale_down(args)
        if args.command == "report":
            return _report(args)
        if args.command == "simulate":
            from rebalancer.simulate.command import simulate_command

            return simulate_command(args)
        if args.command == "predict":
            from rebalancer.predict.command import predict_command

            return predict_command(args, _predict_live)
        return _plan(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    except RebalancerError as exc:
        print(f"rebalancer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_SOURCE


def _check_config(files: Sequence[str]) -> int:
    status = EXIT_OK
    for name in files:
        try:
            policy = load_policy(name)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            status = EXIT_CONFIG
            continue
        kinds = ", ".join(s.kind for s in policy.strategies)
        print(f"{name}: ok ({kinds})")
    return status


def _plan(args: argparse.Namespace) -> int:
    from rebalancer import app
    from rebalancer.demo import demo_policy_path
    from rebalancer.render import plan_json, plan_table

    if args.demo:
        policy = load_policy(args.policy or demo_policy_path())
        outcome = app.plan_demo(policy)
    else:
        if not args.policy:
            print("rebalancer plan: --policy FILE is required (or --demo)", file=sys.stderr)
            return EXIT_CONFIG
        connection = app.ClusterConnection(args.kubeconfig, args.context)
        policy = load_policy(args.policy)
        outcome = app.plan_now(policy, connection)
    guard = app.guard_preview(policy, outcome)
    if args.output == "json":
        sys.stdout.buffer.write(plan_json(outcome.plan, outcome.source, guard))
    else:
        sys.stdout.write(plan_table(outcome.plan, outcome.source, guard))
    if outcome.plan.blocked:
        print(f"rebalancer: plan blocked: {outcome.plan.blocked}", file=sys.stderr)
        return EXIT_SOURCE
    return EXIT_OK


def _explain_scale_down(args: argparse.Namespace) -> int:
    from rebalancer import app
    from rebalancer.explain import explanation_json, explanation_table

    if args.count < 1:
        print("rebalancer explain-scale-down: N must be at least 1", file=sys.stderr)
        return EXIT_CONFIG
    policy = load_policy(args.policy) if args.policy else None
    connection = app.ClusterConnection(args.kubeconfig, args.context)
    explanation = app.explain_scale_down(policy, connection, args.workload, args.count)
    if args.output == "json":
        sys.stdout.buffer.write(explanation_json(explanation))
    else:
        sys.stdout.write(explanation_table(explanation))
    return EXIT_OK


def _predict_live(policy: Policy, args: argparse.Namespace, progress: Progress | None) -> LiveResult:
    from rebalancer.app_prediction import predict_live

    return predict_live(policy, args.kubeconfig, args.context, progress)


def _report(args: argparse.Namespace) -> int:
    import re

    from rebalancer import app
    from rebalancer.app_report import efficiency_report
    from rebalancer.efficiency.plot import write_plot
    from rebalancer.efficiency.render import report_json, report_table
    from rebalancer.settings import DURATION_PATTERN

    for name in ("period", "bucket"):
        value = getattr(args, name)
        if value is not None and not re.match(DURATION_PATTERN, value):
            print(f"rebalancer report: --{name} {value!r} is not a duration such as 30m, 24h, 7d", file=sys.stderr)
            return EXIT_CONFIG
    until = _time_arg(args.until) if args.until else None
    if args.until and until is None:
        print(f"rebalancer report: --until {args.until!r} is not ISO 8601 or epoch seconds", file=sys.stderr)
        return EXIT_CONFIG
    policy = load_policy(args.policy)
    connection = app.ClusterConnection(args.kubeconfig, args.context)
    data = efficiency_report(policy, connection, args.period, args.bucket, (lambda: until) if until else time.time)
    text = report_table(data.report, data.timeline)
    if data.no_records:
        print(f"rebalancer report: {data.no_records}", file=sys.stderr)
        if args.output != "json":
            return EXIT_OK  # a table of zeros would read as measured
    if args.output == "json":
        sys.stdout.buffer.write(report_json(data.report, data.timeline))
    else:
        sys.stdout.write(text)
    if args.plot:
        print(f"plot written to {write_plot(args.plot, data.timeline, text)}", file=sys.stderr)
    if data.report.reference_problem:
        print(f"rebalancer report: discovery rate unknown: {data.report.reference_problem}", file=sys.stderr)
    return EXIT_OK


def _time_arg(text: str) -> float | None:
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rebalancer import app
    from rebalancer.evictor import DryRun
    from rebalancer.serve import serve

    return serve(Path(args.policy), app.ClusterConnection(args.kubeconfig, args.context), DryRun(args.dry_run))


def _run(args: argparse.Namespace) -> int:
    from rebalancer import app
    from rebalancer.evictor import DryRun, Outcome
    from rebalancer.guard.applier import GuardOutcome
    from rebalancer.render import run_json, run_summary
    from rebalancer.steerer import SteerOutcome

    if not args.once:
        print("rebalancer run: pass --once (one cycle, CronJob mode)", file=sys.stderr)
        return EXIT_CONFIG
    connection = app.ClusterConnection(args.kubeconfig, args.context)
    outcome = app.run_once(load_policy(args.policy), connection, DryRun(args.dry_run))
    if args.output == "json":
        sys.stdout.buffer.write(
            run_json(outcome.planned.plan, outcome.report, outcome.planned.source, outcome.steering, outcome.guard)
        )
    summary = run_summary(outcome.planned.plan, outcome.report, DryRun(args.dry_run), outcome.steering, outcome.guard)
    print(summary, file=sys.stderr)
    if outcome.planned.plan.blocked or outcome.report.aborted or outcome.steering.aborted:
        return EXIT_SOURCE
    failed = outcome.report.count(Outcome.FAILED) + outcome.steering.count(SteerOutcome.FAILED)
    failed += sum(1 for r in outcome.guard.results if r.outcome is GuardOutcome.FAILED)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
