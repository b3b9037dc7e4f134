"""The options of `rebalancer simulate` (light: building the command line's parser imports no numpy)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rebalancer.domain.output import add_output_option
from rebalancer.offline.simulate.config import SimConfig
from rebalancer.offline.simulate.variants import GROUPS

DEFAULT_POLICY = Path(__file__).with_name("policy.yaml")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="closed-loop simulation: rebalancing policies compared side by side")
    p.add_argument("--traces", metavar="DIR", help="Bitbrains trace directory (default: synthetic diurnal shapes)")
    p.add_argument("--shapes", choices=["diurnal", "no-gain"], default="diurnal",
                   help="synthetic shapes without --traces: diurnal (peaks spread over the day, bursts) or no-gain "
                        "(the whole pool peaks at once and some pods are a node's size: hot minutes no placement "
                        "fixes)")  # fmt: skip
    p.add_argument("--policy", metavar="FILE", help=f"base policy (default: {DEFAULT_POLICY.name} in the package)")
    p.add_argument("--group", choices=list(GROUPS), default="base",
                   help="base: the policies on the simulation's policy; shipped: the shipped default policy at "
                        "several cycle intervals and alert-driven; all: both")  # fmt: skip
    p.add_argument("--variant", action="append", choices=[v.name for v in GROUPS["all"]],
                   help="only these, from any group (repeatable; default: every variant of --group)")  # fmt: skip
    defaults = SimConfig()
    p.add_argument("--nodes", type=int, default=defaults.nodes, help="nodes of the simulated cluster")
    p.add_argument("--pods-per-node", type=int, default=defaults.pods_per_node, help="pods per node at the start")
    p.add_argument("--days", type=int, default=defaults.days, help="measured days, after predictor.days of history")
    p.add_argument(
        "--step", default="1m", help="simulation step, 1m to 5m (Bitbrains samples are 5m apart: interpolated)"
    )
    p.add_argument("--interval", default="10m", help="a rebalancer cycle every this long (unless the variant sets one)")
    p.add_argument("--utilization", type=float, default=defaults.utilization, help="mean CPU usage / allocatable")
    p.add_argument("--hot-threshold", type=float, metavar="PCT",
                   help="hot above this %% of allocatable (default: the policy's first targetThresholds cpu)")  # fmt: skip
    p.add_argument("--replacement-delay", default="0", help="from an eviction to its replacement's binding")
    p.add_argument("--no-budgets", action="store_true", help="no PodDisruptionBudgets")
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of the cluster's layout and synthetic usage")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run seeds SEED .. SEED+N-1 and add a mean [min, max] summary (one run can be noise)")  # fmt: skip
    add_output_option(p)
    p.add_argument("--plot", metavar="FILE", help="FILE.html (self-contained) or FILE.png (needs matplotlib) "
                   "(default: none)")  # fmt: skip
