"""Where the shared real-usage sample lives (``../shared/data`` beside the project; REBALANCER_DATA_DIR overrides)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("REBALANCER_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
TRACE_DIR = DATA_DIR / "bitbrains-rnd-2013-07"
