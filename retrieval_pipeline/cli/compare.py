"""`retrieval-pipeline compare`: control against candidate on the same queries, from trace files.

Scores TRACES exactly as `evaluate` does (same validation, quarantine and stale-label rules), then
compares the two variants with `retrieval_pipeline.ab` and writes the report. Only click and
light pure modules (metric names, segments, text) are imported at start-up; the engine, pandas
and scipy load when the command runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retrieval_pipeline.cli.errors import INPUT_ERRORS, one_line
from retrieval_pipeline.cli.options import (
    BadOption,
    gain_option,
    gmax_option,
    judged_only_option,
    metrics_option,
    relevance_level_option,
)
from retrieval_pipeline.metrics import DEFAULT_METRICS
from retrieval_pipeline.segments import (
    ALL_SEGMENTS,
    OVERALL_SEGMENT,
    parse_threshold,
    segment_label,
)
from retrieval_pipeline.text import MISSING, number, printable

if TYPE_CHECKING:
    from retrieval_pipeline.ab.compare import Comparison
    from retrieval_pipeline.warehouse.evaluation import EvaluationRun

FLAGGED_EXIT_CODE = 3


def _terminal(text: object, width: int = 24) -> str:
    """Trace strings on a terminal: no control characters (no escape sequences), shortened."""
    return printable(text, width, ellipsis="~")


def summary_text(run: EvaluationRun, comparison: Comparison) -> str:
    """What the terminal shows: the accounting, the test, one line per cell (which numbers are
    Holm-adjusted and which are not in the header, the footnote under it), the flag."""
    from retrieval_pipeline.cli.evaluate_support import records_line
    from retrieval_pipeline.reports.comparison import (
        adjustment_note,
        short_interval,
        test_words,
        verdict_text,
    )

    overall = comparison.coverage[-1]
    control, candidate = _terminal(comparison.control), _terminal(comparison.candidate)
    lines = [
        f"{records_line(run)} {run.labels.stale} stale labels dropped.",
        f"{candidate} vs {control}: {overall.paired} paired queries; {overall.control_only} "
        f"served by {control} only, {overall.candidate_only} by {candidate} only, "
        f"{overall.shared_unpaired} by both but not annotated in both.",
        test_words(comparison),
        "",
        f"{'segment':<18}{'metric':<14}{'n':>5}{'control':>9}{'candidate':>10}{'delta':>8}"
        f"  {'95% CI (unadjusted)':<20}{'p (Holm-adjusted)':>17}  verdict",
    ]
    for cell in comparison.cells:
        interval = short_interval(cell)
        p = cell.p_randomization_holm
        lines.append(
            f"{_terminal(segment_label(cell.segment), 17):<18}{_terminal(cell.metric, 13):<14}"
            f"{cell.n:>5}{number(cell.control_mean):>9}{number(cell.candidate_mean):>10}"
            f"{number(cell.delta, signed=True):>8}  {interval:<20}"
            f"{MISSING if p is None else f'{p:.4f}':>17}  {verdict_text(cell)}"
        )
    lines += [adjustment_note(comparison), ""]
    if comparison.flagged:
        lines.append("FLAGGED for review:")
        lines += [f"  - {_terminal(reason, 400)}" for reason in comparison.reasons]
    else:
        lines.append("Not flagged.")
    lines += _judged_lines(comparison)
    if comparison.why:  # the paired queries behind each worse cell (docs/why.md)
        lines += ["", "Why (paired queries):"]
        lines += [f"  - {_terminal(w.line(), 400)}." for w in comparison.why]
    return "\n".join(lines)


def _judged_lines(comparison: Comparison) -> list[str]:
    """Each arm's judged share over every segment, and the warnings (`reports.judged`)."""
    from retrieval_pipeline.reports.judged import comparison_warnings

    overall = comparison.judged[-1] if comparison.judged else None
    if overall is None or overall.segment != OVERALL_SEGMENT:
        return []
    shares = (
        f"{_terminal(name)} {number(share, percent=True)}"
        for name, share in (
            (comparison.control, overall.control),
            (comparison.candidate, overall.candidate),
        )
    )
    lines = [f"Judged share of the top K ({comparison.judged_metric}): {', '.join(shares)}."]
    lines += [f"  - {_terminal(w, 400)}." for w in comparison_warnings(comparison)]
    return lines


@click.command("compare")
@click.argument("traces", nargs=-1, required=True)  # paths or s3:// URLs, as evaluate takes
@click.option("--control", required=True, help="Variant name of the control arm.")
@click.option("--candidate", required=True, help="Variant name of the candidate arm.")
@metrics_option(",".join(DEFAULT_METRICS))
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    default=None,
    help="Corpus snapshot (.parquet or .csv); labels of documents not in it are stale.",
)
@gain_option
@relevance_level_option
@judged_only_option
@gmax_option
@click.option(
    "--alpha",
    type=float,
    default=0.05,
    show_default=True,
    help="Significance level of the Holm-adjusted randomization test.",
)
@click.option(
    "--guard",
    "guards",
    multiple=True,
    metavar="METRIC",
    help="Flag the experiment when the candidate is significantly worse on METRIC (repeatable).",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="[SEGMENT:]METRIC=VALUE",
    help="Flag when the candidate's mean falls below VALUE where control's does not; for every "
    "segment, or only SEGMENT (repeatable).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Report file: .html (self-contained), .md or .json.",
)
@click.option(
    "--min-annotated",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Annotated traces each arm needs in a segment before a threshold is judged there.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--n-resamples",
    type=click.IntRange(min=1),
    default=9999,
    show_default=True,
    help="Bootstrap and randomization resamples per cell.",
)
@click.option(
    "--normal-approximation-min-pairs",
    "large_sample_pairs",
    type=int,
    default=None,
    help="From this many paired queries (nonzero differences for the p-value) on, a cell uses "
    "the t interval and the normal approximation of the sign-flip test instead of resampling "
    "(an integer >= 100; default 1000, as [comparison] normal_approximation_min_pairs).",
)
@click.option(
    "--fail-on-flag",
    is_flag=True,
    help=f"Exit with status {FLAGGED_EXIT_CODE} when the experiment is flagged.",
)
@click.pass_context
def compare(
    ctx: click.Context,
    traces: tuple[str, ...],
    control: str,
    candidate: str,
    metrics: str,
    corpus: Path | None,
    gain: str,
    relevance_level: float,
    judged_only: bool,
    gmax: float,
    alpha: float,
    guards: tuple[str, ...],
    thresholds: tuple[str, ...],
    output: Path | None,
    min_annotated: int,
    seed: int,
    n_resamples: int,
    large_sample_pairs: int | None,
    fail_on_flag: bool,
) -> None:
    """Compare variant CANDIDATE with CONTROL on TRACES (files or directories), per segment."""
    from retrieval_pipeline.ab.compare import ComparisonSettings, check_request
    from retrieval_pipeline.ab.pairing import compare_variants, with_judged_shares
    from retrieval_pipeline.ab.why import paired_why, worse_cells
    from retrieval_pipeline.metrics import MetricConfigError, parse_metrics
    from retrieval_pipeline.reports.comparison import report_format, write_comparison_report
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    if output is not None:
        try:
            report_format(output)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    try:  # the options (exit 2), before any file is read
        try:
            names = [metric.name for metric in parse_metrics(metrics)]
        except MetricConfigError as exc:
            raise BadOption(str(exc), "--metrics") from None
        limits: dict[str, dict[str, float]] = {}
        for text in thresholds:
            try:
                segment, metric, value = parse_threshold(text)
            except ValueError as exc:
                raise ValueError(f"--threshold: {exc}") from None
            limits.setdefault(segment or ALL_SEGMENTS, {})[metric] = value
        guarded = [name for item in guards for name in item.split(",") if name.strip()]
        large = (
            {}
            if large_sample_pairs is None
            else {"normal_approximation_min_pairs": large_sample_pairs}
        )
        settings = ComparisonSettings(
            alpha=alpha,
            guarded_metrics=tuple(guarded),
            thresholds=limits,
            n_resamples=n_resamples,
            seed=seed,
            min_annotated_traces=min_annotated,
            **large,
        )
        check_request(control, candidate, names, settings)
    except ValueError as exc:
        raise BadOption(str(exc).splitlines()[0]) from None
    try:
        run = run_evaluation(
            list(traces), metrics, corpus, gain, relevance_level, gmax=gmax, judged_only=judged_only
        )
        comparison = compare_variants(run.per_query, control, candidate, settings)
        if run.judged is not None:
            comparison = with_judged_shares(
                comparison, run.per_query, run.judged, run.judged_metric
            )
        worse = worse_cells(comparison.cells)
        comparison = replace(comparison, why=paired_why(run.per_query, control, candidate, worse))
    except INPUT_ERRORS as exc:  # a bad record, option, file or store: one line
        raise click.ClickException(one_line(exc)) from None
    if output is not None:
        write_comparison_report(comparison, output)
    click.echo(summary_text(run, comparison))
    if output is not None:
        click.echo(f"Report written to {output}.")
    if comparison.flagged and fail_on_flag:
        ctx.exit(FLAGGED_EXIT_CODE)
