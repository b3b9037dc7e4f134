"""An optional PNG of a back-test: predicted against actual peak, one panel per aggregation.

matplotlib is optional (the ``backtest`` extra); without it, :func:`plot_backtest` raises
a ConfigError that names the missing package.
"""

from __future__ import annotations

import math
from pathlib import Path

from rebalancer.domain.errors import ConfigError
from rebalancer.offline.predict.backtest import BacktestReport
from rebalancer.offline.pyplot import load_pyplot


def plot_backtest(report: BacktestReport, path: str | Path) -> Path:
    plt = load_pyplot(path, "the plot")
    keys = list(report.points)
    cols = min(len(keys), 4) or 1
    rows = math.ceil(len(keys) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[len(keys) :]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys, strict=False):
        predicted, actual = report.points[key]
        ax.scatter(actual, predicted, s=4, alpha=0.3)
        top = max(110.0, float(actual.max(initial=0)), float(predicted.max(initial=0)))
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
        ax.axvline(report.threshold, color="red", linewidth=0.8, linestyle="--")
        ax.axhline(report.threshold, color="red", linewidth=0.8, linestyle="--")
        ax.set_title(f"{key[0]} +{key[1]:g}")
        ax.set_xlabel("actual peak, % of capacity")
        ax.set_ylabel("predicted peak, %")
    fig.suptitle(f"Back-test: day d from d-{report.days}..d-1, {report.evaluated} entity-days")
    fig.tight_layout()
    out = Path(path)
    try:
        fig.savefig(out, dpi=100)
    except OSError as exc:
        raise ConfigError(str(out), [("", f"cannot write the plot: {exc.strerror or exc}")]) from exc
    finally:
        plt.close(fig)
    return out
