"""Command line: a thin front over the composition root.

Exit codes: 0 done; 2 invalid configuration; 3 a source failed or the plan is blocked; 1 unexpected.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rebalancer import __version__
from rebalancer.errors import ConfigError, RebalancerError
from rebalancer.policy import load_policy

EXIT_OK, EXIT_UNEXPECTED, EXIT_CONFIG, EXIT_SOURCE = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rebalancer", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"rebalancer {__version__}")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check-config", help="validate policy files; exit 2 naming each bad field")
    check.add_argument("files", nargs="+", metavar="FILE")

    plan = sub.add_parser("plan", help="classify nodes and print the evictions a cycle would make (evicts nothing)")
    plan.add_argument("--policy", metavar="FILE", help="policy YAML (default with --demo: the demo's policy)")
    plan.add_argument("--demo", action="store_true", help="plan on the embedded demo snapshot, no cluster needed")
    plan.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    plan.add_argument("--context", help="kubeconfig context")
    plan.add_argument("--output", choices=["table", "json"], default="table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "check-config":
            return _check_config(args.files)
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
        outcome = app.plan_demo(load_policy(args.policy or demo_policy_path()))
    else:
        if not args.policy:
            print("rebalancer plan: --policy FILE is required (or --demo)", file=sys.stderr)
            return EXIT_CONFIG
        connection = app.ClusterConnection(args.kubeconfig, args.context)
        outcome = app.plan_live(load_policy(args.policy), connection)
    if args.output == "json":
        sys.stdout.buffer.write(plan_json(outcome.plan, outcome.source))
    else:
        sys.stdout.write(plan_table(outcome.plan, outcome.source))
    if outcome.plan.blocked:
        print(f"rebalancer: plan blocked: {outcome.plan.blocked}", file=sys.stderr)
        return EXIT_SOURCE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
