"""Markdown and console tables (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def fmt(value, digits: int = 3) -> str:
    """Numbers with `digits` significant digits, no scientific notation for ordinary sizes."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 10**digits:
            return f"{value:,.0f}"
        decimals = max(digits - 1 - _int_digits(magnitude) + 1, 0)
        return f"{value:.{decimals}f}"
    return str(value)


def _int_digits(magnitude: float) -> int:
    """Digits before the decimal point (0 for values below 1, counting leading zeros negative)."""
    import math

    return math.floor(math.log10(magnitude)) + 1


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A GitHub markdown table; cells are formatted with fmt()."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns: {row!r}")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def console_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """Aligned plain-text columns for the terminal."""
    cells = [list(headers)] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
