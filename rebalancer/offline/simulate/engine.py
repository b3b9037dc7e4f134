"""The closed loop (pure): every step the pods' usage moves on, shared out on their nodes (throttled where a
node's pods ask more than its allocatable: :mod:`rebalancer.offline.simulate.cpu_share`); every cycle interval (the variant's, else the
command's) a rebalancer cycle runs the production code path on the simulated cluster: ``plan_cycle`` ->
``Evictor.apply`` (production limiters, limiter state kept in an in-memory ConfigMap) -> efficiency records
(``judge_followups``, ``observe_landings``, ``observe_cycle``); with a landing guard, its production rules
mark and clear nodes after each evictor and sweep expired marks at every other step
(``landing_guard.SimGuard``); the replacements of evicted pods are bound by the scheduler model, which reads
the guard's taints. The planner is told what the simulated Prometheus reads (:func:`reading_policy`), so
its in-flight correction lasts as long as the simulated reading lags. An
alert-driven variant also runs a focused cycle (``plan_cycle``'s ``focus``) on the nodes serve queues from
the simulated alert path (:mod:`rebalancer.offline.simulate.alerts`) at that step. At the end, the evictions beyond
need are judged on the real usage (:mod:`rebalancer.offline.simulate.overshoot`).

All variants start from the same cluster, the same traces and the same seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

import numpy as np

from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, PodKey
from rebalancer.offline.simulate.alerts import AlertPath
from rebalancer.offline.simulate.cluster import Cluster
from rebalancer.offline.simulate.landing_guard import SimGuard
from rebalancer.offline.simulate.overshoot import Bounds, Overshoot, Truth, overshoot
from rebalancer.offline.simulate.readings import (
    NodeSamples,
    daily_table,
    node_usage,
    pod_history,
    pod_profiles,
    profile_table,
    refresh_day,
    usage_report,
)
from rebalancer.offline.simulate.result import GuardFigures, VariantResult
from rebalancer.offline.simulate.variants import (
    VARIANTS,
    UsageMode,
    Variant,
    cpu_thresholds,
    variant_base,
    variant_policy,
)
from rebalancer.offline.simulate.world import MemoryStore, Move, SimActions, World
from rebalancer.planning.inflight import EarlierReliefs
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.predictor import predict_with_book
from rebalancer.planning.predict.profile import DailyProfiles
from rebalancer.planning.predicted import PREDICTIVE, PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import PoolResolver, build_snapshot
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from rebalancer.records.landings import observe_landings
from rebalancer.records.ledger import judge_followups, observe_cycle
from rebalancer.records.moves import recently_moved
from rebalancer.records.rates import compute_rates

Progress = Callable[[str], None]
HistoryReader = Callable[[World, int], tuple[DailyPeaks[PodKey], DailyProfiles[PodKey] | None]]
"""What a predictive cycle at a step reads of the current pods: their daily peaks and profiles (by default
their past ``predictor.days`` days, read once a day as serve mode does)."""


def simulate(
    cluster: Cluster,
    base: Policy,
    hot_pct: float,
    variants: Sequence[Variant] = VARIANTS,
    progress: Progress | None = None,
    histories: Mapping[str, HistoryReader] | None = None,
) -> tuple[VariantResult, ...]:
    """Run every variant on ``cluster``; ``hot_pct``: a node whose real usage is above this share of its
    allocatable CPU at a step is hot for that step (hot-node-minutes, and the rates' reference);
    ``histories``: per variant name, what its predictor reads instead of the pods' past days (an
    experiment's stand-in, such as perfect foresight for an upper bound)."""
    table = (
        daily_table(cluster, base.predictor.quantile) if base.predictor.days <= cluster.config.history_days else None
    )
    predictor = base.predictor
    profiles = (
        profile_table(cluster, predictor.profile_buckets)
        if table is not None and predictor.node_peak == "coincident"
        else None
    )
    resolver = PoolResolver(base.pools)
    pools = sorted({resolver.pool_of(node) for node in cluster.nodes})
    results = []
    for variant in variants:
        policy = variant_policy(variant_base(base, variant), variant, pools)
        reader = (histories or {}).get(variant.name)
        results.append(_Run(cluster, policy, variant, hot_pct, table, profiles, reader).run())
        if progress is not None:
            progress(variant.name)
    return tuple(results)


HOT_AGAIN_SECONDS = 3600


def hot_again(
    moves: Sequence[Move], node_index: Mapping[str, int], hot: np.ndarray, start: float, step_seconds: int
) -> tuple[int, int]:
    """Of the evictions whose whole hour after lies within ``hot`` (nodes x measured steps from ``start``; the
    eviction's own step read the node before it), those whose source node was hot again in it, and how many
    they were (the share's denominator: an eviction in the last hour has not been watched for an hour)."""
    after = HOT_AGAIN_SECONDS // step_seconds
    count = judged = 0
    for move in moves:
        i = round((move.at - start) / step_seconds)
        if i + 1 + after > hot.shape[1]:
            continue
        judged += 1
        count += bool(hot[node_index[move.source], i + 1 : i + 1 + after].any())
    return count, judged


def reading_policy(policy: Policy, usage: UsageMode, step_seconds: int) -> Policy:
    """``policy`` with the Prometheus settings that describe the simulated reading: a sample every step, each
    the usage over the policy's rate window (:func:`rate_steps`), the policy's quantile over its window of
    them; an instant or requests reading is one step's sample. The in-flight correction's lag comes from them."""
    step = timedelta(seconds=step_seconds)
    window = policy.prometheus.window if usage == "window" else step
    rate = step * rate_steps(policy, step_seconds) if usage == "window" else step
    prometheus = policy.prometheus.model_copy(update={"step": step, "rate_window": rate, "window": window})
    return policy.model_copy(update={"prometheus": prometheus})


def rate_steps(policy: Policy, step_seconds: int) -> int:
    """How many steps the policy's ``rateWindow`` spans (at least one): each sample of a windowed reading is
    the mean usage over them, as ``rate()`` reads a counter."""
    return max(1, round(policy.prometheus.rate_window.total_seconds() / step_seconds))


class _Run:
    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        variant: Variant,
        hot_pct: float,
        table: np.ndarray | None,
        profiles: np.ndarray | None = None,
        reader: HistoryReader | None = None,
    ) -> None:
        self.cluster, self.policy, self.variant, self.hot_pct = cluster, policy, variant, hot_pct
        self.table = None if table is None else table.copy()  # its measured days follow this run's placement
        self.profile_table = None if profiles is None else profiles.copy()
        self.reader = reader
        config = cluster.config
        self.world = World(cluster)
        self.fresh_days = cluster.measured_from // config.steps_per_day  # days the tables hold as this run had them
        window = max(1, int(policy.prometheus.window.total_seconds()) // config.step_seconds)
        self.samples = NodeSamples(len(cluster.nodes), window, rate_steps(policy, config.step_seconds))
        self.now = cluster.time_of(cluster.measured_from)
        self.actions = SimActions(self.world, self.now)
        self.evictor = Evictor(
            self.actions, MemoryStore(), MemoryStore(), policy.limits, Protections.from_settings(policy.protections),
            DryRun.OFF, "rebalancer-simulate", clock=lambda: self.now,
        )  # fmt: skip
        self.records = EfficiencyState()
        self.predictive = any(getattr(s, "classify_by", "current") in PREDICTIVE for s in policy.strategies)
        self.history: tuple[int, DailyPeaks[PodKey], DailyProfiles[PodKey] | None] | None = None
        self.per_cycle: list[int] = []
        self.blocked: dict[str, int] = {}
        self.guard = SimGuard(self.world, policy) if policy.landing_guard.enabled else None
        self.interval = variant.interval_seconds or config.interval_seconds
        if self.interval < config.step_seconds or self.interval % config.step_seconds:
            raise ConfigError(f"variant {variant.name}", [("interval", f"{self.interval} s is not a multiple of "
                                                                        f"the step {config.step_seconds} s")])  # fmt: skip
        self.thresholds = cpu_thresholds(policy)
        self.alerts = self._alert_path()
        self.focused = 0

    def _alert_path(self) -> AlertPath | None:
        rule = self.variant.alert
        if rule is None:
            return None
        if self.thresholds is None:
            raise ConfigError(f"variant {self.variant.name}", [("alert", "needs a strategy with cpu thresholds")])
        target = self._allocatable() * self.thresholds[1] / 100
        cooldown = self.policy.service.webhook.alert_node_cooldown.total_seconds()
        return AlertPath(rule, target, self.cluster.config.step_seconds, cooldown)

    def _allocatable(self) -> np.ndarray:
        return self.cluster.allocatable

    def run(self) -> VariantResult:
        cluster, config = self.cluster, self.cluster.config
        first = cluster.measured_from
        capacity = self._allocatable() * self.hot_pct / 100
        lag_steps = (self.samples.window * config.step_seconds + self.interval) // config.step_seconds
        run = self._before_start(capacity, lag_steps)  # steps each node has been hot in a row
        every = self.interval // config.step_seconds
        steps = cluster.usage.shape[1] - first
        hot_series = np.zeros(steps, dtype=np.int64)
        real = np.zeros((len(cluster.nodes), steps))  # each node's real usage at each step, for the overshoot
        reference = np.zeros(len(cluster.nodes))
        early = 0  # hot steps within the detection lag of their episode's start
        unmet = unavoidable = 0.0
        pool_index, pool_hot_m = self._pools(capacity)
        for i in range(steps):
            step = first + i
            self.now = cluster.time_of(step)
            served = self.world.serve(step)
            usage = node_usage(self.world, step)
            self.samples.add(usage)
            real[:, i] = usage
            hot = usage > capacity
            hot_series[i] = int(hot.sum())
            unmet += float(served.unmet.sum())
            unavoidable += self._unavoidable(hot, capacity, step, served.node_demand, pool_index, pool_hot_m)
            reference += hot * (config.step_seconds / 60)
            run = np.where(hot, run + 1, 0)
            early += int((hot & (run <= lag_steps)).sum())
            alerted = self.alerts.step_at(self.now, usage) if self.alerts is not None else frozenset()
            scheduled = self.variant.usage is not None and i % every == 0
            if scheduled:
                self._cycle(step)
            if alerted and self.alerts is not None:
                self._cycle(step, frozenset(self.world.node_names[n] for n in alerted))
                self.alerts.handled(alerted, self.now)
                self.focused += 1
            if not (scheduled or alerted) and self.guard is not None:
                self.guard.sweep(self.now)  # serve's housekeeping, every minute (a step is 1 to 5)
            self.world.bind_due(self.now, self.variant.ideal_placement)
        end = cluster.time_of(first + steps)
        minutes = {name: float(m) for name, m in zip(self.world.node_names, reference, strict=True) if m > 0}
        pools = PoolResolver(self.policy.pools)
        pool_of = {node.name: pools.pool_of(node) for node in self.world.nodes}
        rates = compute_rates(self.records, minutes, pool_of, cluster.time_of(first), end).cluster
        result = VariantResult.of(self.variant, self.world, hot_series, config.step_seconds, rates, self.per_cycle,
                                  self.blocked, self.records if self.variant.usage else None)  # fmt: skip
        minutes_per_step = config.step_seconds / 60
        again, watched = hot_again(self.world.moves, self.world.node_index, real > capacity[:, None],
                                   cluster.time_of(first), config.step_seconds)  # fmt: skip
        result = replace(result, unmet_core_minutes=unmet * minutes_per_step / 1000,
                         unavoidable_minutes=unavoidable * minutes_per_step,
                         hot_again=again, hot_again_watched=watched,
                         early_minutes=early * config.step_seconds / 60,
                         lag_minutes=lag_steps * config.step_seconds / 60, interval_seconds=self.interval,
                         overshoot=self._overshoot(real, first),
                         focused_cycles=self.focused,
                         notifications=0 if self.alerts is None else self.alerts.notifications)  # fmt: skip
        if self.guard is None:
            return result
        return replace(result, guard=GuardFigures.of(self.guard, self.now))  # the last step: its sweep ran

    def _before_start(self, capacity: np.ndarray, lag_steps: int) -> np.ndarray:
        """The usage window before the first measured step into the samples; returns the steps each node had
        been hot in a row by then (up to ``lag_steps``): an episode under way at the start began before it."""
        first = self.cluster.measured_from
        run = np.zeros(len(self.cluster.nodes), dtype=np.int64)
        for step in range(max(0, first - max(self.samples.span, lag_steps)), first):
            usage = node_usage(self.world, step)
            run = np.where(usage > capacity, run + 1, 0)
            if step >= first - self.samples.span:
                self.samples.add(usage)
        return run

    def _pools(self, capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each node's pool index, and each pool's hot threshold summed over its nodes (millicores)."""
        resolver = PoolResolver(self.policy.pools)
        names = [resolver.pool_of(n) for n in self.cluster.nodes]
        index = {name: i for i, name in enumerate(sorted(set(names)))}
        pool_of = np.array([index[n] for n in names], dtype=np.int64)
        return pool_of, np.bincount(pool_of, weights=capacity)

    def _unavoidable(
        self,
        hot: np.ndarray,
        capacity: np.ndarray,
        step: int,
        demand: np.ndarray,
        pool_of: np.ndarray,
        pool_hot_m: np.ndarray,
    ) -> int:
        """Hot nodes at ``step`` that no placement could keep under the threshold (``capacity``, per node):
        one holds a pod whose demand alone (with the system's) is above it, or its pool's whole demand (pods
        and system) is above its pool's threshold."""  # fmt: skip
        system = self.cluster.config.system_cpu_m
        node_of = self.world.node_of_slot
        bound = node_of >= 0
        alone = bound & (self.cluster.usage[:, step] + system > capacity[np.maximum(node_of, 0)])
        holds = np.bincount(node_of[alone], minlength=len(hot)) > 0
        pool_hot = np.bincount(pool_of, weights=demand) + system * np.bincount(pool_of) > pool_hot_m
        return int((hot & (holds | pool_hot[pool_of])).sum())

    def _overshoot(self, nodes: np.ndarray, first: int) -> Overshoot | None:
        if self.variant.usage is None or self.thresholds is None:
            return None
        cluster, policy = self.cluster, self.policy
        slots = self.world.served[:, first : first + nodes.shape[1]]
        truth = Truth(nodes, slots, cluster.time_of(first), cluster.config.step_seconds)
        cold, target = self.thresholds
        bounds = Bounds(self._allocatable() * cold / 100, self._allocatable() * target / 100)
        index = {name: i for i, name in enumerate(self.world.node_names)}
        window, follow_up = policy.prometheus.window.total_seconds(), policy.efficiency.follow_up_window.total_seconds()
        return overshoot(self.world.moves, index, truth, bounds, policy.prometheus.quantile, window, follow_up)

    def _cycle(self, step: int, focus: frozenset[str] | None = None) -> None:
        """One cycle; ``focus``: an alert-driven cycle relieving only these nodes, as the webhook's."""
        assert self.variant.usage is not None
        world, policy = self.world, self.policy
        facts = world.facts()
        quantile = policy.prometheus.quantile
        usage = usage_report(self.variant.usage, world, step, self.samples, quantile)
        truth = usage if self.variant.usage == "window" else usage_report("window", world, step, self.samples, quantile)
        predicted = self._predicted(facts, step) if self.predictive else None
        moved = recently_moved(self.records, facts, self.now, policy.efficiency)
        earlier = EarlierReliefs(self.records.reliefs)
        as_read = reading_policy(policy, self.variant.usage, self.cluster.config.step_seconds)
        snapshot, plan = plan_cycle(facts, usage, as_read, self.now, focus, predicted, None, moved, reliefs=earlier)
        self.actions.now = self.now
        marked = snapshot if self.guard is None else self.guard.before_evictions(snapshot, plan)
        report = self.evictor.apply(plan, snapshot)
        if self.guard is not None:
            self.guard.after_cycle(marked, plan, report)
        self.per_cycle.append(report.count(Outcome.EVICTED))
        for result in report.results:
            if result.outcome is Outcome.EVICTED:
                e = result.eviction
                self.world.plan_destination(f"{e.namespace}/{e.name}", e.room_on)
            if result.outcome is Outcome.BLOCKED and result.limiter:
                self.blocked[result.limiter] = self.blocked.get(result.limiter, 0) + 1
        seen = build_snapshot(facts, truth, policy.pools, self.now)
        self.records = judge_followups(self.records, seen)
        self.records = observe_landings(
            self.records, facts, self.now, policy.efficiency.follow_up_window.total_seconds()
        )
        planned = replace(seen, moved=snapshot.moved, in_flight=snapshot.in_flight)  # reliefs keep the reading
        self.records = observe_cycle(self.records, planned, plan, report, "simulate", policy.efficiency)

    def _predicted(self, facts: ClusterFacts, step: int) -> PredictedLoad:
        settings = self.policy.predictor
        if self.reader is not None:
            peaks, profiles = self.reader(self.world, step)
        elif self.table is None:
            return PredictedLoad.failed(f"the simulation has fewer history days than predictor.days {settings.days}")
        else:
            peaks, profiles = self._past_days(step)
        prediction, book = predict_with_book(facts, peaks, settings, profiles=profiles)
        return PredictedLoad.from_prediction(prediction, f"simulated history, {settings.aggregation}", book)

    def _past_days(self, step: int) -> tuple[DailyPeaks[PodKey], DailyProfiles[PodKey] | None]:
        assert self.table is not None
        settings = self.policy.predictor
        today = step // self.cluster.config.steps_per_day
        for day in range(self.fresh_days, today):  # the days this run's pods have had since the start
            refresh_day(self.table, self.profile_table, self.world, day, settings.quantile)
        self.fresh_days = max(self.fresh_days, today)
        if self.history is None or self.history[0] != today:  # read once a day, as serve mode does
            peaks = pod_history(self.world, self.table, today, settings.days, settings.quantile)
            profiles = None
            if self.profile_table is not None and settings.node_peak == "coincident":
                profiles = pod_profiles(self.world, self.profile_table, today, settings.days)
            self.history = (today, peaks, profiles)
        return self.history[1], self.history[2]
