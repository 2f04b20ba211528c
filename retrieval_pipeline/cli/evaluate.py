"""`retrieval-pipeline evaluate`: score trace files and print what happened to every record.

The warehouse (DuckDB) is imported when the command runs, not when the CLI starts; pandas only
where the output needs it (pandas_deferred)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import click

from retrieval_pipeline.cli.errors import INPUT_ERRORS, one_line
from retrieval_pipeline.cli.evaluate_support import (
    SHOWN,
    check_outputs,
    group_means,
    group_table,
    parse_by,
    quarantine_header,
    records_line,
    trace_files,
)
from retrieval_pipeline.cli.options import (
    BadOption,
    gain_option,
    gmax_option,
    judged_only_option,
    metrics_option,
    relevance_level_option,
)
from retrieval_pipeline.metrics import DEFAULT_GMAX
from retrieval_pipeline.pandas_deferred import defer_pandas
from retrieval_pipeline.text import json_text

if TYPE_CHECKING:
    from retrieval_pipeline.ab.stages import StageGain
    from retrieval_pipeline.cli.trec import TrecInput
    from retrieval_pipeline.config import PipelineConfig
    from retrieval_pipeline.ingest.span_pieces import SpanReading
    from retrieval_pipeline.warehouse.evaluation import EvaluationRun


@click.command()
@click.argument("traces", nargs=-1, required=False)
@click.option(
    "--judgments",
    "judgments",
    multiple=True,
    help="Judgments (TREC qrels, or .csv/.jsonl/.parquet with query_id, doc_id, grade): they "
    "label every trace of their query that has no labels of its own. A file, folder or "
    "s3:// URL; repeatable.",
)
@click.option(
    "--trec-run",
    default=None,
    help="A TREC run file (qid Q0 docno rank score tag) to score instead of TRACES, each query "
    "ordered as trec_eval orders it.",
)
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    default=None,
    help="Corpus snapshot (.parquet or .csv: doc_id, added_at, deleted_at); labels of "
    "documents not in it are stale and dropped.",
)
@metrics_option("ndcg@10,mrr,precision@5,recall@20,map")
@gain_option
@relevance_level_option
@judged_only_option
@gmax_option
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Per-trace table (.parquet, .csv or .jsonl).",
)
@click.option(
    "--quarantine",
    type=click.Path(path_type=Path),
    default=None,
    help="Records that could not be scored, with their reasons (.jsonl, .csv, .parquet).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Pipeline config (TOML) whose [trace_format] maps span attributes to record fields "
    "(default: $RETRIEVAL_PIPELINE_CONFIG, else OpenInference's names).",
)
@click.option(
    "--topics",
    type=click.Path(path_type=Path),
    default=None,
    help="Query texts to query ids (TREC topics qid<TAB>text, or .csv/.jsonl with query_id, "
    "text): spans that carry only the query text take its id, so id-keyed judgments join them.",
)
@click.option(
    "--stages",
    is_flag=True,
    help="Score span exports stage by stage (retriever, reranker input, reranker output) and "
    "print the reranker's gain over its input per segment.",
)
@click.option(
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["table", "json", "trec"]),
    default="table",
    show_default=True,
    help="Standard output: a summary (table, json), or trec_eval's lines per query and for "
    "all (trec; linear gain unless --gain says otherwise).",
)
@click.option(
    "--by",
    "by_text",
    default=None,
    metavar="segment,variant",
    help="Also print the means per segment, per variant, or per both (comma-separated).",
)
@click.pass_context
def evaluate(
    ctx: click.Context,
    traces: tuple[str, ...],
    judgments: tuple[str, ...],
    trec_run: str | None,
    corpus: Path | None,
    metrics: str,
    gain: str,
    relevance_level: float,
    judged_only: bool,
    gmax: float,
    output: Path | None,
    quarantine: Path | None,
    config_path: Path | None,
    topics: Path | None,
    stages: bool,
    fmt: str,
    by_text: str | None,
) -> None:
    """Score TRACES (files, folders or s3:// URLs of .jsonl, .jsonl.gz, .parquet, and OTLP/JSON
    span exports, found by their content; a Delta table's folder, its current version; or a
    Phoenix project's day, phoenix+http://HOST:PORT/PROJECT?day=YYYY-MM-DD), or a TREC run
    (--trec-run)."""
    if bool(traces) == bool(trec_run):
        raise click.UsageError("give trace files (TRACES) or --trec-run RUN, one of the two")
    defer_pandas()  # loaded only where the output needs it: a CSV or JSON lines file, --by
    by = parse_by(by_text)
    check_outputs({"--output": output, "--quarantine": quarantine})
    from retrieval_pipeline.metrics import (
        MetricConfigError,
        check_gmax,
        check_relevance_level,
        parse_metrics,
    )

    # the options first, then the files: a bad option is told (exit 2) before any file is read
    checks: list[tuple[str, Callable[[Any], object], object]] = [
        ("--metrics", parse_metrics, metrics),
        ("--relevance-level", check_relevance_level, relevance_level),
        ("--gmax", check_gmax, gmax),
    ]
    for option, check, value in checks:
        try:
            check(value)
        except MetricConfigError as exc:
            raise BadOption(str(exc), option) from None
    if traces:
        named_files = [spec for spec in traces if _kind_name(spec) == "files"]
        if named_files:  # before any work: no trace file at all is an error, others are told
            trace_files(named_files)

    import duckdb

    from retrieval_pipeline.reports.per_query import write_table
    from retrieval_pipeline.warehouse.evaluation import run_evaluation, span_reading

    if fmt == "trec" and ctx.get_parameter_source("gain") is click.core.ParameterSource.DEFAULT:
        gain = "linear"  # trec_eval's nDCG
    run_input: TrecInput | None = None
    try:
        if trec_run is not None:
            from retrieval_pipeline.cli.trec import read_run

            run_input = read_run(trec_run)
        source = run_input.records if run_input is not None else list(traces)
        config = _config(config_path)
        reading = span_reading(config.trace_format if config else None, topics)
        # the quarantine goes to its file from the warehouse, a batch at a time; the summary
        # shows the first few
        run = run_evaluation(
            source,
            metrics,
            corpus,
            gain,
            relevance_level,
            quarantine_rows=SHOWN,
            quarantine_file=quarantine,
            gmax=gmax,
            judged_only=judged_only,
            spans=reading,
            judgments=list(judgments),
            left_out_lines=run_input.run.quarantine if run_input is not None else None,
            phoenix=config.phoenix if config else None,
        )
        lines = None
        if fmt == "trec":
            from retrieval_pipeline.cli.trec import trec_output

            lines = trec_output(run, run_input, gain)
        if stages:
            staged = stage_runs(
                run,
                list(traces),
                metrics,
                corpus,
                gain,
                relevance_level,
                reading,
                gmax=gmax,
                judged_only=judged_only,
                judgments=list(judgments),
            )
    except INPUT_ERRORS as exc:  # a bad record, option, file or store: one line
        raise click.ClickException(one_line(exc)) from None
    except (duckdb.IOException, duckdb.OutOfMemoryException) as exc:
        # beyond its memory limit DuckDB spills to disk: a full disk, or no room left at all
        raise click.ClickException(" ".join(str(exc).split())) from None
    if run.ingest.read == 0:
        raise click.ClickException(
            f"no records in the {run.ingest.files} trace file(s) given: nothing to score"
        )
    problems = run.judgment_join.problems() if run.judgment_join is not None else []
    if output is not None:
        write_table(run.rows, output)
    dropped = run_input.dropped_words() if run_input is not None else None
    if dropped is not None:  # on stderr: standard output may be trec_eval's lines
        click.echo(dropped, err=True)
    if lines is not None:
        click.echo("\n".join(lines))
    elif fmt == "json":
        data = summary(run, run_input, by)
        click.echo(
            json_text(data | _stages_data(staged) if stages else data, indent=2, ensure_ascii=True)
        )
    else:
        text = summary_text(run, run_input, by, quarantine)
        click.echo(text + "\n\n" + _stages_text(staged) if stages else text)
    unknown = _unknown_fields(run)
    if unknown and run.traces.annotated == 0:
        # a misspelt field: every trace unannotated or quarantined, and the summary says why
        misspelt = [line for line in unknown if line.endswith("?")] or unknown
        raise click.ClickException("no trace could be scored; " + "; ".join(misspelt))
    if problems and not run.traces.by_own_labels:
        # every score would be a silent 0, or nothing is annotated: not a result to act on
        raise click.ClickException(
            "nothing could be scored against the judgments given: " + " ".join(problems)
        )


StageSummary: TypeAlias = tuple[
    dict[str, dict[str, float | None]], dict[str, int], list["StageGain"]
]


def stage_runs(
    run: EvaluationRun,
    traces: list[str],
    metrics: str,
    corpus: Path | None,
    gain: str,
    relevance_level: float,
    reading: SpanReading,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    judgments: Sequence[str] = (),
) -> StageSummary:
    """The means and scored records of every stage, and the reranker's gain per segment. The
    first stage is `run`, the run `evaluate` prints (so the two agree); each reranker stage is a
    private run (`warehouse.stages`, as the nightly scores them), labelled as the first stage is
    (the same corpus, judgments, gain, gmax and `judged_only`)."""
    from retrieval_pipeline.ingest.spans import STAGE_RETRIEVER
    from retrieval_pipeline.metrics import parse_metrics
    from retrieval_pipeline.warehouse.stages import RERANKER_STAGES, stage_rows
    from retrieval_pipeline.warehouse.stages import stage_runs as score_stages

    runs = {STAGE_RETRIEVER: run} | score_stages(
        lambda: traces,
        parse_metrics(metrics),
        RERANKER_STAGES,
        reading,
        corpus=corpus,
        gain=gain,
        relevance_level=relevance_level,
        gmax=gmax,
        judged_only=judged_only,
        judgments=judgments,
    )
    names = [m.name for m in runs[STAGE_RETRIEVER].metrics]
    day = stage_rows(runs, names)
    means = {STAGE_RETRIEVER: runs[STAGE_RETRIEVER].means(), **day.overall_means(names)}
    scored = {STAGE_RETRIEVER: runs[STAGE_RETRIEVER].ingest.valid, **day.scored}
    return means, scored, day.stage_gains


def _stages_data(staged: StageSummary) -> dict[str, object]:
    from retrieval_pipeline.reports.stages import stages_data

    return stages_data(*staged)


def _stages_text(staged: StageSummary) -> str:
    from retrieval_pipeline.reports.stages import stages_text

    return stages_text(*staged)


def _config(config_path: Path | None) -> PipelineConfig | None:
    """The config (--config, else $RETRIEVAL_PIPELINE_CONFIG: its `[trace_format]` and
    `[phoenix]` are read); None without one, so that the configuration's models load only where
    a config, a span or a Phoenix day needs them."""
    from retrieval_pipeline import environment

    if config_path is None and environment.path(environment.CONFIG) is None:
        return None
    from retrieval_pipeline.config import load_config

    return load_config(config_path)


def _kind_name(spec: str) -> str:
    from retrieval_pipeline.ingest.source_kinds import kind_of

    return kind_of(spec).name


# JSON keys kept for one release beside the key that replaces them (docs/evaluate.md, "Words"):
# `records_scored` counted valid records, while "scored" elsewhere means annotated and valid.
DEPRECATED_KEYS = {"records_scored": "records_valid"}


def summary(
    run: EvaluationRun, trec: TrecInput | None = None, by: Sequence[str] = ()
) -> dict[str, object]:
    """The counts and means a user is told, as data (with `by`: the means per group too)."""
    judged = run.judgments
    return {
        "records_read": run.ingest.read,
        "records_valid": run.ingest.valid,
        "records_scored": run.ingest.valid,  # deprecated alias of records_valid (DEPRECATED_KEYS)
        "records_quarantined": run.ingest.quarantined,
        "spans_skipped": run.ingest.skipped,
        "files": run.ingest.files,
        "traces_annotated": run.traces.annotated,
        "traces_labelled_by_own_labels": run.traces.by_own_labels,
        "traces_labelled_by_judgments": run.traces.by_judgments,
        "traces_unannotated": run.traces.unannotated,
        "traces_no_relevant": run.traces.no_relevant,
        "labels": run.labels.labels,
        "stale_labels_dropped": run.labels.stale,
        "duplicate_ids_dropped": run.ingest.duplicate_ids_dropped,
        "corpus_documents": run.corpus.documents,
        "corpus_rows_rejected": run.corpus.rejected,
        "judged_only": run.judged_only,
        "judged_share": {"metric": run.judged_metric, "mean": run.judged_share},
        "judgments": judged.judgments,
        "judgment_lines_read": judged.read,
        "judgment_lines_quarantined": judged.quarantined,
        "judgments_superseded": judged.superseded,
        "judged_queries": run.judged_queries.judged,
        "judged_queries_without_trace": run.judged_queries.without_trace,
        "judgment_problems": run.judgment_join.problems() if run.judgment_join else [],
        "empty_results": run.traces.empty,
        "unknown_fields": dict(run.ingest.unknown_fields),
        **(trec.counts() if trec is not None else {}),
        **({"phoenix_labels": _phoenix_counts(run)} if run.phoenix_labels is not None else {}),
        "means": run.means(),
        "means_over": run.means_over(),
        **({"by": {"columns": list(by), "groups": _groups(run, by)}} if by else {}),
        "deprecated_keys": dict(DEPRECATED_KEYS),
    }


def _groups(run: EvaluationRun, by: Sequence[str]) -> list[dict[str, object]]:
    return group_means(run.per_query, by, [metric.name for metric in run.metrics])


def _unknown_fields(run: EvaluationRun) -> list[str]:
    from retrieval_pipeline.ingest.files import TRACE_FIELDS
    from retrieval_pipeline.records import unknown_field_lines

    return unknown_field_lines(run.ingest.unknown_fields, TRACE_FIELDS)


def _judged_text(run: EvaluationRun) -> str:
    """The list-level coverage beside the annotation coverage, and how the lists were scored."""
    k = run.judged_metric.partition("@")[2]
    share = "-" if run.judged_share is None else f"{run.judged_share:.1%}"
    lists = (
        "scored on condensed lists (unjudged documents removed)"
        if run.judged_only
        else "unjudged documents count as non-relevant"
    )
    return (
        f"Judged share of the top {k} ({run.judged_metric}, mean over annotated traces): "
        f"{share}; {lists}."
    )


def _over_words(values: int, annotated: int) -> str:
    """What a mean is taken over: the count of its values, and the annotated traces left out."""
    words = f"{values} annotated traces"
    missing = annotated - values
    if missing > 0:
        words += f" ({missing} more annotated without a value: it could not be computed)"
    return words


def _phoenix_counts(run: EvaluationRun) -> dict[str, object]:
    """What a Phoenix day's document annotations gave, as data (`LabelTally`)."""
    tally = run.phoenix_labels
    assert tally is not None
    return {
        "labels": dict(sorted(tally.labels.items())),
        "spans_labelled": tally.spans_labelled,
        "spans_with_own_labels": tally.spans_with_own_labels,
        "annotations_refused": tally.quarantined,
        "annotations_skipped": tally.skipped,
    }


def summary_text(
    run: EvaluationRun,
    trec: TrecInput | None = None,
    by: Sequence[str] = (),
    quarantine: Path | None = None,
) -> str:
    ingest, traces, labels = run.ingest, run.traces, run.labels
    coverage = traces.annotated / traces.traces if traces.traces else 0.0
    lines = [trec.words()] if trec is not None else []
    lines += [
        records_line(run),
        *(line[0].upper() + line[1:] for line in _unknown_fields(run)),
        f"Annotated traces: {traces.annotated} of {traces.traces} ({coverage:.1%}); "
        f"{traces.unannotated} unannotated (not scored), {traces.no_relevant} with no relevant "
        "document (scored 0).",
        _judged_text(run),
        f"Labels: {labels.labels}, of which {labels.stale} stale and dropped "
        f"({labels.traces_with_stale} traces); repeated retrieved ids dropped: "
        f"{ingest.duplicate_ids_dropped}.",
    ]
    if run.phoenix_labels is not None:
        lines.append(f"Phoenix annotations: {run.phoenix_labels.summary()}.")
    if run.judgments.files:
        lines += [
            f"Judgments: {run.judgments.words()}.",
            f"Labelled by their own labels: {traces.by_own_labels} traces; by the judgments: "
            f"{traces.by_judgments}; judged queries with no trace: "
            f"{run.judged_queries.without_trace} of {run.judged_queries.judged}.",
        ]
        if run.judgment_join is not None:
            lines += run.judgment_join.problems()
    lines += ["", f"{'metric':<16}{'mean':>10}  over"]
    over = run.means_over()
    for name, mean in run.means().items():
        shown = "-" if mean is None else f"{mean:.4f}"
        lines.append(f"{name:<16}{shown:>10}  {_over_words(over[name], traces.annotated)}")
    if by:
        names = [metric.name for metric in run.metrics]
        lines += ["", f"Means by {', '.join(by)}:", group_table(_groups(run, by), by, names)]
    left_out = ingest.quarantined + run.judgments.quarantined  # records, then judgment lines
    if left_out:
        lines += ["", quarantine_header(left_out, quarantine)]
        for row in run.quarantined.slice(0, SHOWN).to_pylist():
            lines.append(f"  {row['source_file']}:{row['source_line']}: {row['reason']}")
    if run.corpus.rejected:
        lines += [
            "",
            f"Corpus rows that could not be read: {run.corpus.rejected}; their documents are"
            " left out, so their labels count as stale (first 5):",
        ]
        lines += [f"  {reject}" for reject in run.corpus.first_rejects]
    return "\n".join(lines)
