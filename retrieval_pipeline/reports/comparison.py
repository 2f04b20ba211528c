"""The A/B comparison report for eyes and for programs: self-contained HTML, Markdown and JSON.

Pure: a `Comparison` (or a partition day's `DayComparison`) in, text and files out; no DuckDB, no
Dagster. `comparison_html`, `comparison_markdown` and `comparison_json` render one comparison
(`write_comparison_report` picks one by the file's extension); `write_reports` writes a day's
three files as the `variant_comparison` asset keeps them (a notice in words when no comparison
was possible). Every file is written whole (`files.write_atomically`): the comparison's check
reads the JSON back. Trace strings are escaped with `html.escape` in HTML and with
`text.escape_markdown` in Markdown; JSON holds them verbatim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

import pandas as pd

from retrieval_pipeline.ab.compare import CellResult, Comparison, config_thresholds
from retrieval_pipeline.ab.day import NO_COMPARISON, DayComparison
from retrieval_pipeline.ab.stats import CONFIDENCE_LEVEL
from retrieval_pipeline.ab.why import why_markdown
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.files import write_atomically, write_text_atomically
from retrieval_pipeline.reports import judged
from retrieval_pipeline.reports.comparison_charts import (
    arm_colours,
    coverage_chart,
    forest_chart,
    segment_bars_chart,
)
from retrieval_pipeline.reports.html import (
    chart_html,
    esc,
    html_page,
    notice_html,
    notice_markdown,
    render_table,
)
from retrieval_pipeline.reports.trend_chart import trend_section
from retrieval_pipeline.reports.why_html import paired_why_html
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import (
    MISSING,
    escape_markdown,
    json_text,
    markdown_table,
    number,
    pvalue,
)

REPORT_SUFFIXES = (".html", ".md", ".json")
REPORT_STEM = "variant_comparison"
NOT_FLAGGED = (
    "No threshold newly missed by the compared means and no guarded metric significantly worse."
)


def _cell_rows(comparison: Comparison) -> list[dict[str, object]]:
    return [
        {
            "segment": segment_label(c.segment),
            "metric": c.metric,
            "n": c.n,
            "control": number(c.control_mean),
            "candidate": number(c.candidate_mean),
            "delta": number(c.delta, signed=True),
            "relative": number(c.relative_delta, signed=True, percent=True),
            "ci": _interval(c),
            "p_t": pvalue(c.p_t),
            "p_rand": pvalue(c.p_randomization),
            "p_holm": pvalue(c.p_randomization_holm),
            "verdict": verdict_text(c),
            "control_level": number(c.control_trace_mean),
            "candidate_level": number(c.candidate_trace_mean),
            "threshold": number(c.threshold),
            "threshold_status": c.threshold_status.replace("_", " "),
            "ci_method": c.ci_method or MISSING,
            "p_method": c.p_randomization_method or MISSING,
        }
        for c in comparison.cells
    ]


def _interval(cell: CellResult) -> str:
    if cell.ci_low is None or cell.ci_high is None:
        return MISSING
    low, high = number(cell.ci_low, signed=True), number(cell.ci_high, signed=True)
    return f"{low} .. {high}"


_CELL_HEADERS = {
    "segment": "segment",
    "metric": "metric",
    "n": "paired queries",
    "control": "control",
    "candidate": "candidate",
    "delta": "delta",
    "relative": "relative",
    "ci": f"{CONFIDENCE_LEVEL:.0%} CI (unadjusted)",
    "verdict": "verdict",
    "p_holm": "p (Holm-adjusted)",
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


_METHOD_CELLS = ("ci_method", "p_method")


def _cells_table(comparison: Comparison) -> str:
    """The cells as HTML: the numbers in one table, how each was tested in a second one, so
    that the first fits a 1400-pixel window."""
    rows = _cell_rows(comparison)
    main = [k for k in _CELL_HEADERS if k not in _METHOD_CELLS]
    return _html_table(rows, main) + _html_table(
        rows, ["segment", "metric", *_METHOD_CELLS], "How each cell was tested"
    )


def _html_table(rows: Sequence[dict[str, object]], keys: Sequence[str], caption: str = "") -> str:
    head = "".join(
        f'<th class="{"text" if k in _TEXT_CELLS else "num"}">{esc(_CELL_HEADERS[k])}</th>'
        for k in keys
    )
    body = []
    for row in rows:
        cells = []
        for key in keys:
            classes = ["text"] if key in _TEXT_CELLS else []
            if key == "verdict" and row[key] in ("better", "worse"):
                classes.append(str(row[key]))
            if key == "threshold_status" and row[key] == "fail":
                classes.append("worse")
            attr = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{attr}>{esc(row[key])}</td>")
        failing = row.get("threshold_status") == "fail" or row.get("verdict") == "worse"
        body.append(('<tr class="worse">' if failing else "<tr>") + "".join(cells) + "</tr>")
    title = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table>{title}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _coverage_frame(comparison: Comparison) -> pd.DataFrame:
    frame = comparison.coverage_frame()
    frame["segment"] = [segment_label(s) for s in frame["segment"]]
    for arm in ("control", "candidate"):
        traces = frame[f"{arm}_traces"].astype(float)
        annotated = frame[f"{arm}_annotated_traces"].astype(float)
        frame[f"{arm}_annotation_rate"] = (annotated / traces).where(traces > 0)
    if comparison.judged_metric is not None:
        for column, values in judged.comparison_judged_columns(comparison).items():
            frame[column] = pd.Series(values, dtype="float64")
    return frame


def _tested(comparison: Comparison) -> int:
    return sum(1 for cell in comparison.cells if cell.p_randomization_holm is not None)


def test_words(comparison: Comparison) -> str:
    """How the comparison decides and what is adjusted, in one sentence (the reports' headline
    beside the window, the terminal's line above the table)."""
    alpha = comparison.settings.alpha
    return (
        "Test: a paired randomization (sign-flip) test per segment and metric; better or worse "
        f"where its p, Holm-adjusted for the {_tested(comparison)} segment x metric cells tested "
        f"together, is <= {alpha:g}. The {CONFIDENCE_LEVEL:.0%} intervals and the other "
        "p-values are per cell, not adjusted."
    )


def adjustment_note(comparison: Comparison) -> str:
    """The footnote under every table of cells: which numbers are adjusted for multiple
    comparisons, and why an interval and a verdict can seem to disagree (cells where they do
    are marked `*` and explained by `holm_notes`)."""
    alpha = comparison.settings.alpha
    return (
        f"* Only the Holm-adjusted p (over {_tested(comparison)} cells) decides the verdict; the "
        f"{CONFIDENCE_LEVEL:.0%} CI is unadjusted, for its cell alone, so it may exclude 0 while "
        f"the adjusted p stays above {alpha:g} (no significant difference)."
    )


def interval_disagrees(cell: CellResult) -> bool:
    """True where the cell's unadjusted interval excludes 0 but its verdict, decided by the
    Holm-adjusted p, is no significant difference."""
    if cell.ci_low is None or cell.ci_high is None:
        return False
    excludes = cell.ci_low > 0 or cell.ci_high < 0
    return excludes and cell.verdict == "no significant difference"


def verdict_text(cell: CellResult) -> str:
    """The verdict, marked `*` where the unadjusted interval seems to say otherwise."""
    return f"{cell.verdict} *" if interval_disagrees(cell) else cell.verdict


def holm_notes(comparison: Comparison) -> list[str]:
    """One sentence per cell whose raw randomization p is below alpha while its Holm-adjusted
    p is not, or whose unadjusted interval excludes 0 while its verdict is no significant
    difference: why the smaller number on its own is not a verdict."""
    alpha = comparison.settings.alpha
    tested = _tested(comparison)
    notes = []
    for cell in comparison.cells:
        raw, adjusted = cell.p_randomization, cell.p_randomization_holm
        where = f"{segment_label(cell.segment)} / {cell.metric}"
        if raw is not None and adjusted is not None and raw <= alpha < adjusted:
            notes.append(
                f"{where}: the raw p-value {pvalue(raw)} is below {alpha:g}, but adjusted (Holm) "
                f"for the {tested} segment x metric cells tested together it is "
                f"{pvalue(adjusted)}, so this difference alone is not significant."
            )
        elif interval_disagrees(cell) and adjusted is not None:
            notes.append(
                f"{where}: the {CONFIDENCE_LEVEL:.0%} interval {_interval(cell)} excludes 0, but "
                f"it is unadjusted (this cell alone); adjusted (Holm) for the {tested} segment x "
                f"metric cells tested together the randomization p is {pvalue(adjusted)}, above "
                f"{alpha:g}, so the verdict is no significant difference."
            )
    return notes


def _flag_html(comparison: Comparison) -> str:
    notes = "".join(f'<p class="muted">{esc(note)}</p>' for note in holm_notes(comparison))
    if not comparison.flagged:
        return f'<div class="ok"><strong>Not flagged.</strong> {esc(NOT_FLAGGED)}</div>{notes}'
    items = "".join(f"<li>{esc(reason)}</li>" for reason in comparison.reasons)
    return f'<div class="flag"><strong>Flagged for review.</strong><ul>{items}</ul></div>{notes}'


def _judged_html(comparison: Comparison) -> str:
    warnings = judged.comparison_warnings(comparison)
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(text)}.</li>" for text in warnings)
    return f'<div class="flag"><strong>Judged share:</strong><ul>{items}</ul></div>'


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
    day_misses: tuple[str, Sequence[str]] | None = None,
) -> str:
    """The comparison report as one self-contained HTML page; `note` (plain text, escaped) says
    what was compared (e.g. the window), `extra_sections` (trusted HTML, e.g. `trend_section`)
    follow the coverage; `day_misses` (plain text: a heading and its items) the partition day's
    own threshold misses, shown under the flag."""
    heading = title or f"{comparison.candidate} vs {comparison.control}"
    intro = (
        f"<p>Candidate <strong>{esc(comparison.candidate)}</strong> against control "
        f"<strong>{esc(comparison.control)}</strong>.</p>"
        + (f"<p><strong>{esc(note)}</strong></p>" if note else "")
        + f"<p><strong>{esc(test_words(comparison))}</strong></p>"
        + f'<p class="muted">{esc(_method_text(comparison))}</p>'
    )
    misses = ""
    if day_misses is not None:
        items = "".join(f"<li>{esc(item)}</li>" for item in day_misses[1])
        misses = f'<div class="watch"><strong>{esc(day_misses[0])}:</strong><ul>{items}</ul></div>'
    coverage = _coverage_frame(comparison)
    footnote = f'<p class="muted">{esc(adjustment_note(comparison))}</p>'
    sections = [
        intro + _flag_html(comparison) + misses + _judged_html(comparison),
        "<section><h2>Per segment and metric</h2>"
        + _cells_table(comparison)
        + footnote
        + "</section>",
        "<section><h2>Means per segment</h2>"
        + chart_html(
            segment_bars_chart(comparison),
            "control and candidate means per segment",
            f"Each arm's mean over its annotated traces with its {CONFIDENCE_LEVEL:.0%} interval "
            "(Wilson's on an effective sample size, within [0, 1]); "
            "dashed red: the segment's threshold.",
        )
        + "</section>",
        "<section><h2>Differences</h2>"
        + chart_html(
            forest_chart(comparison),
            "candidate minus control per segment and metric",
            f"Candidate minus control with its {CONFIDENCE_LEVEL:.0%} interval, unadjusted "
            "(each cell's interval method is in the table above).",
        )
        + "</section>",
        "<section><h2>Coverage</h2>"
        + chart_html(coverage_chart(comparison), "queries per segment by pairing")
        + render_table(
            coverage,
            headers={c: c.replace("_", " ") for c in coverage.columns},
        )
        + "</section>",
        *filter(None, [paired_why_html(comparison.why)]),
        *extra_sections,
    ]
    return html_page(heading, sections)


def comparison_markdown(
    comparison: Comparison,
    note: str | None = None,
    day_misses: tuple[str, Sequence[str]] | None = None,
) -> str:
    """The comparison report in Markdown (trace strings escaped: no HTML, no cell breaks);
    `note` and `day_misses` as in `comparison_html`."""
    lines = [
        f"# {escape_markdown(comparison.candidate)} vs {escape_markdown(comparison.control)}",
        "",
        *([f"**{escape_markdown(note)}**", ""] if note else []),
        f"**{escape_markdown(test_words(comparison))}**",
        "",
        escape_markdown(_method_text(comparison)),
        "",
    ]
    if comparison.flagged:
        lines.append("**Flagged for review:**")
        lines += [f"- {escape_markdown(reason)}" for reason in comparison.reasons]
    else:
        lines.append(f"Not flagged. {NOT_FLAGGED}")
    if day_misses is not None:
        lines += ["", f"**{escape_markdown(day_misses[0])}:**"]
        lines += [f"- {escape_markdown(item)}" for item in day_misses[1]]
    warnings = judged.comparison_warnings(comparison, escape_markdown)
    if warnings:
        lines += ["", "**Judged share:**"] + [f"- {warning}." for warning in warnings]
    for note in holm_notes(comparison):
        lines += ["", escape_markdown(note)]
    lines += ["", "## Per segment and metric", ""]
    rows = _cell_rows(comparison)
    lines.append(
        markdown_table(list(_CELL_HEADERS.values()), [[r[k] for k in _CELL_HEADERS] for r in rows])
    )
    lines += ["", _markdown_note(comparison)]
    lines += why_markdown(comparison.why)
    lines += ["", "## Coverage (queries)", ""]
    header = [
        "segment",
        "paired",
        "both served, not paired",
        "control only",
        "candidate only",
        "control traces (annotated)",
        "candidate traces (annotated)",
    ]
    coverage_rows: list[list[object]] = [
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
    ]
    if comparison.judged_metric is not None:
        header += [f"control {comparison.judged_metric}", f"candidate {comparison.judged_metric}"]
        shares = judged.comparison_judged_columns(comparison)
        for row, control, candidate in zip(
            coverage_rows, shares["control_judged"], shares["candidate_judged"], strict=True
        ):
            row += [number(control), number(candidate)]
    lines.append(markdown_table(header, coverage_rows))
    return "\n".join(lines) + "\n"


def comparison_json(comparison: Comparison) -> str:
    """The comparison as JSON (strings as they are in the data; undefined numbers null)."""
    document = comparison.to_dict() | {"judged_warnings": judged.comparison_warnings(comparison)}
    return json_text(document, indent=2) + "\n"


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
    write_text_atomically(path, renderers[suffix](comparison))


def report_path(folder: Path, day: date, suffix: str) -> Path:
    """Where the comparison report of `day` is written (`suffix`: .html, .md or .json)."""
    return folder / f"{REPORT_STEM}_{day.isoformat()}{suffix}"


def write_reports(
    result: DayComparison, folder: Path, trend_rows: pd.DataFrame, config: PipelineConfig
) -> list[Path]:
    """Write the HTML, Markdown and JSON reports of one day, all three whole (renamed over the old
    ones together); their paths. `trend_rows`: `segment_metrics` rows of recent partitions
    (`warehouse.trend.read_segment_trend`), drawn for the two arms."""
    title = f"Variant comparison {result.day.isoformat()}: {result.candidate} vs {result.control}"
    paths = [report_path(folder, result.day, suffix) for suffix in REPORT_SUFFIXES]
    html_path, md_path, json_path = paths
    note = result.note()
    if result.comparison is None:
        lines = [f"{NO_COMPARISON}: {result.problem}.", note]
        heading = result.day_misses_words()
        if heading is not None:
            lines += [f"{heading}:", *(m.words() for m in result.day_misses)]
        page, markdown = notice_html(title, lines), notice_markdown(title, lines)
    else:
        if result.problem is not None:
            note += f" {NO_COMPARISON}: {result.problem}."
        two_arms = trend_rows[trend_rows["variant"].isin([result.control, result.candidate])]
        trend_html = trend_section(
            two_arms,
            metrics=list(config.headline_metrics),
            thresholds=config_thresholds(config),
            value_column="mean",
            title="Daily trend of the headline metrics",
            colours=arm_colours(result.control, result.candidate),
        )
        misses = day_misses(result)
        page = comparison_html(result.comparison, title, note, [trend_html], misses)
        markdown = comparison_markdown(result.comparison, note, misses)
    text = json_text(result.to_dict(), indent=2)
    write_atomically({html_path: page, md_path: markdown, json_path: text + "\n"})
    return paths


def day_misses(result: DayComparison) -> tuple[str, list[str]] | None:
    """The partition day's own threshold misses as the reports show them: a heading and one
    line per miss, worded as the regression report words them (None: the day has none)."""
    heading = result.day_misses_words()
    if heading is None:
        return None
    return heading, [m.words() for m in result.day_misses]


def short_interval(cell: CellResult) -> str:
    """The interval of a cell's delta on one short line (`-0.012..+0.034`), for the terminal and
    the asset's metadata; MISSING where there is none."""
    if cell.ci_low is None or cell.ci_high is None:
        return MISSING
    return f"{number(cell.ci_low, signed=True)}..{number(cell.ci_high, signed=True)}"


def cells_markdown(comparison: Comparison) -> str:
    """Every cell of `comparison` as a short Markdown table (the asset's `cells` metadata)."""
    header = ["segment", "metric", "paired", "control", "candidate", "delta"]
    header += [f"{CONFIDENCE_LEVEL:.0%} CI (unadjusted)", "p (Holm-adjusted)", "verdict"]
    header += ["CI method", "p method"]
    rows = []
    for cell in comparison.cells:
        p = cell.p_randomization_holm
        rows.append(
            [
                segment_label(cell.segment),
                cell.metric,
                cell.n,
                number(cell.control_mean),
                number(cell.candidate_mean),
                number(cell.delta, signed=True),
                short_interval(cell),
                MISSING if p is None else f"{p:.4f}",
                verdict_text(cell),
                cell.ci_method or MISSING,
                cell.p_randomization_method or MISSING,
            ]
        )
    return markdown_table(header, rows) + "\n\n" + _markdown_note(comparison)


def _markdown_note(comparison: Comparison) -> str:
    """`adjustment_note` in Markdown: its leading `*` a character, not a list item."""
    return "\\" + escape_markdown(adjustment_note(comparison))


def reasons_markdown(results: list[DayComparison], with_day: bool) -> str:
    """Each day's reasons (and why no comparison was possible) as a Markdown list; `none`."""
    lines = []
    for result in results:
        prefix = f"{result.day.isoformat()}: " if with_day else ""
        if result.problem is not None:
            lines.append(f"- {prefix}{NO_COMPARISON}: {escape_markdown(result.problem)}")
        lines += [f"- {prefix}{escape_markdown(r)}" for r in result.reasons]
    return "\n".join(lines) or "none"
