"""Text for people: numbers, Markdown and terminal strings, one formatter of each kind.

Every report (Markdown, HTML, JSON summaries), the command line and the Dagster metadata format
numbers and trace strings through these, so a value reads the same wherever it is shown.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence

# How a value that is missing, not a number or not finite is shown.
MISSING = "-"


def number(value: object, digits: int = 3, signed: bool = False, percent: bool = False) -> str:
    """`value` with `digits` decimals (a sign when `signed`; `percent`: times 100 with one
    decimal and a `%`); MISSING for None, a boolean, a non-number, NaN or an infinity. Rounded
    first, so that -1e-17 reads 0.000 and not -0.000."""
    if value is None or isinstance(value, bool):
        return MISSING
    try:
        figure = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return MISSING
    if not math.isfinite(figure):
        return MISSING
    if percent:
        figure, digits = figure * 100, 1
    figure = round(figure, digits) + 0.0
    text = f"{figure:+.{digits}f}" if signed else f"{figure:.{digits}f}"
    return text + "%" if percent else text


def pvalue(value: float | None) -> str:
    """A p-value with four decimals, `<0.0001` below that; MISSING when there is none."""
    if value is None or not math.isfinite(value):
        return MISSING
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def printable(text: object, width: int | None = None, ellipsis: str = "\u2026") -> str:
    """`text` as plain text for a terminal or a chart: control characters (escape sequences
    included) become spaces, ends are stripped, and with `width` it is cut to that many
    characters, the last one `ellipsis`."""
    value = "".join(
        " " if unicodedata.category(ch).startswith("C") else ch for ch in str(text)
    ).strip()
    if width is not None and len(value) > width:
        value = value[: width - len(ellipsis)] + ellipsis
    return value


def escape_markdown(text: object) -> str:
    """`text` safe inside Markdown (also a table cell): no HTML, no code spans, no cell breaks,
    one line."""
    value = str(text)
    for raw, safe in (
        ("\\", "\\\\"),
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("|", "\\|"),
        ("`", "\\`"),
        ("\r\n", " "),
        ("\n", " "),
        ("\r", " "),
    ):
        value = value.replace(raw, safe)
    return value


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table, every header and cell escaped (`escape_markdown`)."""
    lines = ["| " + " | ".join(escape_markdown(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(escape_markdown(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
