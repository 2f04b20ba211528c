"""Reports for eyes and for programs: self-contained HTML, Markdown and JSON.

Pure: a `comparison.Comparison`, a `report.RegressionReport` (or a DataFrame) in, text out;
no DuckDB, no Dagster.

- `comparison_html`, `comparison_markdown`, `comparison_json`: the A/B comparison report
  (`write_comparison_report` picks one by the file's extension).
- `regression_html`: the nightly regression report of one partition (misses in words, bars of
  each headline metric per segment against the thresholds, the trend over the last 30
  partitions, coverage, the full table); `notice_html` / `notice_markdown`: a page in words.
- `trend_section`, `render_table` and `html_page`: the pieces both reports use (the trend of each
  headline metric per segment over the last N partitions, a table, the page).

Charts are written as SVG (`svg_chart`) and embedded as base64 `data:` images: the page needs no
network, an image cannot run a script, and chart text never reaches the HTML parser. Every
string that comes from trace data (segment, variant, ids, metric names) is escaped with
`html.escape` in HTML and in chart text, and with `report.escape_markdown` in Markdown; in
charts it is also stripped of control characters and shortened. A Content-Security-Policy tag
forbids scripts and every network fetch as a second line of defence.
"""

from __future__ import annotations

import base64
import html
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from retrieval_pipeline.comparison import (
    CONFIDENCE_LEVEL,
    CellResult,
    Comparison,
    threshold_for,
)
from retrieval_pipeline.report import RegressionReport, escape_markdown, segment_label
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.svg_chart import (
    FONT_SIZE,
    Chart,
    Panel,
    Series,
    nice_ticks,
    padded_range,
    text_width,
    tick_label,
)

MISSING = "-"
REPORT_SUFFIXES = (".html", ".md", ".json")
_ARM_COLOURS = ("#4C72B0", "#DD8452")  # control, candidate
_VERDICT_COLOURS = {
    "better": "#2E7D32",
    "worse": "#C62828",
    "no significant difference": "#616161",
    "not tested": "#9E9E9E",
}
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:72rem;padding:0 1rem;color:#212121;line-height:1.45}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0 1rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}td{white-space:nowrap}
.scroll{overflow-x:auto}
th{background:#f5f5f5}td.text,th.text{text-align:left}
caption{caption-side:top;text-align:left;font-weight:600;padding:.25rem 0}
.flag{border-left:.4rem solid #C62828;background:#FFEBEE;padding:.5rem 1rem}
.ok{border-left:.4rem solid #2E7D32;background:#E8F5E9;padding:.5rem 1rem}
.better{color:#2E7D32;font-weight:600}.worse{color:#C62828;font-weight:600}
.muted{color:#757575}figure{margin:1rem 0}img{max-width:100%;height:auto}
"""
# No script, no network: images only from data: URIs, styles only inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


# --- building blocks -------------------------------------------------------------------------


def esc(text: object) -> str:
    """`text` safe inside HTML text and attribute values."""
    return html.escape(str(text), quote=True)


def chart_label(text: object, width: int = 40) -> str:
    """`text` as plain chart text: no control characters, at most `width` characters (it is
    XML-escaped when the chart is written)."""
    value = "".join(
        " " if unicodedata.category(ch).startswith("C") else ch for ch in str(text)
    ).strip()
    if len(value) > width:
        value = value[: width - 1] + "\u2026"
    return value


def _number(value: object, digits: int = 3, signed: bool = False, percent: bool = False) -> str:
    if value is None or isinstance(value, bool):
        return MISSING
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return MISSING
    if not math.isfinite(number):
        return MISSING
    if percent:
        number, digits = number * 100, 1
    # rounded first, so that -1e-17 reads 0.000 and not -0.000
    number = round(number, digits) + 0.0
    text = f"{number:+.{digits}f}" if signed else f"{number:.{digits}f}"
    return text + "%" if percent else text


def _pvalue(value: float | None) -> str:
    if value is None:
        return MISSING
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


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
) -> str:
    """An HTML table of `frame` (every cell and header escaped; numbers to `digits` places,
    missing values as `-`); `headers` renames columns for display."""
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
    for record in frame[chosen].to_dict(orient="records"):
        cells = []
        for column in chosen:
            value = record[column]
            if column in text_columns:
                shown = MISSING if value is None or value is pd.NA else str(value)
                cells.append(f'<td class="text">{esc(shown)}</td>')
            elif isinstance(value, int | np.integer):
                cells.append(f"<td>{int(value)}</td>")
            else:
                cells.append(f"<td>{esc(_number(value, digits))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
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


# --- the trend, for the regression report ----------------------------------------------------


def _segment_order(segments: Iterable[object]) -> list[str]:
    names = sorted({str(s) for s in segments})
    return [s for s in names if s != OVERALL_SEGMENT] + (
        [OVERALL_SEGMENT] if OVERALL_SEGMENT in names else []
    )


# The trend grid in pixels: each panel, the room for its y labels (such as 0.755) on its left,
# for its title above it, and for the two-line day labels under the last row.
_TREND_PANEL_WIDTH, _TREND_PANEL_HEIGHT = 330.0, 120.0
_TREND_LEFT, _TREND_RIGHT, _TREND_TITLE, _TREND_BOTTOM = 52.0, 16.0, 26.0, 44.0


def _day_ticks(first: date, last: date) -> tuple[list[float], list[str], tuple[float, float]]:
    """X ticks of a daily trend, as day ordinals: about six days from `first` to `last` (whole
    days, never hours), labelled `Nov 30` with the year under the first label and wherever it
    changes, and the axis limits with half a day (or 3% of the span) each side."""
    step = max(1, math.ceil((last - first).days / 6))
    days = [first + timedelta(days=offset) for offset in range(0, (last - first).days + 1, step)]
    labels = []
    for index, day in enumerate(days):
        label = f"{day:%b} {day.day}"
        if index == 0 or day.year != days[index - 1].year:
            label += f"\n{day.year}"
        labels.append(label)
    pad = max(0.5, 0.03 * (last - first).days)
    low, high = float(first.toordinal()), float(last.toordinal())
    return [float(day.toordinal()) for day in days], labels, (low - pad, high + pad)


def trend_chart(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    last_n: int = 30,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    value_column: str = "value",
    colours: Mapping[str, str] | None = None,
) -> Chart | None:
    """Small multiples, one row per segment and one column per metric: each variant's value over
    the last `last_n` partitions present, with the threshold as a dashed line. None when empty.

    `frame`: partition_date, segment, variant, metric and `value_column` (e.g. the pipeline's
    `segment_metrics` with `value_column="mean"`); `thresholds` as in `ComparisonSettings`;
    `colours` by variant (default: tab10 in sorted order, as `variant_colours`)."""
    missing = [
        c
        for c in ("partition_date", "segment", "variant", "metric", value_column)
        if c not in frame.columns
    ]
    if missing:
        raise ValueError(f"trend data lacks column(s): {', '.join(missing)}")
    data = frame.assign(partition_date=pd.to_datetime(frame["partition_date"]).dt.date)
    if metrics is not None:
        data = data[data["metric"].isin(list(metrics))]
    days = sorted(pd.unique(data["partition_date"]))[-last_n:] if last_n > 0 else []
    data = data[data["partition_date"].isin(days)]
    if data.empty:
        return None
    chosen = list(metrics) if metrics is not None else [str(m) for m in pd.unique(data["metric"])]
    chosen = [m for m in chosen if (data["metric"] == m).any()]
    segments = _segment_order(data["segment"])
    variants = sorted(str(v) for v in pd.unique(data["variant"]))
    palette = {**variant_colours(variants), **(colours or {})}
    ticks, tick_labels, limits = _day_ticks(days[0], days[-1])
    column_width = _TREND_LEFT + _TREND_PANEL_WIDTH
    chart = Chart(column_width * len(chosen) + _TREND_RIGHT, 0.0)
    legend = [Series(chart_label(v, 24), palette[v], "line", [], []) for v in variants]
    top = chart.legend_height(legend) + 8 + _TREND_TITLE
    row_height = _TREND_PANEL_HEIGHT + _TREND_TITLE
    chart.height = top + row_height * len(segments) - _TREND_TITLE + _TREND_BOTTOM
    chart.legend(legend, 4.0)
    groups = data.groupby([data["segment"].astype(str), "metric"], sort=False)
    cells = {key: group for key, group in groups}
    for row, segment in enumerate(segments):
        for col, metric in enumerate(chosen):
            cell = cells.get((segment, metric), data.iloc[:0])
            limit = threshold_for(thresholds or {}, segment, metric)
            values = [float(v) for v in cell[value_column].dropna()]
            y_range = padded_range(values + ([limit] if limit is not None else []))
            panel = chart.panel(
                col * column_width + _TREND_LEFT,
                top + row * row_height,
                _TREND_PANEL_WIDTH,
                _TREND_PANEL_HEIGHT,
                limits,
                y_range,
            )
            for variant in variants:
                line = cell[cell["variant"].astype(str) == variant].sort_values("partition_date")
                line = line[line[value_column].notna()]
                if line.empty:
                    continue
                panel.line(
                    [float(day.toordinal()) for day in line["partition_date"]],
                    line[value_column].astype(float).tolist(),
                    palette[variant],
                    chart_label(variant, 24),
                )
            if limit is not None:
                panel.hline(limit)
            panel.title = chart_label(f"{segment_label(segment)} · {metric}", 52)
            last_row = row == len(segments) - 1
            panel.x_ticks = [
                (t, label if last_row else "") for t, label in zip(ticks, tick_labels, strict=True)
            ]
            y_ticks = nice_ticks(*y_range, count=4)
            panel.y_ticks = [(v, tick_label(v, y_ticks)) for v in y_ticks]
            panel.grid = "both"
    return chart


def trend_section(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    last_n: int = 30,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    value_column: str = "value",
    title: str = "Trend",
    colours: Mapping[str, str] | None = None,
) -> str:
    """An HTML section with `trend_chart` (or a note that there is nothing to draw)."""
    chart = trend_chart(frame, metrics, last_n, thresholds, value_column, colours)
    heading = f"<h2>{esc(title)}</h2>"
    if chart is None:
        return f'<section>{heading}<p class="muted">No partitions to show.</p></section>'
    caption = f"Each metric per segment and variant over the last {last_n} partitions present; "
    caption += "dashed: the threshold."
    return f"<section>{heading}{chart_html(chart, title, caption)}</section>"


# --- the comparison charts -------------------------------------------------------------------


def arm_colours(control: str, candidate: str) -> dict[str, str]:
    """The comparison charts' colours of the two arms, for a trend drawn beside them."""
    return {control: _ARM_COLOURS[0], candidate: _ARM_COLOURS[1]}


def _intervals(
    bars: Iterable[tuple[float, float | None, float | None]],
) -> list[tuple[float, float, float]]:
    """The (position, low, high) of each bar that has both ends of its interval."""
    return [(at, low, high) for at, low, high in bars if low is not None and high is not None]


# The stacked bar panels in pixels: the legend above, the metric name and 0.0..1.0 beside the
# panels, segment names (at most 18 characters, turned 20 degrees) under the last one.
_BAR_LEFT, _BAR_RIGHT, _BAR_PANEL_HEIGHT, _BAR_GAP, _BAR_BOTTOM = 70.0, 16.0, 190.0, 14.0, 64.0
_SHARE_TICKS = [(v / 5, f"{v / 5:.1f}") for v in range(6)]


def _bar_panels(
    metrics: Sequence[str], segments: Sequence[str], slots: int, legend: Sequence[Series]
) -> tuple[Chart, list[Panel]]:
    """A column of one panel per metric over the same segments (`slots` bars each), values
    0..1.05, the legend above and the segment names under the last panel."""
    width = max(600.0, 50.0 * len(segments) * slots + _BAR_LEFT + 60)
    chart = Chart(width, 0.0)
    top = chart.legend_height(legend) + 10
    chart.legend(legend, 4.0)
    step = _BAR_PANEL_HEIGHT + _BAR_GAP
    chart.height = top + step * len(metrics) - _BAR_GAP + _BAR_BOTTOM
    panels = []
    for row, metric in enumerate(metrics):
        panel = chart.panel(
            _BAR_LEFT,
            top + row * step,
            width - _BAR_LEFT - _BAR_RIGHT,
            _BAR_PANEL_HEIGHT,
            (-0.6, len(segments) - 0.4),
            (0.0, 1.05),
        )
        panel.y_ticks, panel.grid = _SHARE_TICKS, "y"
        panel.x_ticks = [(index, "") for index in range(len(segments))]
        chart.text(16, panel.top + _BAR_PANEL_HEIGHT / 2, chart_label(metric, 20), rotate=-90)
        panels.append(panel)
    bottom = panels[-1].top + _BAR_PANEL_HEIGHT if panels else top
    for index, segment in enumerate(segments):
        x = panels[0].px(index) if panels else 0.0
        chart.text(x + 4, bottom + 16, chart_label(segment_label(segment), 18), 11, "end", -20)
    return chart, panels


def segment_bars_chart(comparison: Comparison) -> Chart:
    """Per metric, each segment's control and candidate means over their annotated traces (what
    thresholds judge) with 95% t intervals, and the segment's threshold as a red dashed line."""
    metrics, segments = comparison.metrics, comparison.segments
    names = (chart_label(comparison.control, 24), chart_label(comparison.candidate, 24))
    legend = [
        Series(name, colour, "bar", [], [])
        for name, colour in zip(names, _ARM_COLOURS, strict=True)
    ]
    chart, panels = _bar_panels(metrics, segments, 2, legend)
    width = 0.38
    for panel, metric in zip(panels, metrics, strict=True):
        cells = [comparison.cell(segment, metric) for segment in segments]
        for arm, prefix in enumerate(("control", "candidate")):
            bars = []
            for index, cell in enumerate(cells):
                mean, low, high = (
                    getattr(cell, f"{prefix}_trace_{end}") for end in ("mean", "ci_low", "ci_high")
                )
                if mean is not None:
                    bars.append((index + (arm - 0.5) * width, mean, low, high))
            panel.bars(
                [b[0] for b in bars], [b[1] for b in bars], width, _ARM_COLOURS[arm], names[arm]
            )
            panel.whiskers(_intervals((x, low, high) for x, _, low, high in bars))
        for index, cell in enumerate(cells):
            if cell.control_trace_mean is None and cell.candidate_trace_mean is None:
                panel.note(index, 0.05, "no data")
            if cell.threshold is not None:
                panel.hline(cell.threshold, index - 1.2 * width, index + 1.2 * width)
    return chart


# Charts with one labelled row per item (forest, coverage) in pixels: the labels' width on the
# left, the panel from the top, the x axis's ticks and label under it, then the legend.
_ROWS_TOP, _ROWS_AXIS, _ROWS_RIGHT = 12.0, 44.0, 16.0


def _row_panel(
    labels: Sequence[str],
    row_height: float,
    x_range: tuple[float, float],
    axis_label: str,
    legend: Sequence[Series],
) -> tuple[Chart, Panel]:
    """A chart whose one panel has a row per label, the first at the top (row `i` at y
    `len(labels) - 1 - i`), over `x_range` with x grid lines, the axis label under it and the
    legend below; the caller sets the x ticks and draws."""
    left = max((text_width(label, FONT_SIZE - 1) for label in labels), default=0.0) + 16
    chart = Chart(max(720.0, left + 360), 0.0)
    height = row_height * max(len(labels), 1)
    chart.height = _ROWS_TOP + height + _ROWS_AXIS + chart.legend_height(legend)
    width = chart.width - left - _ROWS_RIGHT
    panel = chart.panel(left, _ROWS_TOP, width, height, x_range, (-0.6, len(labels) - 0.4))
    panel.y_ticks = [(len(labels) - 1 - index, label) for index, label in enumerate(labels)]
    panel.grid = "x"
    chart.text(left + width / 2, _ROWS_TOP + height + _ROWS_AXIS - 8, axis_label)
    chart.legend(legend, _ROWS_TOP + height + _ROWS_AXIS)
    return chart, panel


def forest_chart(comparison: Comparison) -> Chart:
    """Candidate minus control for every tested cell, with its interval (the cell's `ci_method`);
    coloured by verdict."""
    tested = [(c, c.delta) for c in comparison.cells if c.delta is not None]
    legend = [
        Series(verdict, colour, "point", [], [])
        for verdict, colour in _VERDICT_COLOURS.items()
        if any(c.verdict == verdict for c, _ in tested)
    ]
    ends = [v for c, delta in tested for v in (delta, c.ci_low, c.ci_high) if v is not None]
    x_range = padded_range([0.0, *ends])
    chart, panel = _row_panel(
        [chart_label(f"{segment_label(c.segment)} · {c.metric}", 44) for c, _ in tested],
        24.0,
        x_range,
        chart_label(f"{comparison.candidate} minus {comparison.control}", 60),
        legend,
    )
    panel.vline(0.0, colour="#212121", dashed=False)
    for verdict, colour in _VERDICT_COLOURS.items():
        chosen = [
            (len(tested) - 1 - row, cell, delta)
            for row, (cell, delta) in enumerate(tested)
            if cell.verdict == verdict
        ]
        if not chosen:
            continue
        panel.whiskers(
            _intervals((y, cell.ci_low, cell.ci_high) for y, cell, _ in chosen),
            horizontal=True,
            colour=colour,
            cap=2.0,
        )
        panel.points([delta for *_, delta in chosen], [y for y, _, _ in chosen], colour, verdict)
    x_ticks = nice_ticks(*x_range)
    panel.x_ticks = [(v, tick_label(v, x_ticks)) for v in x_ticks]
    return chart


def coverage_chart(comparison: Comparison) -> Chart:
    """Queries per segment: paired, served by both but not paired, by one arm only."""
    rows = list(comparison.coverage)
    parts = (
        ("paired", "#2E7D32", "paired (tested)"),
        ("shared_unpaired", "#A5D6A7", "both served, not both annotated"),
        ("control_only", _ARM_COLOURS[0], chart_label(f"{comparison.control} only", 30)),
        ("candidate_only", _ARM_COLOURS[1], chart_label(f"{comparison.candidate} only", 30)),
    )
    totals = [sum(getattr(row, name) for name, _, _ in parts) for row in rows]
    high = max(totals, default=0) * 1.05 or 1.0
    chart, panel = _row_panel(
        [chart_label(segment_label(r.segment), 30) for r in rows],
        36.0,
        (0.0, high),
        "queries",
        [Series(label, colour, "bar", [], []) for _, colour, label in parts],
    )
    ys = [float(len(rows) - 1 - index) for index in range(len(rows))]
    starts = [0.0] * len(rows)
    for name, colour, label in parts:
        values = [float(getattr(row, name)) for row in rows]
        panel.hbars(ys, values, 0.8, colour, label, starts)
        starts = [start + value for start, value in zip(starts, values, strict=True)]
    x_ticks = [v for v in nice_ticks(0.0, high) if v == int(v)]
    panel.x_ticks = [(v, f"{int(v):,}") for v in x_ticks]
    return chart


# --- the comparison report -------------------------------------------------------------------


def _cell_rows(comparison: Comparison) -> list[dict[str, object]]:
    return [
        {
            "segment": segment_label(c.segment),
            "metric": c.metric,
            "n": c.n,
            "control": _number(c.control_mean),
            "candidate": _number(c.candidate_mean),
            "delta": _number(c.delta, signed=True),
            "relative": _number(c.relative_delta, signed=True, percent=True),
            "ci": _interval(c),
            "p_t": _pvalue(c.p_t),
            "p_rand": _pvalue(c.p_randomization),
            "p_holm": _pvalue(c.p_randomization_holm),
            "verdict": c.verdict,
            "control_level": _number(c.control_trace_mean),
            "candidate_level": _number(c.candidate_trace_mean),
            "threshold": _number(c.threshold),
            "threshold_status": c.threshold_status.replace("_", " "),
            "ci_method": c.ci_method or MISSING,
            "p_method": c.p_randomization_method or MISSING,
        }
        for c in comparison.cells
    ]


def _interval(cell: CellResult) -> str:
    if cell.ci_low is None or cell.ci_high is None:
        return MISSING
    low, high = _number(cell.ci_low, signed=True), _number(cell.ci_high, signed=True)
    return f"{low} .. {high}"


_CELL_HEADERS = {
    "segment": "segment",
    "metric": "metric",
    "n": "paired queries",
    "control": "control",
    "candidate": "candidate",
    "delta": "delta",
    "relative": "relative",
    "ci": f"{CONFIDENCE_LEVEL:.0%} CI of delta",
    "verdict": "verdict",
    "p_holm": "p Holm (randomization)",
    "p_rand": "p randomization",
    "p_t": "p paired t",
    "control_level": "control (all traces)",
    "candidate_level": "candidate (all traces)",
    "threshold": "threshold",
    "threshold_status": "threshold status",
    "ci_method": "interval method",
    "p_method": "randomization p method",
}
_TEXT_CELLS = {"segment", "metric", "verdict", "ci", "threshold_status", "ci_method", "p_method"}


def _cells_table(comparison: Comparison) -> str:
    head = "".join(
        f'<th class="{"text" if k in _TEXT_CELLS else "num"}">{esc(v)}</th>'
        for k, v in _CELL_HEADERS.items()
    )
    body = []
    for row in _cell_rows(comparison):
        cells = []
        for key in _CELL_HEADERS:
            classes = ["text"] if key in _TEXT_CELLS else []
            if key == "verdict" and row[key] in ("better", "worse"):
                classes.append(str(row[key]))
            if key == "threshold_status" and row[key] == "fail":
                classes.append("worse")
            attr = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{attr}>{esc(row[key])}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _coverage_frame(comparison: Comparison) -> pd.DataFrame:
    frame = comparison.coverage_frame()
    frame["segment"] = [segment_label(s) for s in frame["segment"]]
    for arm in ("control", "candidate"):
        traces = frame[f"{arm}_traces"].astype(float)
        annotated = frame[f"{arm}_annotated_traces"].astype(float)
        frame[f"{arm}_annotation_rate"] = (annotated / traces).where(traces > 0)
    return frame


def _flag_html(comparison: Comparison) -> str:
    if not comparison.flagged:
        return (
            '<div class="ok"><strong>Not flagged.</strong> No threshold newly missed and no '
            "guarded metric significantly worse.</div>"
        )
    items = "".join(f"<li>{esc(reason)}</li>" for reason in comparison.reasons)
    return f'<div class="flag"><strong>Flagged for review.</strong><ul>{items}</ul></div>'


def _method_text(comparison: Comparison) -> str:
    s = comparison.settings
    guarded = ", ".join(s.guarded_metrics) or "none"
    large = s.normal_approximation_min_pairs
    return (
        f"Queries are paired by query_id (a query's traces averaged per arm first); only queries "
        f"both arms served and annotated are tested. Delta = candidate - control; "
        f"{CONFIDENCE_LEVEL:.0%} interval of the mean paired difference: BCa bootstrap "
        f"({s.n_resamples} resamples, seed {s.seed}) below {large} paired queries, Student t "
        f"from {large} on. Randomization p: paired sign-flip test ({s.n_resamples} random sign "
        f"patterns, or every pattern when there are no more) below {large} nonzero differences, "
        f"its normal approximation from {large} on; each cell names the methods it used. "
        f"Verdict: Holm-adjusted paired randomization (sign-flip) p <= {s.alpha:g} over all "
        f"{len(comparison.cells)} segment x metric cells. Guarded metrics: {guarded}. Thresholds "
        f"judge each arm's mean over all its annotated traces, where both arms have at least "
        f"{s.min_annotated_traces} of them."
    )


def comparison_html(
    comparison: Comparison,
    title: str | None = None,
    note: str | None = None,
    extra_sections: Sequence[str] = (),
) -> str:
    """The comparison report as one self-contained HTML page; `note` (plain text, escaped) says
    what was compared (e.g. the window), `extra_sections` (trusted HTML, e.g. `trend_section`)
    follow the coverage."""
    heading = title or f"{comparison.candidate} vs {comparison.control}"
    intro = (
        f"<p>Candidate <strong>{esc(comparison.candidate)}</strong> against control "
        f"<strong>{esc(comparison.control)}</strong>.</p>"
        + (f"<p>{esc(note)}</p>" if note else "")
        + f'<p class="muted">{esc(_method_text(comparison))}</p>'
    )
    coverage = _coverage_frame(comparison)
    sections = [
        intro + _flag_html(comparison),
        "<section><h2>Per segment and metric</h2>" + _cells_table(comparison) + "</section>",
        "<section><h2>Means per segment</h2>"
        + chart_html(
            segment_bars_chart(comparison),
            "control and candidate means per segment",
            f"Each arm's mean over its annotated traces with {CONFIDENCE_LEVEL:.0%} t intervals; "
            "dashed red: the segment's threshold.",
        )
        + "</section>",
        "<section><h2>Differences</h2>"
        + chart_html(
            forest_chart(comparison),
            "candidate minus control per segment and metric",
            f"Candidate minus control with its {CONFIDENCE_LEVEL:.0%} interval (each cell's "
            "interval method is in the table above).",
        )
        + "</section>",
        "<section><h2>Coverage</h2>"
        + chart_html(coverage_chart(comparison), "queries per segment by pairing")
        + render_table(
            coverage,
            headers={c: c.replace("_", " ") for c in coverage.columns},
        )
        + "</section>",
        *extra_sections,
    ]
    return html_page(heading, sections)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(escape_markdown(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(escape_markdown(c) for c in row) + " |" for row in rows]
    return lines


def comparison_markdown(comparison: Comparison, note: str | None = None) -> str:
    """The comparison report in Markdown (trace strings escaped: no HTML, no cell breaks);
    `note` says what was compared, as in `comparison_html`."""
    lines = [
        f"# {escape_markdown(comparison.candidate)} vs {escape_markdown(comparison.control)}",
        "",
        *([escape_markdown(note), ""] if note else []),
        escape_markdown(_method_text(comparison)),
        "",
    ]
    if comparison.flagged:
        lines.append("**Flagged for review:**")
        lines += [f"- {escape_markdown(reason)}" for reason in comparison.reasons]
    else:
        lines.append("Not flagged.")
    lines += ["", "## Per segment and metric", ""]
    rows = _cell_rows(comparison)
    lines += _md_table(list(_CELL_HEADERS.values()), [[r[k] for k in _CELL_HEADERS] for r in rows])
    lines += ["", "## Coverage (queries)", ""]
    lines += _md_table(
        [
            "segment",
            "paired",
            "both served, not paired",
            "control only",
            "candidate only",
            "control traces (annotated)",
            "candidate traces (annotated)",
        ],
        [
            [
                segment_label(c.segment),
                c.paired,
                c.shared_unpaired,
                c.control_only,
                c.candidate_only,
                f"{c.control_traces} ({c.control_annotated_traces})",
                f"{c.candidate_traces} ({c.candidate_annotated_traces})",
            ]
            for c in comparison.coverage
        ],
    )
    return "\n".join(lines) + "\n"


def comparison_json(comparison: Comparison) -> str:
    """The comparison as JSON (strings as they are in the data; undefined numbers null)."""
    return json.dumps(comparison.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def report_format(path: Path) -> str:
    """The report kind of `path` by extension; ValueError for any other."""
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise ValueError(
            f"{path}: unknown report format {suffix or '(none)'}; use {', '.join(REPORT_SUFFIXES)}"
        )
    return suffix


def write_comparison_report(comparison: Comparison, path: Path) -> None:
    """Write the HTML, Markdown or JSON report, chosen by `path`'s extension."""
    suffix = report_format(path)
    renderers: dict[str, Callable[[Comparison], str]] = {
        ".html": comparison_html,
        ".md": comparison_markdown,
        ".json": comparison_json,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(renderers[suffix](comparison), encoding="utf-8")


def notice_html(title: str, lines: Sequence[str]) -> str:
    """A page that says one thing in words (e.g. that no comparison was possible); escaped."""
    body = "".join(f"<p>{esc(line)}</p>" for line in lines)
    return html_page(title, [f'<div class="flag">{body}</div>'])


def notice_markdown(title: str, lines: Sequence[str]) -> str:
    """`notice_html` in Markdown."""
    return "\n\n".join([f"# {escape_markdown(title)}", *map(escape_markdown, lines)]) + "\n"


# --- the nightly regression report -----------------------------------------------------------


def _float(value: object) -> float | None:
    """A finite number, or None (None, NaN, pd.NA, text)."""
    if value is None or isinstance(value, bool) or value is pd.NA:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# matplotlib's tab10, the variants' colours in the regression report and the trend
_TAB10 = (
    "#1F77B4",
    "#FF7F0E",
    "#2CA02C",
    "#D62728",
    "#9467BD",
    "#8C564B",
    "#E377C2",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
)


def variant_colours(variants: Iterable[str]) -> dict[str, str]:
    """Each variant's colour: tab10 in sorted order, as `trend_chart` draws them."""
    return {name: _TAB10[index % 10] for index, name in enumerate(sorted(variants))}


def _records_by_key(rows: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (str(r["segment"]), str(r["variant"]), str(r["metric"])): r
        for r in rows.to_dict(orient="records")
    }


def regression_bars_chart(rows: pd.DataFrame, metrics: Sequence[str]) -> Chart | None:
    """One panel per metric: each segment's mean per variant (the day's `regression_report`
    rows) with its 95% interval, the segment's threshold as a red dashed line, failing bars
    hatched and outlined red. None when no row holds one of `metrics`."""
    data = rows[rows["metric"].isin(list(metrics))]
    if data.empty:
        return None
    chosen = [m for m in metrics if (data["metric"] == m).any()]
    segments = _segment_order(data["segment"])
    variants = sorted(str(v) for v in pd.unique(data["variant"]))
    colours = variant_colours(variants)
    by_key = _records_by_key(data)
    width = 0.8 / len(variants)
    legend = [Series(chart_label(v, 24), colours[v], "bar", [], []) for v in variants]
    chart, panels = _bar_panels(chosen, segments, len(variants), legend)
    for panel, metric in zip(panels, chosen, strict=True):
        for arm, variant in enumerate(variants):
            bars: list[tuple[float, float, float | None, float | None]] = []
            failing: list[bool] = []
            for index, segment in enumerate(segments):
                record = by_key.get((segment, variant, metric))
                mean = _float(record.get("mean")) if record is not None else None
                if record is None or mean is None:
                    continue
                x = index + (arm - (len(variants) - 1) / 2) * width
                bars.append((x, mean, _float(record.get("ci_low")), _float(record.get("ci_high"))))
                failing.append(record.get("status") == "fail")
            panel.bars(
                [b[0] for b in bars],
                [b[1] for b in bars],
                width * 0.95,
                colours[variant],
                chart_label(variant, 24),
                failing,
            )
            panel.whiskers(_intervals((x, low, high) for x, _, low, high in bars))
        # a segment's threshold: the first of its variants' rows that names one
        for index, segment in enumerate(segments):
            found = (by_key.get((segment, variant, metric)) for variant in variants)
            values = (_float(r.get("threshold")) for r in found if r is not None)
            limit = next((v for v in values if v is not None), None)
            if limit is not None:
                panel.hline(limit, index - 0.45, index + 0.45)
    return chart


def _coverage_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per segment and variant (overall last): traces, annotated traces, coverage."""
    columns = ["segment", "variant", "traces", "annotated_traces", "coverage"]
    groups = rows.drop_duplicates(["segment", "variant"])[columns]
    order = {name: i for i, name in enumerate(_segment_order(groups["segment"]))}
    keyed = groups.assign(_order=[order[str(s)] for s in groups["segment"]])
    return keyed.sort_values(["_order", "variant"]).drop(columns="_order").reset_index(drop=True)


def regression_coverage_chart(rows: pd.DataFrame, min_coverage: float | None = None) -> Chart:
    """Annotation coverage per segment and variant, with the configured minimum dashed."""
    coverage = _coverage_rows(rows)
    segments = _segment_order(coverage["segment"])
    variants = sorted(str(v) for v in pd.unique(coverage["variant"]))
    colours = variant_colours(variants)
    by_key = {(str(r["segment"]), str(r["variant"])): r for r in coverage.to_dict("records")}
    chart, panel = _row_panel(
        [chart_label(segment_label(s), 30) for s in segments],
        26.0 * max(len(variants), 1),
        (0.0, 1.0),
        "share of traces annotated",
        [Series(chart_label(v, 24), colours[v], "bar", [], []) for v in variants],
    )
    bar = 0.8 / max(len(variants), 1)
    for arm, variant in enumerate(variants):
        offset = ((len(variants) - 1) / 2 - arm) * bar
        bars = [
            (len(segments) - 1 - index + offset, value)
            for index, segment in enumerate(segments)
            if (record := by_key.get((segment, variant)))
            and (value := _float(record.get("coverage"))) is not None
        ]
        label = chart_label(variant, 24)
        panel.hbars([y for y, _ in bars], [v for _, v in bars], bar * 0.95, colours[variant], label)
    if min_coverage is not None:
        panel.vline(min_coverage)
    panel.x_ticks = _SHARE_TICKS
    return chart


def _misses_html(rows: pd.DataFrame, words: Sequence[str]) -> str:
    short = rows[rows["status"] == "insufficient"].drop_duplicates(["segment", "variant"])
    insufficient = [
        f"{segment_label(str(r['segment']))} / {r['variant']} ({int(r['annotated_traces'])} "
        f"annotated < {int(r['min_annotated'])})"
        for r in short.to_dict(orient="records")
    ]
    note = (
        f'<p class="muted">Not enough annotated traces for a verdict: '
        f"{esc('; '.join(insufficient))}.</p>"
        if insufficient
        else ""
    )
    if not words:
        return f'<div class="ok"><strong>No threshold misses.</strong></div>{note}'
    count = len(words)
    items = "".join(f"<li>{esc(text)}</li>" for text in words)
    noun = "miss" if count == 1 else "misses"
    heading = f"<strong>{count} threshold {noun}:</strong>"
    return f'<div class="flag">{heading}<ul>{items}</ul></div>{note}'


def _regression_table(rows: pd.DataFrame) -> pd.DataFrame:
    def interval(record: Mapping[str, Any]) -> str:
        low, high = _float(record.get("ci_low")), _float(record.get("ci_high"))
        return MISSING if low is None or high is None else f"{_number(low)} .. {_number(high)}"

    records = rows.to_dict(orient="records")
    return pd.DataFrame(
        {
            "segment": [segment_label(str(r["segment"])) for r in records],
            "variant": [str(r["variant"]) for r in records],
            "metric": [str(r["metric"]) for r in records],
            "value": [_float(r.get("mean")) for r in records],
            "ci": [interval(r) for r in records],
            "baseline": [_float(r.get("baseline")) for r in records],
            "delta": [_number(r.get("delta"), signed=True) for r in records],
            "threshold": [_float(r.get("threshold")) for r in records],
            "status": [str(r["status"]).replace("_", " ") for r in records],
            "margin": [_number(r.get("margin"), signed=True) for r in records],
            "annotated": [f"{int(r['annotated_traces'])} / {int(r['traces'])}" for r in records],
        },
    ).astype({"value": float, "baseline": float, "threshold": float})


_REGRESSION_HEADERS = {
    "ci": f"{CONFIDENCE_LEVEL:.0%} CI",
    "annotated": "annotated / traces",
}


def regression_html(
    report: RegressionReport,
    trend: pd.DataFrame | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    min_coverage: float | None = None,
    last_n: int = 30,
) -> str:
    """The nightly regression report of one partition as a self-contained HTML page: the misses
    in words, per-segment bars of each headline metric with 95% intervals against the threshold
    lines, the trend of each headline metric per segment over the last `last_n` partitions,
    the annotation coverage per segment, and the full table.

    `trend`: `segment_metrics` rows of recent partitions (see `trend.read_segment_trend`);
    `thresholds` as in `ComparisonSettings` (`trend.config_thresholds(config)`), for the trend's
    threshold lines; `min_coverage`, the coverage check's minimum, drawn on the coverage chart."""
    day = report.partition.isoformat()
    rows = report.rows
    metrics = list(report.headline_metrics) or (
        [str(m) for m in pd.unique(rows["metric"])] if report.has_data else []
    )
    sections: list[str] = []
    if report.has_data:
        sections.append(
            f"<p>Baseline: {esc(report.baseline_text)}, {report.baseline_days_with_data()} "
            "day(s) with data.</p>" + _misses_html(rows, [m.words() for m in report.misses])
        )
        bars = regression_bars_chart(rows, metrics)
        if bars is not None:
            sections.append(
                "<section><h2>Headline metrics per segment</h2>"
                + chart_html(
                    bars,
                    "headline metrics per segment and variant",
                    f"Each variant's mean over the day's annotated traces with its "
                    f"{CONFIDENCE_LEVEL:.0%} interval; dashed red: the segment's threshold; "
                    "hatched, outlined red: below it.",
                )
                + "</section>"
            )
    else:
        sections.append(
            '<div class="flag"><strong>No data:</strong> no traces in this partition.</div>'
        )
    if trend is not None:
        sections.append(
            trend_section(
                trend,
                metrics=metrics or None,
                last_n=last_n,
                thresholds=thresholds,
                value_column="mean",
                title="Trend of the headline metrics",
            )
        )
    if report.has_data:
        coverage = _coverage_rows(rows)
        minimum = f" (minimum {min_coverage:.0%}, dashed)" if min_coverage is not None else ""
        sections.append(
            f"<section><h2>Annotation coverage{esc(minimum)}</h2>"
            + chart_html(
                regression_coverage_chart(rows, min_coverage),
                "annotation coverage per segment and variant",
            )
            + render_table(
                coverage.assign(segment=[segment_label(str(s)) for s in coverage["segment"]]),
                headers={"annotated_traces": "annotated traces"},
            )
            + "</section>"
        )
        sections.append(
            "<section><h2>Every segment, variant and metric</h2>"
            + render_table(_regression_table(rows), headers=_REGRESSION_HEADERS)
            + "</section>"
        )
    return html_page(f"Retrieval regression report: {day}", sections)
