"""Text for people: numbers, Markdown and terminal strings, one formatter of each kind.

Every report (Markdown, HTML, JSON summaries), the command line and the Dagster metadata format
numbers and trace strings through these, so a value reads the same wherever it is shown.
"""

from __future__ import annotations

import difflib
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence

# How a value that is missing, not a number or not finite is shown.
MISSING = "-"


def finite(value: object, *, numbers_only: bool = False) -> float | None:
    """`value` as a finite float; None for None, a boolean, a non-number (pd.NA included), NaN or
    an infinity: the one test of "is there a number to show or compare".

    By default anything `float()` reads counts (a numeric string, a numpy integer, a Decimal).
    With `numbers_only`, only a Python int or float (numpy's float64 is one) does: the test of a
    value judged as it is stored, such as the deploy gate's means and thresholds, where the text
    "0.9" must not pass for a number."""
    if value is None or isinstance(value, bool):
        return None
    if numbers_only and not isinstance(value, int | float):
        return None
    try:
        figure = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return figure if math.isfinite(figure) else None


def json_text(
    value: object,
    *,
    indent: int | None = None,
    ensure_ascii: bool = False,
    default: Callable[[object], object] | None = None,
    separators: tuple[str, str] | None = None,
) -> str:
    """`value` as strict JSON (RFC 8259), the one JSON writer of every file and summary the
    project writes: a NaN or an infinity anywhere raises ValueError (naming no value: the caller
    must not have one), where `json.dumps` would write `NaN`, which no strict parser reads."""
    return json.dumps(
        value,
        indent=indent,
        ensure_ascii=ensure_ascii,
        default=default,
        separators=separators,
        allow_nan=False,
    )


def number(value: object, digits: int = 3, signed: bool = False, percent: bool = False) -> str:
    """`value` with `digits` decimals (a sign when `signed`; `percent`: times 100 with one
    decimal and a `%`); MISSING for None, a boolean, a non-number, NaN or an infinity. Rounded
    first, so that -1e-17 reads 0.000 and not -0.000."""
    figure = finite(value)
    if figure is None:
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


# Bidirectional controls reorder the text shown around them (a name can read as another one);
# control characters (NUL, escape sequences) have no place in a report either.
_BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_INVISIBLE = {
    **{code: None for code in range(0x20) if chr(code) not in "\t\n\r"},
    **{code: None for code in range(0x7F, 0xA0)},
    **{ord(ch): None for ch in _BIDI_CONTROLS},
}


def visible(text: object) -> str:
    """`text` without control characters (tab and line breaks kept) and without bidirectional
    controls: what a report may show of a string that comes from traces."""
    return str(text).translate(_INVISIBLE)


def escape_markdown(text: object) -> str:
    """`text` safe inside Markdown (also a table cell): no HTML, no code spans, no links or
    images (`[`, `]` escaped: `![px](http://...)` stays text), no cell breaks, one line, and
    nothing invisible (`visible`)."""
    value = visible(text)
    for raw, safe in (
        ("\\", "\\\\"),
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("|", "\\|"),
        ("`", "\\`"),
        ("[", "\\["),
        ("]", "\\]"),
        ("\r\n", " "),
        ("\n", " "),
        ("\r", " "),
        ("\t", " "),
    ):
        value = value.replace(raw, safe)
    return value


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table, every header and cell escaped (`escape_markdown`)."""
    lines = ["| " + " | ".join(escape_markdown(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(escape_markdown(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells (difflib's ratio of at least 0.6), if any:
    what "did you mean ...?" offers for a field, a metric or an option."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None
