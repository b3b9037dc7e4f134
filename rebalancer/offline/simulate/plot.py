"""`rebalancer simulate --plot FILE`: hot nodes, evictions and landed-back evictions per hour, one line
per policy (every chart lists every policy, so a colour means one policy throughout). ``.html``: self-contained (the table and inline SVG charts drawn by the efficiency report's
chart code); ``.png``: matplotlib (optional)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from rebalancer.domain.errors import ConfigError
from rebalancer.offline.efficiency_plot import Chart, svg_chart
from rebalancer.offline.pyplot import load_pyplot
from rebalancer.offline.simulate.result import VariantResult

HOUR = 3600


def charts(results: Sequence[VariantResult], start: float) -> tuple[tuple[Chart, ...], tuple[float, ...]]:
    """The charts, and the start of each hour they plot."""
    step = results[0].step_seconds
    per_hour = HOUR // step
    hours = len(results[0].hot_series) // per_hour
    starts = tuple(start + h * HOUR for h in range(hours))

    def hourly(result: VariantResult, what: str) -> tuple[float | None, ...]:
        if what == "hot":
            series = result.hot_series
            return tuple(sum(series[h * per_hour : (h + 1) * per_hour]) / per_hour for h in range(hours))
        counts = [0.0] * hours
        for move in result.moves:
            h = int((move.at - start) // HOUR)
            if 0 <= h < hours and (what == "evictions" or move.landed_back):
                counts[h] += 1
        return tuple(counts)

    return (
        Chart("Hot nodes (mean per hour)", tuple((r.name, hourly(r, "hot")) for r in results)),
        Chart("Evictions per hour", tuple((r.name, hourly(r, "evictions")) for r in results)),
        Chart("Landed back per hour", tuple((r.name, hourly(r, "back")) for r in results)),
    ), starts


def write_plot(path: str | Path, results: Sequence[VariantResult], start: float, text: str) -> Path:
    target = Path(path)
    drawn, starts = charts(results, start)
    labels = [datetime.fromtimestamp(s, UTC).strftime("%m-%d %H:%M") for s in starts]
    if target.suffix.lower() == ".html":
        svgs = "\n".join(svg_chart(chart, labels, width=760) for chart in drawn)
        target.write_text(
            "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>rebalancer simulate</title>"
            "<style>body{font-family:sans-serif}pre{font-size:12px}svg{margin:8px}</style></head><body>\n"
            f"<h1>rebalancer simulate</h1>\n<pre>{html.escape(text)}</pre>\n{svgs}\n</body></html>\n",
            encoding="utf-8",
        )
    elif target.suffix.lower() == ".png":
        plt = load_pyplot(target, "a PNG")
        times = [datetime.fromtimestamp(s, UTC) for s in starts]
        fig, axes = plt.subplots(len(drawn), 1, figsize=(12, 3.2 * len(drawn)), sharex=True, squeeze=False)
        for ax, chart in zip(axes.flat, drawn, strict=True):
            for name, series in chart.series:
                ax.plot(times, [float("nan") if v is None else v for v in series], label=name)
            ax.set_title(chart.title)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(target, dpi=100)
        plt.close(fig)
    else:
        raise ConfigError(str(path), [("", "the plot file must end in .png or .html")])
    return target
