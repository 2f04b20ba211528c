"""`retrieval-pipeline evaluate`: score trace files and print what happened to every record.

The warehouse (DuckDB, pandas) is imported when the command runs, not when the CLI starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retrieval_pipeline.cli.options import gain_option, metrics_option, relevance_level_option

if TYPE_CHECKING:
    from retrieval_pipeline.cli.trec import TrecInput
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
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["table", "json", "trec"]),
    default="table",
    show_default=True,
    help="Standard output: a summary (table, json), or trec_eval's lines per query and for "
    "all (trec; linear gain unless --gain says otherwise).",
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
    output: Path | None,
    quarantine: Path | None,
    fmt: str,
) -> None:
    """Score TRACES (files, folders or s3:// URLs of .jsonl, .jsonl.gz, .parquet), or a TREC
    run (--trec-run)."""
    import duckdb

    from retrieval_pipeline.cli.trec import read_run, trec_output
    from retrieval_pipeline.ingest.files import TraceFileError
    from retrieval_pipeline.metrics import MetricConfigError
    from retrieval_pipeline.reports.per_query import output_format, write_table
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    if bool(traces) == bool(trec_run):
        raise click.UsageError("give trace files (TRACES) or --trec-run RUN, one of the two")
    if fmt == "trec" and ctx.get_parameter_source("gain") is click.core.ParameterSource.DEFAULT:
        gain = "linear"  # trec_eval's nDCG
    run_input: TrecInput | None = None
    try:
        for path in (output, quarantine):
            if path is not None:
                output_format(path)
        if trec_run is not None:
            run_input = read_run(trec_run)
        source = run_input.records if run_input is not None else list(traces)
        run = run_evaluation(
            source, metrics, corpus, gain, relevance_level, judgments=list(judgments)
        )
        if run_input is not None:
            run = run_input.with_run_lines(run)
        lines = trec_output(run, run_input, gain) if fmt == "trec" else None
    except (MetricConfigError, TraceFileError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    except (duckdb.IOException, duckdb.OutOfMemoryException) as exc:
        # beyond its memory limit DuckDB spills to disk: a full disk, or no room left at all
        raise click.ClickException(" ".join(str(exc).split())) from None
    if output is not None:
        write_table(run.per_query, output)
    if quarantine is not None:
        write_table(run.quarantine, quarantine)
    if lines is not None:
        click.echo("\n".join(lines))
    elif fmt == "json":
        click.echo(json.dumps(summary(run, run_input), indent=2))
    else:
        click.echo(summary_text(run, run_input))


def summary(run: EvaluationRun, trec: TrecInput | None = None) -> dict[str, object]:
    """The counts and means a user is told, as data."""
    judged = run.judgments
    return {
        "records_read": run.ingest.read,
        "records_scored": run.ingest.valid,
        "records_quarantined": run.ingest.quarantined,
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
        "judgments": judged.judgments,
        "judgment_lines_read": judged.read,
        "judgment_lines_quarantined": judged.quarantined,
        "judgments_superseded": judged.superseded,
        "judged_queries": run.judged_queries.judged,
        "judged_queries_without_trace": run.judged_queries.without_trace,
        **(trec.counts() if trec is not None else {}),
        "means": run.means(),
    }


def summary_text(run: EvaluationRun, trec: TrecInput | None = None) -> str:
    ingest, traces, labels = run.ingest, run.traces, run.labels
    coverage = traces.annotated / traces.traces if traces.traces else 0.0
    lines = [trec.words()] if trec is not None else []
    lines += [
        f"Read {ingest.read} records from {ingest.files} file(s): {ingest.valid} scored, "
        f"{ingest.quarantined} quarantined.",
        f"Annotated traces: {traces.annotated} of {traces.traces} ({coverage:.1%}); "
        f"{traces.unannotated} unannotated (not scored), {traces.no_relevant} with no relevant "
        "document (scored 0).",
        f"Labels: {labels.labels}, of which {labels.stale} stale and dropped "
        f"({labels.traces_with_stale} traces); repeated retrieved ids dropped: "
        f"{ingest.duplicate_ids_dropped}.",
    ]
    if run.judgments.files:
        lines += [
            f"Judgments: {run.judgments.words()}.",
            f"Labelled by their own labels: {traces.by_own_labels} traces; by the judgments: "
            f"{traces.by_judgments}; judged queries with no trace: "
            f"{run.judged_queries.without_trace} of {run.judged_queries.judged}.",
        ]
    lines += ["", f"{'metric':<16}{'mean':>10}  over"]
    for name, mean in run.means().items():
        shown = "-" if mean is None else f"{mean:.4f}"
        lines.append(f"{name:<16}{shown:>10}  {traces.annotated} annotated traces")
    if len(run.quarantine):
        lines += ["", "Quarantined (first 5):"]
        for row in run.quarantine.head(5).itertuples():
            lines.append(f"  {row.source_file}:{row.source_line}: {row.reason}")
    if run.corpus.rejected:
        lines += [
            "",
            f"Corpus rows that could not be read: {run.corpus.rejected}; their documents are"
            " left out, so their labels count as stale (first 5):",
        ]
        lines += [f"  {reject}" for reject in run.corpus.first_rejects]
    return "\n".join(lines)
