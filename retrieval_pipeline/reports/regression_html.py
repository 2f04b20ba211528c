"""The nightly regression report of one partition as a self-contained HTML page: the misses in
words, bars of each headline metric per segment against the thresholds, the trend over the last
30 partitions, the annotation coverage, and the full table.

Pure: a `RegressionReport` and the trend's rows in, a page out; the caller reads the trend from
the warehouse (`warehouse.trend.read_segment_trend`) and hands it over. The page is written whole
(`files.write_text_atomically`), beside the Markdown and JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from retrieval_pipeline.ab.compare import config_thresholds
from retrieval_pipeline.ab.stats import CONFIDENCE_LEVEL
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.files import write_text_atomically
from retrieval_pipeline.reports import judged
from retrieval_pipeline.reports.charts import (
    SHARE_TICKS,
    bar_panels,
    intervals,
    row_panel,
    segment_order,
    variant_colours,
)
from retrieval_pipeline.reports.html import chart_html, esc, html_page, render_table
from retrieval_pipeline.reports.regression import RegressionReport, Watch, watch_heading
from retrieval_pipeline.reports.stage_why import StageWhy
from retrieval_pipeline.reports.stages import NO_RERANKER
from retrieval_pipeline.reports.svg import Chart, Series
from retrieval_pipeline.reports.trend_chart import TREND_PARTITIONS, trend_section
from retrieval_pipeline.reports.why_html import why_html
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import MISSING, finite, number, printable


def _records_by_key(rows: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (str(r["segment"]), str(r["variant"]), str(r["metric"])): r
        for r in rows.to_dict(orient="records")
    }


def regression_bars_chart(
    rows: pd.DataFrame, metrics: Sequence[str], leading: Sequence[str] = ()
) -> Chart | None:
    """One panel per metric: each segment's mean per variant (the day's `regression_report`
    rows) with its 95% interval, the segment's threshold as a red dashed line, failing bars
    hatched and outlined red. None when no row holds one of `metrics`. `leading`: the variants
    that take the first colours (`charts.variant_colours`)."""
    data = rows[rows["metric"].isin(list(metrics))]
    if data.empty:
        return None
    chosen = [m for m in metrics if (data["metric"] == m).any()]
    segments = segment_order(data["segment"])
    variants = sorted(str(v) for v in pd.unique(data["variant"]))
    colours = variant_colours(variants, leading)
    by_key = _records_by_key(data)
    width = 0.8 / len(variants)
    legend = [Series(printable(v, 24), colours[v], "bar", [], []) for v in variants]
    chart, panels = bar_panels(chosen, segments, len(variants), legend)
    for panel, metric in zip(panels, chosen, strict=True):
        for arm, variant in enumerate(variants):
            bars: list[tuple[float, float, float | None, float | None]] = []
            failing: list[bool] = []
            for index, segment in enumerate(segments):
                record = by_key.get((segment, variant, metric))
                mean = finite(record.get("mean")) if record is not None else None
                if record is None or mean is None:
                    continue
                x = index + (arm - (len(variants) - 1) / 2) * width
                bars.append((x, mean, finite(record.get("ci_low")), finite(record.get("ci_high"))))
                failing.append(record.get("status") == "fail")
            panel.bars(
                [b[0] for b in bars],
                [b[1] for b in bars],
                width * 0.95,
                colours[variant],
                printable(variant, 24),
                failing,
            )
            panel.whiskers(intervals((x, low, high) for x, _, low, high in bars))
        # a segment's threshold: the first of its variants' rows that names one
        for index, segment in enumerate(segments):
            found = (by_key.get((segment, variant, metric)) for variant in variants)
            values = (finite(r.get("threshold")) for r in found if r is not None)
            limit = next((v for v in values if v is not None), None)
            if limit is not None:
                panel.hline(limit, index - 0.45, index + 0.45)
    return chart


def _coverage_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per segment and variant (overall last): traces, annotated traces, coverage."""
    columns = ["segment", "variant", "traces", "annotated_traces", "coverage"]
    groups = rows.drop_duplicates(["segment", "variant"])[columns]
    order = {name: i for i, name in enumerate(segment_order(groups["segment"]))}
    keyed = groups.assign(_order=[order[str(s)] for s in groups["segment"]])
    return keyed.sort_values(["_order", "variant"]).drop(columns="_order").reset_index(drop=True)


def regression_coverage_chart(
    rows: pd.DataFrame, min_coverage: float | None = None, leading: Sequence[str] = ()
) -> Chart:
    """Annotation coverage per segment and variant, with the configured minimum dashed."""
    coverage = _coverage_rows(rows)
    segments = segment_order(coverage["segment"])
    variants = sorted(str(v) for v in pd.unique(coverage["variant"]))
    colours = variant_colours(variants, leading)
    by_key = {(str(r["segment"]), str(r["variant"])): r for r in coverage.to_dict("records")}
    chart, panel = row_panel(
        [printable(segment_label(s), 30) for s in segments],
        26.0 * max(len(variants), 1),
        (0.0, 1.0),
        "share of traces annotated",
        [Series(printable(v, 24), colours[v], "bar", [], []) for v in variants],
    )
    bar = 0.8 / max(len(variants), 1)
    for arm, variant in enumerate(variants):
        offset = ((len(variants) - 1) / 2 - arm) * bar
        bars = [
            (len(segments) - 1 - index + offset, value)
            for index, segment in enumerate(segments)
            if (record := by_key.get((segment, variant)))
            and (value := finite(record.get("coverage"))) is not None
        ]
        label = printable(variant, 24)
        panel.hbars([y for y, _ in bars], [v for _, v in bars], bar * 0.95, colours[variant], label)
    if min_coverage is not None:
        panel.vline(min_coverage)
    panel.x_ticks = SHARE_TICKS
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


def _judged_warnings_html(warnings: Sequence[str]) -> str:
    """The judged-share warnings (`reports.judged`) as a flagged list; nothing without any."""
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(text)}.</li>" for text in warnings)
    return f'<div class="flag"><strong>Judged share:</strong><ul>{items}</ul></div>'


def _regression_table(rows: pd.DataFrame) -> pd.DataFrame:
    def interval(record: Mapping[str, Any]) -> str:
        low, high = finite(record.get("ci_low")), finite(record.get("ci_high"))
        return MISSING if low is None or high is None else f"{number(low)} .. {number(high)}"

    records = rows.to_dict(orient="records")
    return pd.DataFrame(
        {
            "segment": [segment_label(str(r["segment"])) for r in records],
            "variant": [str(r["variant"]) for r in records],
            "metric": [str(r["metric"]) for r in records],
            "value": [finite(r.get("mean")) for r in records],
            "ci": [interval(r) for r in records],
            "baseline": [finite(r.get("baseline")) for r in records],
            "delta": [number(r.get("delta"), signed=True) for r in records],
            "threshold": [finite(r.get("threshold")) for r in records],
            "status": [str(r["status"]).replace("_", " ") for r in records],
            "margin": [number(r.get("margin"), signed=True) for r in records],
            "annotated": [f"{int(r['annotated_traces'])} / {int(r['traces'])}" for r in records],
        },
    ).astype({"value": float, "baseline": float, "threshold": float})


def _row_classes(rows: pd.DataFrame, watch: Sequence[Watch]) -> list[str]:
    """`worse` for a failing row, `watch` for a significant drop that passes, else none."""
    watched = {(w.segment, w.variant, w.metric) for w in watch}
    return [
        "worse"
        if r["status"] == "fail"
        else "watch"
        if (str(r["segment"]), str(r["variant"]), str(r["metric"])) in watched
        else ""
        for r in rows.to_dict(orient="records")
    ]


_REGRESSION_HEADERS = {
    "ci": f"{CONFIDENCE_LEVEL:.0%} CI",
    "delta": "change from baseline",
    "margin": "value - threshold",
    "annotated": "annotated / traces",
}


def regression_html(
    report: RegressionReport,
    trend: pd.DataFrame | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    min_coverage: float | None = None,
    last_n: int = TREND_PARTITIONS,
    leading: Sequence[str] = (),
) -> str:
    """The nightly regression report of one partition as a self-contained HTML page: the misses
    in words, per-segment bars of each headline metric with 95% intervals against the threshold
    lines, the trend of each headline metric per segment over the last `last_n` partitions,
    the annotation coverage per segment, and the full table.

    `trend`: `segment_metrics` rows of recent partitions (`warehouse.trend.read_segment_trend`);
    `thresholds` as in `ComparisonSettings` (`ab.compare.config_thresholds(config)`), for the
    trend's threshold lines; `min_coverage`, the coverage check's minimum, drawn on the coverage
    chart; `leading`, the variants that take the first colours (the comparison's control and
    candidate, so that each variant has one colour in every report)."""
    day = report.partition.isoformat()
    rows = report.rows
    metrics = list(report.headline_metrics) or (
        [str(m) for m in pd.unique(rows["metric"])] if report.has_data else []
    )
    sections: list[str] = []
    if report.has_data:
        sections.append(
            f"<p>{esc(report.window_and_test())}</p>"
            + _misses_html(rows, [m.words() for m in report.misses])
        )
        watch = report.watch()
        if watch:
            items = "".join(f"<li>{esc(w.words())}</li>" for w in watch)
            sections.append(
                f'<div class="watch"><strong>Watch: {esc(watch_heading(len(watch)))}:</strong>'
                f"<ul>{items}</ul></div>"
            )
        bars = regression_bars_chart(rows, metrics, leading)
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
                colours=variant_colours(pd.unique(trend["variant"]), leading)
                if "variant" in trend
                else None,
            )
        )
    if report.has_data:
        coverage = _coverage_rows(rows)
        headers = {"annotated_traces": "annotated traces"}
        judged_note = ""
        if report.coverage_metric is not None:
            shares = judged.judged_shares(rows, report.coverage_metric)
            coverage[report.coverage_metric] = pd.Series(
                [
                    shares.get((str(r["segment"]), str(r["variant"])))
                    for r in coverage.to_dict(orient="records")
                ],
                dtype="float64",
            )
            headers[report.coverage_metric] = f"judged share of top ({report.coverage_metric})"
            judged_note = _judged_warnings_html(report.judged_warnings())
        sources = report.label_sources_text()
        if sources:
            judged_note += f"<p>{esc(sources)}</p>"
        agreement = report.agreement_text()
        if agreement:
            judged_note += f"<p>{esc(agreement)}</p>"
        minimum = f" (minimum {min_coverage:.0%}, dashed)" if min_coverage is not None else ""
        sections.append(
            f"<section><h2>Annotation coverage{esc(minimum)}</h2>"
            + judged_note
            + chart_html(
                regression_coverage_chart(rows, min_coverage, leading),
                "annotation coverage per segment and variant",
            )
            + render_table(
                coverage.assign(segment=[segment_label(str(s)) for s in coverage["segment"]]),
                headers=headers,
            )
            + "</section>"
        )
        sections.append(
            "<section><h2>Every segment, variant and metric</h2>"
            + render_table(
                _regression_table(rows),
                headers=_REGRESSION_HEADERS,
                row_classes=_row_classes(rows, report.watch()),
            )
            + "</section>"
        )
        if report.stages is not None:
            sections.append(_stages_html(*report.stages, why=report.stage_why))
        sections += filter(None, [why_html(report.why)])
    return html_page(f"Retrieval regression report: {day}", sections)


def _stages_html(means: pd.DataFrame, gains: pd.DataFrame, why: Sequence[StageWhy] = ()) -> str:
    """The reranker's gain over its input per segment, or that the day has no reranker stage;
    then why each reranker finding moved (first stage against reranking), in its lines."""
    if means.empty:
        return f"<section><h2>Reranker stage</h2><p>{esc(NO_RERANKER)}.</p></section>"
    table = pd.DataFrame(
        {
            "segment": [segment_label(str(s)) for s in gains["segment"]],
            "metric": gains["metric"],
            "pairs": gains["pairs"],
            "input": [number(v, 4) for v in gains["input_mean"]],
            "output": [number(v, 4) for v in gains["output_mean"]],
            "gain": [number(v, 4, signed=True) for v in gains["gain"]],
            "95% CI": [
                f"{number(lo, 4, signed=True)}..{number(hi, 4, signed=True)}"
                for lo, hi in zip(gains["ci_low"], gains["ci_high"], strict=True)
            ],
        }
    )
    return (
        "<section><h2>Reranker stage</h2><p>The reranker's output against its input, each "
        "scored against the retriever's labels; gain = output - input, paired per reranker "
        "span.</p>"
        + render_table(table)
        + "".join(
            f"<h3>{esc('Why: ' + w.title())}</h3><ul>"
            + "".join(f"<li>{esc(line)}</li>" for line in w.lines())
            + "</ul>"
            for w in why
        )
        + "</section>"
    )


def trend_metrics(day_report: RegressionReport, config: PipelineConfig) -> list[str]:
    """The metrics the page's trend draws: the report's headline metrics, else the config's."""
    return list(day_report.headline_metrics) or list(config.headline_metrics)


def regression_page(
    day_report: RegressionReport,
    trend: pd.DataFrame,
    config: PipelineConfig,
    last_n: int = TREND_PARTITIONS,
) -> str:
    """The self-contained HTML regression report of `day_report`, with the trend of `trend`: the
    warehouse's `segment_metrics` rows of `trend_metrics` over the last `last_n` partitions."""
    return regression_html(
        day_report,
        trend=trend,
        thresholds=config_thresholds(config),
        min_coverage=config.checks.min_coverage,
        last_n=last_n,
        leading=(config.comparison.control, config.comparison.candidate),
    )


def write_regression_html(
    day_report: RegressionReport, trend: pd.DataFrame, config: PipelineConfig, folder: Path
) -> Path:
    """Write `regression_report_<day>.html` into `folder`, whole (see `regression_page`); its
    path."""
    path = folder / f"regression_report_{day_report.partition.isoformat()}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, regression_page(day_report, trend, config))
    return path
