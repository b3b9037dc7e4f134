"""`rebalancer report --plot FILE`: the efficiency figures over time.

``.html``: a self-contained page (the text report and four inline SVG charts), no dependency;
``.png``: the same four charts drawn with matplotlib (the ``backtest`` extra).
Charts: hot nodes (reference, found, acted), evictions, the three rates, blocks by limiter.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rebalancer.domain.errors import ConfigError
from rebalancer.offline.pyplot import load_pyplot
from rebalancer.records.series import Bucket

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    series: tuple[tuple[str, tuple[float | None, ...]], ...]  # (label, one value per bucket; None: unknown)
    percent: bool = False


def charts(timeline: Sequence[Bucket]) -> tuple[Chart, ...]:
    cluster = [b.report.cluster for b in timeline]
    limiters = sorted({name for p in cluster for name in p.blocked})
    return (
        Chart(
            "Hot nodes",
            (
                ("hot by the reference", tuple(None if p.reference is None else float(p.reference) for p in cluster)),
                ("found", tuple(float(p.found) for p in cluster)),
                ("acted on", tuple(float(p.acted) for p in cluster)),
            ),
        ),
        Chart(
            "Evictions and bounce-backs",
            (
                ("evictions", tuple(float(p.evictions) for p in cluster)),
                ("bounce-backs", tuple(float(p.bounce_backs) for p in cluster)),
            ),
        ),
        Chart(
            "Rates",
            (
                ("discovery", tuple(p.discovery for p in cluster)),
                ("eviction", tuple(p.eviction for p in cluster)),
                ("effective", tuple(p.effective for p in cluster)),
            ),
            percent=True,
        ),
        Chart(
            "Blocks by limiter",
            tuple((name, tuple(float(p.blocked.get(name, 0)) for p in cluster)) for name in limiters)
            or (("none", tuple(0.0 for _ in cluster)),),
        ),
    )


def check_plot_path(path: str | Path) -> Path:
    """The plot's file, checked before anything is read: a ConfigError unless it ends in .png or .html and
    its directory exists."""
    target = Path(path)
    if target.suffix.lower() not in (".html", ".png"):
        raise ConfigError(str(path), [("", "the plot file must end in .png or .html")])
    if not target.parent.is_dir():
        raise ConfigError(str(path), [("", f"cannot write the plot there: no directory {target.parent}")])
    return target


def write_plot(path: str | Path, timeline: Sequence[Bucket], text: str) -> Path:
    target = check_plot_path(path)
    try:
        if target.suffix.lower() == ".html":
            target.write_text(_html(timeline, text), encoding="utf-8")
        else:
            _png(target, timeline)
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot write: {exc.strerror or exc}")]) from exc
    return target


def _label(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%m-%d %H:%M")


def _html(timeline: Sequence[Bucket], text: str) -> str:
    svgs = "\n".join(svg_chart(chart, [_label(b.end) for b in timeline]) for chart in charts(timeline))
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>rebalancer efficiency</title>"
        "<style>body{font-family:sans-serif}pre{font-size:12px}svg{margin:8px}</style></head><body>\n"
        f"<h1>rebalancer efficiency</h1>\n<pre>{html.escape(text)}</pre>\n{svgs}\n</body></html>\n"
    )


def svg_chart(chart: Chart, labels: Sequence[str], width: int = 560, height: int = 260) -> str:
    left, right, top, bottom = 50, 150, 30, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, vs in chart.series for v in vs if v is not None]
    top_value = 1.0 if chart.percent else max([1.0, *values])
    count = max(1, len(labels) - 1)

    def x(i: int) -> float:
        return left + plot_w * i / count

    def y(v: float) -> float:
        return top + plot_h * (1 - v / top_value)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>",
        f"<title>{html.escape(chart.title)}</title>",
        f"<text x='{left}' y='18' font-weight='bold'>{html.escape(chart.title)}</text>",
        f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#888'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='#888'/>",
        f"<text x='{left - 6}' y='{top + 4}' text-anchor='end' font-size='10'>"
        f"{'100%' if chart.percent else f'{top_value:g}'}</text>",
        f"<text x='{left - 6}' y='{top + plot_h}' text-anchor='end' font-size='10'>0</text>",
    ]
    for i in (0, len(labels) - 1) if labels else ():
        parts.append(f"<text x='{x(i):.1f}' y='{height - 20}' text-anchor='middle' font-size='10'>{labels[i]}</text>")
    for n, (name, series) in enumerate(chart.series):
        color = _COLORS[n % len(_COLORS)]
        runs: list[list[str]] = [[]]
        for i, v in enumerate(series):
            if v is None:
                runs.append([])  # unknown: a gap, never drawn as 0
            else:
                runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f"<circle cx='{cx}' cy='{cy}' r='2.5' fill='{color}'/>")
            elif run:
                parts.append(f"<polyline fill='none' stroke='{color}' stroke-width='2' points='{' '.join(run)}'/>")
        parts.append(
            f"<text x='{left + plot_w + 10}' y='{top + 14 * (n + 1)}' font-size='11' fill='{color}'>"
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _png(path: Path, timeline: Sequence[Bucket]) -> None:
    plt = load_pyplot(path, "a PNG")
    ends = [datetime.fromtimestamp(b.end, UTC) for b in timeline]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True, squeeze=False)
    for ax, chart in zip(axes.flat, charts(timeline), strict=True):
        for name, series in chart.series:
            ax.plot(ends, [float("nan") if v is None else (100 * v if chart.percent else v) for v in series],
                    marker="o", markersize=3, label=name)  # fmt: skip
        ax.set_title(chart.title)
        if chart.percent:
            ax.set_ylim(0, 105)
            ax.set_ylabel("%")
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
