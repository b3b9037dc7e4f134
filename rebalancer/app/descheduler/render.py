"""The imported policy as YAML, its notes as comments on top (pure)."""

from __future__ import annotations

import textwrap

import yaml

from rebalancer.app.descheduler.convert import REAL_USAGE, Conversion
from rebalancer.app.descheduler.notes import Note

WIDTH = 110


def notes_text(conversion: Conversion, prefix: str = "") -> str:
    """The notes as text: what was not imported, what means something else, how to leave requests."""
    lines: list[str] = []
    sections = (
        ("Not imported (no equivalent):", [n for n in conversion.notes if n.kind == "unsupported"]),
        ("Imported with a difference:", [n for n in conversion.notes if n.kind == "differs"]),
    )
    for title, notes in sections:
        if notes:
            lines.append(prefix + title)
            lines += [_bullet(note, prefix) for note in notes]
    if conversion.by_requests:
        lines.append(prefix + "Classified by requests (classifyBy: requests), as the descheduler did.")
        lines += textwrap.wrap(REAL_USAGE, WIDTH, initial_indent=prefix + "  ", subsequent_indent=prefix + "  ")
    return "".join(line.rstrip() + "\n" for line in lines)


def _bullet(note: Note, prefix: str) -> str:
    return "\n".join(textwrap.wrap(str(note), WIDTH, initial_indent=prefix + "  - ", subsequent_indent=prefix + "    "))


def policy_yaml(conversion: Conversion, source_name: str) -> str:
    header = f"# Imported from {source_name} ({conversion.shape}) by `rebalancer import-policy`.\n"
    body = yaml.safe_dump(conversion.policy, sort_keys=False, default_flow_style=False, width=WIDTH)
    return header + notes_text(conversion, "# ") + body
