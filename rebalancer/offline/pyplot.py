"""matplotlib, which is optional (the ``backtest`` extra), loaded for a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rebalancer.domain.errors import ConfigError


def load_pyplot(path: str | Path, what: str) -> Any:
    """``matplotlib.pyplot`` on the Agg backend; a ConfigError naming ``path`` and the package without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError(
            str(path), [("", f"{what} needs matplotlib, which is not installed: pip install matplotlib")]
        ) from exc
    return plt
