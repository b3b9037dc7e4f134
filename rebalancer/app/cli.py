"""The ``rebalancer`` command line: parses the options and hands each command to the composition root.

Exit codes: 0 done (nothing to do included); 2 invalid configuration; 3 a source failed, the plan is blocked or
the cycle was aborted; 4 some evictions failed; 1 unexpected.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rebalancer import __version__
from rebalancer.domain import output
from rebalancer.domain.errors import ConfigError, RebalancerError
from rebalancer.domain.redaction import RedactingFormatter
from rebalancer.policy import Policy, load_policy, parse_policy_warning, read_policy_text

if TYPE_CHECKING:
    from rebalancer.offline.predict.command import LiveResult
    from rebalancer.offline.predict.usage import Progress

EXIT_OK, EXIT_UNEXPECTED, EXIT_CONFIG, EXIT_SOURCE, EXIT_FAILED = 0, 1, 2, 3, 4
OFFLINE = "rebalancer.offline"  # simulate, predict, the back-test, plots and the demo: not in the container image
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DESCRIPTION = "Rebalance Kubernetes nodes on their real CPU usage, evicting only through the Eviction API."
EPILOG = (
    "exit codes: 0 done (nothing to do included), 1 unexpected, 2 invalid configuration, 3 a source failed, "
    "the plan is blocked or the cycle was aborted, 4 some evictions failed"
)
KUBECONFIG_HELP = "kubeconfig (default: in-cluster, then ~/.kube/config)"
DRY_RUN_HELP = (
    "off: act; client (what --dry-run alone means): plan and record, change nothing; "
    "server: send with dryRun=All so that the API server checks budgets and admission"
)


class HelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its default, unless the text says it already (``default:``) or there is
    none to say (a flag, or an option left unset by default)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default:" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


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
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if command else 0,
        help="log more: each -v one level below --log-level or the default (-v INFO, -vv DEBUG)",
    )


def log_level(args: argparse.Namespace) -> str:
    """The level asked for, else the command's default (a service logs its cycles, a command its problems),
    lowered one level per ``-v``."""
    base = str(args.log_level or ("INFO" if args.command == "serve" else "WARNING"))
    return LOG_LEVELS[max(0, LOG_LEVELS.index(base) - args.verbose)]


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="FILE", help=KUBECONFIG_HELP)
    parser.add_argument("--context", help="kubeconfig context (default: the kubeconfig's current context)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rebalancer", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter
    )
    _add_global_options(parser, command=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="each takes --help")

    check = sub.add_parser("check-config", help="validate policy files; exit 2 naming each bad field")
    check.add_argument("files", nargs="+", metavar="FILE", help="policy YAML files")
    check.add_argument(
        "--for",
        dest="purpose",
        choices=["any", "serve"],
        default="any",
        help="any: the policy itself, as every command reads it; serve: also what serve checks at start and at "
        "each reload (the webhook's token, the token files readable and not empty), so that a policy that "
        "passes starts",
    )
    output.add_output_option(check)

    plan = sub.add_parser("plan", help="classify nodes and print the evictions a cycle would make (evicts nothing)")
    plan.add_argument(
        "--policy", metavar="FILE", help="policy YAML, required unless --demo (default: with --demo, the demo's)"
    )
    plan.add_argument("--demo", action="store_true", help="plan on the embedded demo snapshot, no cluster needed")
    _add_cluster_options(plan)
    output.add_output_option(plan)

    run = sub.add_parser("run", help="one cycle: plan, limiters, evict through the Eviction API (CronJob mode)")
    run.add_argument("--once", action="store_true", help="accepted for older scripts: a run is always one cycle")
    run.add_argument("--policy", metavar="FILE", required=True, help="policy YAML (required)")
    _add_cluster_options(run)
    run.add_argument("--dry-run", nargs="?", const="client", default="off", choices=["off", "client", "server"],
                     help=DRY_RUN_HELP)  # fmt: skip
    output.add_output_option(run)

    serve = sub.add_parser("serve", help="run on the strategies' schedules and on Alertmanager webhooks")
    serve.add_argument(
        "--policy", metavar="FILE", required=True, help="policy YAML, reloaded when it changes (required)"
    )
    _add_cluster_options(serve)
    serve.add_argument("--dry-run", nargs="?", const="client", default="off", choices=["off", "client", "server"],
                       help=DRY_RUN_HELP)  # fmt: skip
    _explain_parser(sub)
    imported = sub.add_parser(
        "import-policy",
        help="write the rebalancer policy for a descheduler policy or chart values; list what has no equivalent",
    )
    imported.add_argument("file", metavar="FILE", help="DeschedulerPolicy (v1alpha2 or v1alpha1) or chart values YAML")
    imported.add_argument("--out", metavar="FILE", help="write the policy here (default: stdout)")
    _predict_parser(sub)
    _report_parser(sub)
    _simulate_parser(sub)
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script: source <(rebalancer completion bash)",
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    for command in sub.choices.values():
        _add_global_options(command, command=True)
        command.formatter_class = HelpFormatter
    return parser


def _explain_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = sub.add_parser(
        "explain-scale-down",
        help="the N pods the ReplicaSet controller would delete on a scale-down, now and after deletion-cost steering",
    )
    explain.add_argument("workload", metavar="NAMESPACE/WORKLOAD", help="NAMESPACE/NAME (a Deployment) or "
                         "NAMESPACE/KIND/NAME (KIND deployment or replicaset)")  # fmt: skip
    explain.add_argument("count", metavar="N", type=int, help="replicas removed by the scale-down")
    explain.add_argument("--policy", metavar="FILE", help="policy YAML; with a DeletionCostSteering strategy the "
                         "order after steering is shown too (default: none, only the order now)")  # fmt: skip
    _add_cluster_options(explain)
    output.add_output_option(explain)


def _report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="efficiency over a period: discovery, eviction and effective rates with reasons, bounce-backs",
    )
    report.add_argument(
        "--policy", metavar="FILE", required=True, help="policy YAML with efficiency:, state:, prometheus: (required)"
    )
    _add_cluster_options(report)
    report.add_argument("--period", metavar="DURATION", help="e.g. 24h, 7d (default: efficiency.period)")
    report.add_argument("--bucket", metavar="DURATION", default="1h", help="time step of the figures over time")
    report.add_argument(
        "--until",
        metavar="TIME",
        help="end of the period: ISO 8601 (2026-11-22T08:00:00Z) or epoch seconds (default: now)",
    )
    output.add_output_option(report)
    report.add_argument(
        "--plot", metavar="FILE", help="FILE.html (self-contained) or FILE.png (needs matplotlib) (default: none)"
    )


def _simulate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """simulate's own options; without the offline tools, a command that accepts anything and says so."""
    try:
        from rebalancer.offline.simulate.options import add_parser
    except ModuleNotFoundError as exc:
        if not _offline_missing(exc):
            raise
        simulate = sub.add_parser("simulate", help="closed-loop simulation (needs the full install)")
        simulate.set_defaults(offline_stub=True)  # its options are unknown here: main takes any
        return
    add_parser(sub)


def _offline_missing(exc: ModuleNotFoundError) -> bool:
    """The offline tools are not installed (the container image leaves them out)."""
    return exc.name is not None and (exc.name == OFFLINE or exc.name.startswith(OFFLINE + "."))


def _needs_offline(args: argparse.Namespace) -> str:
    """The command line that needed the offline tools, as the user typed it: `plan --demo`, `report --plot`."""
    flags = [f for f in ("demo", "backtest", "plot") if getattr(args, f, None)]
    return " ".join([args.command, *(f"--{f}" for f in flags)])


def _predict_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rebalancer.domain.settings.predictor import AGGREGATIONS

    predict = sub.add_parser(
        "predict",
        help="predicted utilization of each node at the next peak; --backtest DATA evaluates the aggregations",
    )
    predict.add_argument(
        "--policy",
        metavar="FILE",
        help="policy YAML: its predictor: section, and prometheus: for a live cluster "
        "(default: the predictor's defaults; required on a live cluster)",
    )
    _add_cluster_options(predict)
    predict.add_argument("--demo", action="store_true", help="predict on the embedded demo, no cluster needed")
    predict.add_argument(
        "--backtest",
        metavar="DATA",
        help="rolling back-test on recorded usage: a Bitbrains directory, or a CSV / Parquet table with "
        "columns entity, timestamp, usage, capacity (default: predict, no back-test)",
    )
    output.add_output_option(predict)
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
        "--hot-threshold",
        "--threshold",
        dest="threshold",
        type=float,
        metavar="PCT",
        help="hot above this percent (default: the policy's hotThreshold)",
    )
    predict.add_argument("--days", type=int, help="days of history per prediction (default: the policy's days)")
    predict.add_argument(
        "--min-history-days",
        type=int,
        metavar="N",
        help="days a pod needs of its own history (default: the policy's minHistoryDays)",
    )
    predict.add_argument("--limit", type=int, metavar="N", help="back-test only the first N entities (default: all)")
    predict.add_argument(
        "--entities", metavar="A,B,...", help="back-test only these entities, VM numbers (default: all)"
    )
    predict.add_argument(
        "--time-zone", metavar="TZ", help="calendar days of the data (default: Bitbrains Europe/Amsterdam, tables UTC)"
    )
    predict.add_argument(
        "--min-coverage",
        type=float,
        default=0.5,
        metavar="F",
        help="a day with samples over less than this fraction of it is missing",
    )
    predict.add_argument(
        "--plot", metavar="FILE.png", help="draw predicted against actual (needs matplotlib) (default: none)"
    )
    predict.add_argument(
        "--progress",
        choices=["auto", "always", "never"],
        default="auto",
        help="progress bar on stderr (auto: only when stderr is a terminal)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "offline_stub", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=log_level(args), handlers=[handler])
    try:
        if args.command == "completion":
            from rebalancer.app.completion import completion_script

            sys.stdout.write(completion_script(parser, args.shell))
            return EXIT_OK
        if args.command == "check-config":
            return _check_config(args.files, args.output, args.purpose)
        if args.command == "run":
            return _run(args)
        if args.command == "serve":
            return _serve(args)
        if args.command == "import-policy":
            from rebalancer.app.descheduler.command import import_policy

            import_policy(args.file, args.out)
            return EXIT_OK
        if args.command == "explain-scale-down":
            return _explain_scale_down(args)
        if args.command == "report":
            return _report(args)
        if args.command == "simulate":
            from rebalancer.offline.simulate.command import simulate_command

            return simulate_command(args)
        if args.command == "predict":
            from rebalancer.offline.predict.command import predict_command

            return predict_command(args, _predict_live)
        return _plan(args)
    except ModuleNotFoundError as exc:
        if not _offline_missing(exc):
            raise
        print(
            f"rebalancer {_needs_offline(args)}: the offline tools (simulate, predict, back-test, plots, demo) are "
            "not installed here, as in the container image: run it from a full install (pip or pipx, see the README)",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    except RebalancerError as exc:
        print(f"rebalancer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_SOURCE


def _check_config(files: Sequence[str], shown: str, purpose: str = "any") -> int:
    from rebalancer.policy.serve_checks import NotServable, check_for_serve

    status = EXIT_OK
    checked: list[dict[str, Any]] = []
    for name in files:
        try:
            policy, warnings = parse_policy_warning(read_policy_text(name), name)
            if purpose == "serve":  # the function serve runs at start and at each reload
                serve = check_for_serve(policy)
                if serve.problems:
                    raise NotServable(name, list(serve.problems))
                warnings += [f"{field}: {message}" for field, message in serve.warnings]
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            status = EXIT_CONFIG
            problems = [{"field": field, "message": message} for field, message in exc.problems]
            checked.append({"file": name, "valid": False, "strategies": [], "problems": problems, "warnings": []})
            continue
        strategies = [s.kind for s in policy.strategies]
        reference = policy.efficiency.reference.describe(memory=policy.reads_memory)
        checked.append(
            {
                "file": name,
                "valid": True,
                "strategies": strategies,
                "problems": [],
                "warnings": warnings,
                "reference": reference,
            }
        )

    def table() -> str:
        return "".join(
            f"{c['file']}: ok ({', '.join(c['strategies'])})\n"
            + "".join(f"  warning: {w}\n" for w in c["warnings"])
            + f"  efficiency reference: {c['reference']}\n"
            for c in checked
            if c["valid"]
        )

    output.write(shown, "ConfigCheck", lambda: {"files": checked}, table)
    return status


def _plan(args: argparse.Namespace) -> int:
    from rebalancer.app import root as app
    from rebalancer.app.render import PLAN_KIND, plan_record, plan_table

    if args.demo:
        from rebalancer.offline.demo import demo_policy_path

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
    shown = (outcome.plan, outcome.source, guard)
    output.write(args.output, PLAN_KIND, lambda: plan_record(*shown), lambda: plan_table(*shown))
    if outcome.plan.blocked:
        print(f"rebalancer: plan blocked: {outcome.plan.blocked}", file=sys.stderr)
        return EXIT_SOURCE
    return EXIT_OK


def _explain_scale_down(args: argparse.Namespace) -> int:
    from rebalancer.app import root as app
    from rebalancer.app.explain import KIND, explanation_record, explanation_table

    if args.count < 1:
        print("rebalancer explain-scale-down: N must be at least 1", file=sys.stderr)
        return EXIT_CONFIG
    policy = load_policy(args.policy) if args.policy else None
    connection = app.ClusterConnection(args.kubeconfig, args.context)
    explanation = app.explain_scale_down(policy, connection, args.workload, args.count)
    output.write(args.output, KIND, lambda: explanation_record(explanation), lambda: explanation_table(explanation))
    return EXIT_OK


def _predict_live(policy: Policy, args: argparse.Namespace, progress: Progress | None) -> LiveResult:
    from rebalancer.app.prediction import predict_live

    return predict_live(policy, args.kubeconfig, args.context, progress)


def _report(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from rebalancer.app import root as app
    from rebalancer.app.report import efficiency_report
    from rebalancer.domain.settings.shared import parse_duration
    from rebalancer.records.render import KIND, report_record, report_table

    spans: dict[str, timedelta | None] = {}
    for name in ("period", "bucket"):
        value = getattr(args, name)
        try:
            spans[name] = None if value is None else parse_duration(value)
        except ValueError:
            print(f"rebalancer report: --{name} {value!r} is not a duration such as 30m, 24h, 7d", file=sys.stderr)
            return EXIT_CONFIG
    until = _time_arg(args.until) if args.until else None
    if args.until and until is None:
        print(f"rebalancer report: --until {args.until!r} is not ISO 8601 or epoch seconds", file=sys.stderr)
        return EXIT_CONFIG
    if args.plot:
        from rebalancer.offline.efficiency_plot import check_plot_path

        check_plot_path(args.plot)  # before anything is read: the report is not printed and then refused
    policy = load_policy(args.policy)
    connection = app.ClusterConnection(args.kubeconfig, args.context)
    bucket = spans["bucket"] or timedelta(hours=1)
    data = efficiency_report(policy, connection, spans["period"], bucket, time.time, until)
    text = report_table(data.report, data.timeline)
    if data.no_records:
        print(f"rebalancer report: {data.no_records}", file=sys.stderr)
        if args.output == "table":
            return EXIT_OK  # a table of zeros would read as measured
    output.write(args.output, KIND, lambda: report_record(data.report, data.timeline), lambda: text)
    if args.plot:
        from rebalancer.offline.efficiency_plot import write_plot

        print(f"plot written to {write_plot(args.plot, data.timeline, text)}", file=sys.stderr)
    if data.report.reference_problem:
        print(f"rebalancer report: discovery rate unknown: {data.report.reference_problem}", file=sys.stderr)
    return EXIT_OK


def _time_arg(text: str) -> float | None:
    """A time given as epoch seconds or ISO 8601; None when it is neither, or no date can show it (nan, inf)."""
    from datetime import UTC, datetime

    try:
        at = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    try:
        datetime.fromtimestamp(at, UTC)  # the report prints it as a date
    except (ValueError, OverflowError, OSError):
        return None
    return at


def _serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rebalancer.actions.evictor import DryRun
    from rebalancer.app import root as app
    from rebalancer.app.serve import serve

    return serve(Path(args.policy), app.ClusterConnection(args.kubeconfig, args.context), DryRun(args.dry_run))


def _run(args: argparse.Namespace) -> int:
    from rebalancer.actions.evictor import DryRun, Outcome
    from rebalancer.actions.guard.applier import GuardOutcome
    from rebalancer.actions.steerer import SteerOutcome
    from rebalancer.app import root as app
    from rebalancer.app.render import RUN_KIND, run_record, run_summary, run_table

    connection = app.ClusterConnection(args.kubeconfig, args.context)
    outcome = app.run_once(load_policy(args.policy), connection, DryRun(args.dry_run))
    shown = (outcome.planned.plan, outcome.report, outcome.planned.source, outcome.steering, outcome.guard)
    output.write(args.output, RUN_KIND, lambda: run_record(*shown), lambda: run_table(outcome.report, outcome.steering))
    summary = run_summary(outcome.planned.plan, outcome.report, DryRun(args.dry_run), outcome.steering, outcome.guard)
    print(summary, file=sys.stderr)
    if outcome.planned.plan.blocked or outcome.report.aborted or outcome.steering.aborted:
        return EXIT_SOURCE
    failed = outcome.report.count(Outcome.FAILED) + outcome.steering.count(SteerOutcome.FAILED)
    failed += sum(1 for r in outcome.guard.results if r.outcome is GuardOutcome.FAILED)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
