"""HTML primitives both reports use: escaping, a table, a self-contained page, embedded charts
and a page that says one thing in words.

A page needs no network and runs no script: charts are embedded as base64 `data:` SVG images (an
image cannot run a script, and chart text never reaches the HTML parser), every string is escaped
with `html.escape`, and a Content-Security-Policy tag forbids scripts and every network fetch as
a second line of defence.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from retrieval_pipeline.reports.svg import Chart
from retrieval_pipeline.text import MISSING, escape_markdown, number, visible

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:84rem;padding:0 1rem;color:#212121;line-height:1.45}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0 1rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}td{white-space:nowrap}
.scroll{overflow-x:auto}
th{background:#f5f5f5}td.text,th.text{text-align:left}td.text{white-space:normal;max-width:12rem}
caption{caption-side:top;text-align:left;font-weight:600;padding:.25rem 0}
.flag{border-left:.4rem solid #C62828;background:#FFEBEE;padding:.5rem 1rem}
.ok{border-left:.4rem solid #2E7D32;background:#E8F5E9;padding:.5rem 1rem}
.better{color:#2E7D32;font-weight:600}.worse{color:#C62828;font-weight:600}
tr.worse td{background:#FFEBEE}tr.watch td{background:#FFF8E1}
.watch{border-left:.4rem solid #F9A825;background:#FFF8E1;padding:.5rem 1rem}
.muted{color:#757575}figure{margin:1rem 0}img{max-width:100%;height:auto}
"""
# No script, no network: images only from data: URIs, styles only inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def esc(text: object) -> str:
    """`text` safe inside HTML text and attribute values, without control or bidirectional
    characters (`text.visible`)."""
    return html.escape(visible(text), quote=True)


def chart_data_uri(chart: Chart) -> str:
    """`chart` as an SVG `data:` URI."""
    return "data:image/svg+xml;base64," + base64.b64encode(chart.svg().encode()).decode("ascii")


def chart_html(chart: Chart, alt: str, caption: str | None = None) -> str:
    """An embedded chart with its (escaped) alternative text and caption."""
    image = f'<img alt="{esc(alt)}" src="{chart_data_uri(chart)}">'
    text = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{image}{text}</figure>"


def render_table(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    digits: int = 3,
    caption: str | None = None,
    row_classes: Sequence[str] | None = None,
) -> str:
    """An HTML table of `frame` (every cell and header escaped; numbers to `digits` places,
    missing values as `-`); `headers` renames columns for display; `row_classes`, one per row
    (empty: none), marks rows: `worse` (a failing row), `watch`."""
    chosen = list(columns) if columns is not None else [str(c) for c in frame.columns]
    names = headers or {}
    text_columns = {
        c for c in chosen if not pd.api.types.is_numeric_dtype(frame[c]) or frame[c].dtype == bool
    }
    head = "".join(
        f'<th class="{"text" if c in text_columns else "num"}">{esc(names.get(c, c))}</th>'
        for c in chosen
    )
    body = []
    classes = list(row_classes) if row_classes is not None else [""] * len(frame)
    for record, row_class in zip(frame[chosen].to_dict(orient="records"), classes, strict=True):
        cells = []
        for column in chosen:
            value = record[column]
            if column in text_columns:
                shown = MISSING if value is None or value is pd.NA else str(value)
                cells.append(f'<td class="text">{esc(shown)}</td>')
            elif isinstance(value, int | np.integer):
                cells.append(f"<td>{int(value)}</td>")
            else:
                cells.append(f"<td>{esc(number(value, digits))}</td>")
        opening = f'<tr class="{esc(row_class)}">' if row_class else "<tr>"
        body.append(opening + "".join(cells) + "</tr>")
    title = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table>{title}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def html_page(title: str, sections: Iterable[str]) -> str:
    """A complete, self-contained page: `title` is escaped, `sections` are trusted HTML."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><h1>{esc(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def notice_html(title: str, lines: Sequence[str]) -> str:
    """A page that says one thing in words (e.g. that no comparison was possible); escaped."""
    body = "".join(f"<p>{esc(line)}</p>" for line in lines)
    return html_page(title, [f'<div class="flag">{body}</div>'])


def notice_markdown(title: str, lines: Sequence[str]) -> str:
    """`notice_html` in Markdown."""
    return "\n\n".join([f"# {escape_markdown(title)}", *map(escape_markdown, lines)]) + "\n"
