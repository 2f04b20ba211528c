"""The trend of each headline metric per segment over the last partitions: small multiples, one
row per segment and one column per metric, each variant a line, the threshold dashed.

Drawn for the regression report (every variant) and the comparison report (its two arms) from
`segment_metrics` rows (`warehouse.trend.read_segment_trend`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, timedelta

import pandas as pd

from retrieval_pipeline.ab.compare import threshold_for
from retrieval_pipeline.reports.charts import segment_order, variant_colours
from retrieval_pipeline.reports.html import chart_html, esc
from retrieval_pipeline.reports.svg import Chart, Series, nice_ticks, padded_range, tick_label
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import printable

# The partitions a trend shows: the last 30 that hold rows.
TREND_PARTITIONS = 30
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
    last_n: int = TREND_PARTITIONS,
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
    segments = segment_order(data["segment"])
    variants = sorted(str(v) for v in pd.unique(data["variant"]))
    palette = {**variant_colours(variants), **(colours or {})}
    ticks, tick_labels, limits = _day_ticks(days[0], days[-1])
    column_width = _TREND_LEFT + _TREND_PANEL_WIDTH
    chart = Chart(column_width * len(chosen) + _TREND_RIGHT, 0.0)
    legend = [Series(printable(v, 24), palette[v], "line", [], []) for v in variants]
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
                    printable(variant, 24),
                )
            if limit is not None:
                panel.hline(limit)
            panel.title = printable(f"{segment_label(segment)} · {metric}", 52)
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
    last_n: int = TREND_PARTITIONS,
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
