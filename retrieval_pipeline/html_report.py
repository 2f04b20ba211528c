"""Reports for eyes and for programs: self-contained HTML, Markdown and JSON.

Pure: a `comparison.Comparison` (or a DataFrame) in, text out; no DuckDB, no Dagster.

- `comparison_html`, `comparison_markdown`, `comparison_json`: the A/B comparison report
  (`write_comparison_report` picks one by the file's extension).
- `trend_section`, `render_table` and `html_page`: the pieces the regression report reuses (the
  trend of each headline metric per segment over the last N partitions, a table, the page).

Charts are drawn with matplotlib's object API (a `Figure`, no pyplot and no global backend: Agg
for raster, the SVG backend here), saved as SVG and embedded as base64 `data:` images: the page
needs no network, an image cannot run a script, and chart text never reaches the HTML parser.
Every string that comes from trace data (segment, variant, ids, metric names) is escaped with
`html.escape` in HTML and `report.escape_markdown` in Markdown; in charts it is stripped of
mathtext `$` and control characters and shortened. A Content-Security-Policy tag forbids scripts
and every network fetch as a second line of defence.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from retrieval_pipeline.comparison import (
    CONFIDENCE_LEVEL,
    CellResult,
    Comparison,
    threshold_for,
)
from retrieval_pipeline.nightly import OVERALL_SEGMENT
from retrieval_pipeline.report import escape_markdown, segment_label

MISSING = "-"
REPORT_SUFFIXES = (".html", ".md", ".json")
_RC: dict[Any, Any] = {"svg.fonttype": "path", "svg.hashsalt": "retrieval-pipeline", "font.size": 9}
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
    """`text` as plain chart text: no mathtext, no control characters, at most `width` chars."""
    value = "".join(
        " " if unicodedata.category(ch).startswith("C") else ch for ch in str(text)
    ).strip()
    if len(value) > width:
        value = value[: width - 1] + "\u2026"
    # an escaped dollar is drawn as a dollar, never as the start of mathtext
    return value.replace("$", r"\$")


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


def figure_data_uri(figure: Figure) -> str:
    """`figure` as an SVG `data:` URI (reproducible bytes: no date, fixed ids)."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(_RC):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def figure_html(figure: Figure, alt: str, caption: str | None = None) -> str:
    """An embedded chart with its (escaped) alternative text and caption."""
    image = f'<img alt="{esc(alt)}" src="{figure_data_uri(figure)}">'
    text = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{image}{text}</figure>"


def _new_figure(width: float, height: float) -> Figure:
    with matplotlib.rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


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


def trend_figure(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    last_n: int = 30,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    value_column: str = "value",
) -> Figure | None:
    """Small multiples, one row per segment and one column per metric: each variant's value over
    the last `last_n` partitions present, with the threshold as a dashed line. None when empty.

    `frame`: partition_date, segment, variant, metric and `value_column` (e.g. the pipeline's
    `segment_metrics` with `value_column="mean"`); `thresholds` as in `ComparisonSettings`."""
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
    palette = matplotlib.colormaps["tab10"]
    figure = _new_figure(3.8 * len(chosen) + 0.8, 1.9 * len(segments) + 0.8)
    axes = figure.subplots(len(segments), len(chosen), squeeze=False, sharex=True)
    for row, segment in enumerate(segments):
        for col, metric in enumerate(chosen):
            ax = axes[row][col]
            cell = data[(data["segment"].astype(str) == segment) & (data["metric"] == metric)]
            for index, variant in enumerate(variants):
                line = cell[cell["variant"].astype(str) == variant].sort_values("partition_date")
                if line.empty:
                    continue
                ax.plot(
                    list(line["partition_date"]),
                    line[value_column].astype(float).to_numpy(),
                    marker="o",
                    markersize=3,
                    linewidth=1.3,
                    color=palette(index % 10),
                    label=chart_label(variant, 24),
                )
            limit = threshold_for(thresholds or {}, segment, metric)
            if limit is not None:
                ax.axhline(limit, color="#C62828", linestyle="--", linewidth=1)
            ax.set_title(chart_label(f"{segment_label(segment)} · {metric}", 60), fontsize=9)
            ax.grid(True, alpha=0.3)
            locator = AutoDateLocator(maxticks=6)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside upper center", ncols=min(len(labels), 6))
    return figure


def trend_section(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    last_n: int = 30,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    value_column: str = "value",
    title: str = "Trend",
) -> str:
    """An HTML section with `trend_figure` (or a note that there is nothing to draw)."""
    figure = trend_figure(frame, metrics, last_n, thresholds, value_column)
    heading = f"<h2>{esc(title)}</h2>"
    if figure is None:
        return f'<section>{heading}<p class="muted">No partitions to show.</p></section>'
    caption = f"Each metric per segment and variant over the last {last_n} partitions present; "
    caption += "dashed: the threshold."
    return f"<section>{heading}{figure_html(figure, title, caption)}</section>"


# --- the comparison charts -------------------------------------------------------------------


def _err(mean: float | None, low: float | None, high: float | None) -> tuple[float, float] | None:
    if mean is None or low is None or high is None:
        return None
    return max(mean - low, 0.0), max(high - mean, 0.0)


def segment_bars_figure(comparison: Comparison) -> Figure:
    """Per metric, each segment's control and candidate means over their annotated traces (what
    thresholds judge) with 95% t intervals, and the segment's threshold as a red dashed line."""
    metrics, segments = comparison.metrics, comparison.segments
    figure = _new_figure(max(6.0, 1.1 * len(segments) + 2), 2.4 * len(metrics) + 0.6)
    axes = figure.subplots(len(metrics), 1, squeeze=False, sharex=True)
    width = 0.38
    names = (comparison.control, comparison.candidate)
    for row, metric in enumerate(metrics):
        ax = axes[row][0]
        for index, segment in enumerate(segments):
            cell = comparison.cell(segment, metric)
            arms = (
                (cell.control_trace_mean, cell.control_trace_ci_low, cell.control_trace_ci_high),
                (
                    cell.candidate_trace_mean,
                    cell.candidate_trace_ci_low,
                    cell.candidate_trace_ci_high,
                ),
            )
            for arm, (mean, low, high) in enumerate(arms):
                x = index + (arm - 0.5) * width
                if mean is None:
                    continue
                ax.bar(
                    x,
                    mean,
                    width,
                    color=_ARM_COLOURS[arm],
                    label=chart_label(names[arm], 24),
                )
                err = _err(mean, low, high)
                if err is not None:
                    ax.errorbar(x, mean, yerr=[[err[0]], [err[1]]], color="#212121", capsize=3)
            if cell.control_trace_mean is None and cell.candidate_trace_mean is None:
                ax.text(index, 0.05, "no data", ha="center", fontsize=8, color="#757575")
            if cell.threshold is not None:
                ax.hlines(
                    cell.threshold,
                    index - 2 * width * 0.6,
                    index + 2 * width * 0.6,
                    colors="#C62828",
                    linestyles="--",
                    linewidth=1.2,
                )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(chart_label(metric, 20))
        ax.grid(True, axis="y", alpha=0.3)
    bottom = axes[-1][0]
    bottom.set_xticks(range(len(segments)))
    bottom.set_xticklabels([chart_label(segment_label(s), 18) for s in segments], rotation=20)
    unique: dict[str, Artist] = {}
    for ax_row in axes:
        handles, labels = ax_row[0].get_legend_handles_labels()
        unique.update(zip(labels, handles, strict=True))
    if unique:
        figure.legend(
            list(unique.values()), list(unique.keys()), loc="outside upper center", ncols=2
        )
    return figure


def forest_figure(comparison: Comparison) -> Figure:
    """Candidate minus control for every tested cell, with its bootstrap interval; coloured by
    verdict."""
    cells = [c for c in comparison.cells if c.delta is not None]
    figure = _new_figure(7.0, 0.26 * max(len(cells), 1) + 1.2)
    ax = figure.subplots()
    ax.axvline(0.0, color="#212121", linewidth=1)
    for y, cell in enumerate(reversed(cells)):
        assert cell.delta is not None
        colour = _VERDICT_COLOURS[cell.verdict]
        err = _err(cell.delta, cell.ci_low, cell.ci_high)
        if err is not None:
            ax.errorbar(
                cell.delta,
                y,
                xerr=[[err[0]], [err[1]]],
                fmt="o",
                color=colour,
                markersize=4,
                capsize=2,
            )
        else:
            ax.plot(cell.delta, y, "o", color=colour, markersize=4)
    ax.set_yticks(range(len(cells)))
    ax.set_yticklabels(
        [chart_label(f"{segment_label(c.segment)} · {c.metric}", 44) for c in reversed(cells)]
    )
    ax.set_xlabel(chart_label(f"{comparison.candidate} minus {comparison.control}", 60))
    ax.grid(True, axis="x", alpha=0.3)
    for verdict, colour in _VERDICT_COLOURS.items():
        if any(c.verdict == verdict for c in cells):
            ax.plot([], [], "o", color=colour, label=verdict)
    if cells:
        figure.legend(loc="outside lower center", ncols=4, fontsize=8)
    return figure


def coverage_figure(comparison: Comparison) -> Figure:
    """Queries per segment: paired, served by both but not paired, by one arm only."""
    rows = list(comparison.coverage)
    figure = _new_figure(7.0, 0.4 * len(rows) + 1.2)
    ax = figure.subplots()
    parts = (
        ("paired", "#2E7D32"),
        ("shared_unpaired", "#A5D6A7"),
        ("control_only", _ARM_COLOURS[0]),
        ("candidate_only", _ARM_COLOURS[1]),
    )
    labels = {
        "paired": "paired (tested)",
        "shared_unpaired": "both served, not both annotated",
        "control_only": chart_label(f"{comparison.control} only", 30),
        "candidate_only": chart_label(f"{comparison.candidate} only", 30),
    }
    left = np.zeros(len(rows))
    ys = np.arange(len(rows))[::-1]
    for name, colour in parts:
        values = np.array([getattr(row, name) for row in rows], dtype=float)
        ax.barh(ys, values, left=left, color=colour, label=labels[name])
        left += values
    ax.set_yticks(ys)
    ax.set_yticklabels([chart_label(segment_label(r.segment), 30) for r in rows])
    ax.set_xlabel("queries")
    figure.legend(loc="outside lower center", ncols=4, fontsize=8)
    return figure


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
}
_TEXT_CELLS = {"segment", "metric", "verdict", "ci", "threshold_status"}


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
    return (
        f"Queries are paired by query_id (a query's traces averaged per arm first); only queries "
        f"both arms served and annotated are tested. Delta = candidate - control; "
        f"{CONFIDENCE_LEVEL:.0%} interval: BCa bootstrap of the mean paired difference "
        f"({s.n_resamples} resamples, seed {s.seed}). Verdict: Holm-adjusted paired "
        f"randomization (sign-flip) p <= {s.alpha:g} over all {len(comparison.cells)} "
        f"segment x metric cells. Guarded metrics: {guarded}. Thresholds judge each arm's mean "
        f"over all its annotated traces, where both arms have at least "
        f"{s.min_annotated_traces} of them."
    )


def comparison_html(comparison: Comparison, title: str | None = None) -> str:
    """The comparison report as one self-contained HTML page."""
    heading = title or f"{comparison.candidate} vs {comparison.control}"
    intro = (
        f"<p>Candidate <strong>{esc(comparison.candidate)}</strong> against control "
        f"<strong>{esc(comparison.control)}</strong>.</p>"
        f'<p class="muted">{esc(_method_text(comparison))}</p>'
    )
    coverage = _coverage_frame(comparison)
    sections = [
        intro + _flag_html(comparison),
        "<section><h2>Per segment and metric</h2>" + _cells_table(comparison) + "</section>",
        "<section><h2>Means per segment</h2>"
        + figure_html(
            segment_bars_figure(comparison),
            "control and candidate means per segment",
            f"Each arm's mean over its annotated traces with {CONFIDENCE_LEVEL:.0%} t intervals; "
            "dashed red: the segment's threshold.",
        )
        + "</section>",
        "<section><h2>Differences</h2>"
        + figure_html(
            forest_figure(comparison),
            "candidate minus control per segment and metric",
            f"Candidate minus control with the {CONFIDENCE_LEVEL:.0%} bootstrap interval.",
        )
        + "</section>",
        "<section><h2>Coverage</h2>"
        + figure_html(coverage_figure(comparison), "queries per segment by pairing")
        + render_table(
            coverage,
            headers={c: c.replace("_", " ") for c in coverage.columns},
        )
        + "</section>",
    ]
    return html_page(heading, sections)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(escape_markdown(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(escape_markdown(c) for c in row) + " |" for row in rows]
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison report in Markdown (trace strings escaped: no HTML, no cell breaks)."""
    lines = [
        f"# {escape_markdown(comparison.candidate)} vs {escape_markdown(comparison.control)}",
        "",
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
    renderers = {".html": comparison_html, ".md": comparison_markdown, ".json": comparison_json}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(renderers[suffix](comparison), encoding="utf-8")
