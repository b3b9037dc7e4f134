"""`rebalancer report`'s pure parts: buckets over the period, the table, JSON and plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.app import cli
from rebalancer.domain.errors import ConfigError
from rebalancer.offline.efficiency_plot import charts, write_plot
from rebalancer.records import EfficiencyState, compute_rates, observe_cycle
from rebalancer.records.render import report_record, report_table
from rebalancer.records.series import bucket_bounds, buckets
from tests.unit.test_efficiency import SETTINGS, T0, evict_all, plan_at, scene

POOLS = {"hot": "default", "cold": "default", "stuck": "default"}


def recorded() -> EfficiencyState:
    nodes, pods, report = scene()
    snap, plan = plan_at(nodes, pods, report, T0)
    return observe_cycle(EfficiencyState(), snap, plan, evict_all(plan), "schedule", SETTINGS)


def test_buckets_cover_the_period_and_the_last_one_ends_at_its_end() -> None:
    assert bucket_bounds(0, 10_800, 3600) == [(0, 3600), (3600, 7200), (7200, 10_800)]
    assert bucket_bounds(0, 9000, 3600) == [(0, 1800), (1800, 5400), (5400, 9000)]  # a short first one
    with pytest.raises(ValueError, match="width > 0"):
        bucket_bounds(0, 100, 0)


def test_each_bucket_counts_only_its_own_cycles_and_a_missing_reference_stays_unknown() -> None:
    state = recorded()
    bounds = [(T0 - 3600, T0 - 1), (T0 - 1, T0 + 3600)]
    timeline = buckets(state, {bounds[1]: {"hot": 10.0}}, POOLS, bounds)
    before, during = (b.report.cluster for b in timeline)
    assert (before.found, before.reference, before.discovery) == (0, None, None)
    assert (during.found, during.acted, during.evictions, during.reference, during.discovery) == (2, 1, 1, 1, 1.0)


def test_table_and_json_name_the_reasons_and_never_show_unknown_as_zero() -> None:
    state = recorded()
    report = compute_rates(state, None, POOLS, T0 - 1, T0 + 3600, reference_problem="Prometheus down")
    table = report_table(report)
    cluster_row = next(line for line in table.splitlines() if line.startswith("cluster"))
    assert cluster_row.split()[1] == "?" and cluster_row.split()[4] == "-"  # hot(ref) unknown, no discovery
    assert "reference: Prometheus down" in table
    assert "stuck: no-evictable-pod" in table
    doc = report_record(report)
    assert doc["referenceProblem"] == "Prometheus down"
    assert doc["pools"][0]["discovery"] is None and doc["pools"][0]["eviction"] == 0.5


def test_plots_html_with_four_charts_png_and_a_clear_error_for_other_names(tmp_path: Path) -> None:
    state = recorded()
    timeline = buckets(state, None, POOLS, [(T0 - 3600, T0 - 1), (T0 - 1, T0 + 3600)])
    assert [c.title for c in charts(timeline)] == [
        "Hot nodes",
        "Evictions and bounce-backs",
        "Rates",
        "Blocks by limiter",
    ]
    page = write_plot(tmp_path / "r.html", timeline, "the <table>").read_text()
    assert page.count("<svg") == 4 and "the &lt;table&gt;" in page  # the text is escaped
    png = write_plot(tmp_path / "r.png", timeline, "")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match=r"\.png or \.html"):
        write_plot(tmp_path / "r.pdf", timeline, "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--period", "a day"], "--period 'a day' is not a duration"),
        (["--bucket", "0.5h"], "--bucket '0.5h' is not a duration"),
        (["--until", "yesterday"], "--until 'yesterday' is not ISO 8601 or epoch seconds"),
        (["--until", "nan"], "--until 'nan' is not ISO 8601 or epoch seconds"),
        (["--until", "1e300"], "--until '1e300' is not ISO 8601 or epoch seconds"),
    ],
)
def test_report_arguments_are_checked_before_anything_is_read(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("strategies: []\n")
    assert cli.main(["report", "--policy", str(policy), *args]) == cli.EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_a_cycle_on_the_boundary_of_two_buckets_counts_in_one() -> None:
    state = recorded()  # one cycle at T0: hot and stuck found, one eviction from hot
    timeline = buckets(state, None, POOLS, bucket_bounds(T0 - 7200, T0 + 3600, 3600))  # T0 ends the 2nd
    counted = [(b.report.cluster.found, b.report.cluster.acted, b.report.cluster.evictions) for b in timeline]
    assert counted == [(0, 0, 0), (2, 1, 1), (0, 0, 0)]
    whole = compute_rates(state, None, POOLS, T0 - 7200, T0 + 3600).cluster
    assert sum(c[2] for c in counted) == whole.evictions == 1


def test_a_plot_that_cannot_be_written_is_named_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 20}}\nstate: {namespace: ns}\n")
    cluster = ["--kubeconfig", str(tmp_path / "no-kubeconfig")]  # never opened: the plot is checked first
    for plot, message in (
        (tmp_path / "no-dir" / "r.html", "cannot write the plot there: no directory"),
        (tmp_path / "r.pdf", "the plot file must end in .png or .html"),
    ):
        assert cli.main(["report", "--policy", str(policy), *cluster, "--plot", str(plot)]) == cli.EXIT_CONFIG
        assert f"{plot}: {message}" in capsys.readouterr().err
    (tmp_path / "d.html").mkdir()
    with pytest.raises(ConfigError, match=r"d\.html: cannot write: Is a directory"):
        write_plot(tmp_path / "d.html", buckets(recorded(), None, POOLS, [(T0 - 1, T0 + 1)]), "")
