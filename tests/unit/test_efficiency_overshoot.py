"""Overshoot: reliefs beyond need (below the cold threshold, or again while an earlier one was pending),
counted per pool in the rates, the report and the metrics; older records without the new fields decode."""

from __future__ import annotations

import json

import msgspec
from prometheus_client import generate_latest

from rebalancer.domain.efficiency_records import COOLED, TOO_LITTLE_MOVED, EvictedPod, Relief
from rebalancer.records import EfficiencyState, compute_rates
from rebalancer.records.render import report_record, report_table
from rebalancer.service.metrics import Metrics

T0 = 1_700_000_000.0
POD = EvictedPod("default", "web-0", "Deployment/default/web", 2500)


def relief(node: str, at: float, pool: str = "general", **fields: object) -> Relief:
    base = Relief(node, pool, "LowNodeUtilization", at, 70.0, 90.0, (POD, POD), at + 900, cold_pct=20.0)
    return msgspec.structs.replace(base, **fields)


def state() -> EfficiencyState:
    return EfficiencyState(
        reliefs=(
            relief("a", T0, result=COOLED, usage_pct_after=12.0),  # below cold 20%: beyond need
            relief("b", T0, result=COOLED, usage_pct_after=55.0),  # just right
            relief("b", T0 + 60, repeat=True),  # again while b's first relief was pending
            relief("c", T0, result=TOO_LITTLE_MOVED, usage_pct_after=10.0),  # not cooled: not below cold by it
            relief("d", T0, pool="batch", result=COOLED, usage_pct_after=5.0, cold_pct=None),  # no cold threshold
        )
    )


def test_overshoot_counts_reliefs_below_cold_and_repeats_per_pool() -> None:
    report = compute_rates(state(), None, {}, T0 - 1, T0 + 3600)
    general = report.pool("general")
    assert (general.overshoot, general.overshoot_below_cold, general.overshoot_repeat) == (2, 1, 1)
    assert general.overshoot_evictions == 4 and general.overshoot_rate == 2 / 4
    batch = report.pool("batch")
    assert batch.overshoot == 0 and batch.overshoot_rate == 0.0
    assert report.cluster.overshoot == 2 and report.cluster.overshoot_rate == 2 / 5
    empty = compute_rates(EfficiencyState(), None, {}, T0 - 1, T0 + 3600).cluster
    assert empty.overshoot_rate is None  # nothing relieved: nothing to measure, never 0


def test_report_shows_the_overshoot() -> None:
    report = compute_rates(state(), None, {}, T0 - 1, T0 + 3600)
    table = report_table(report)
    assert "overshoot" in table and "2 40%" in table
    assert "Reliefs beyond need: again while pending 1, below the cold threshold 1" in table
    pools = {p["pool"]: p for p in report_record(report)["pools"]}
    assert pools["general"]["overshootRate"] == 0.5 and pools["general"]["overshootRepeat"] == 1


def test_metrics_expose_the_overshoot() -> None:
    metrics = Metrics()
    metrics.observe_efficiency(compute_rates(state(), None, {}, T0 - 1, T0 + 3600))
    text = generate_latest(metrics.registry).decode()
    assert 'rebalancer_efficiency_overshoot_reliefs{kind="below_cold",pool="general"} 1.0' in text
    assert 'rebalancer_efficiency_overshoot_reliefs{kind="repeat",pool="general"} 1.0' in text
    assert 'rebalancer_efficiency_overshoot_evictions{pool="general"} 4.0' in text
    assert 'rebalancer_efficiency_ratio{pool="*",rate="overshoot"} 0.4' in text


def test_records_written_before_the_overshoot_fields_still_decode() -> None:
    old = json.loads(EfficiencyState(reliefs=(relief("a", T0),)).to_json())
    for field in ("measuredM", "coldPct", "repeat"):
        old["reliefs"][0].pop(field)
    (decoded,) = EfficiencyState.from_json(json.dumps(old), T0).reliefs
    assert (decoded.measured_m, decoded.cold_pct, decoded.repeat, decoded.overshoot) == (None, None, False, False)
