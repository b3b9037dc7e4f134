"""Aligned text columns for the tables the command line prints (pure)."""

from __future__ import annotations


def text_table(header: list[str], rows: list[list[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """Aligned columns, two spaces apart; columns in ``right`` right-aligned; the last column is free text."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]
    widths[-1] = 0

    def fmt(row: list[str]) -> str:
        cells = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        return "  ".join(cells).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]
