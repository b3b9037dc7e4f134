"""Where the real-usage samples live inside the repository: the Bitbrains trace in ``data/`` (also used by
the documented commands) and the Alertmanager webhook body in ``tests/data/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE_DIR = ROOT / "data" / "bitbrains-rnd-2013-07"
WEBHOOK_SAMPLE = ROOT / "tests" / "data" / "alertmanager-webhook-v4.json"
