"""`retrieval-pipeline evaluate`: score trace files and print what happened to every record.

The warehouse (DuckDB, pandas) is imported when the command runs, not when the CLI starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retrieval_pipeline.cli.options import gain_option, metrics_option, relevance_level_option

if TYPE_CHECKING:
    from retrieval_pipeline.warehouse.evaluation import EvaluationRun


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
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
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Summary format on standard output.",
)
def evaluate(
    traces: tuple[Path, ...],
    corpus: Path | None,
    metrics: str,
    gain: str,
    relevance_level: float,
    output: Path | None,
    quarantine: Path | None,
    fmt: str,
) -> None:
    """Score TRACES (files or directories of .jsonl, .jsonl.gz, .parquet)."""
    import duckdb

    from retrieval_pipeline.ingest.files import TraceFileError
    from retrieval_pipeline.metrics import MetricConfigError
    from retrieval_pipeline.reports.per_query import output_format, write_table
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    try:
        for path in (output, quarantine):
            if path is not None:
                output_format(path)
        run = run_evaluation(list(traces), metrics, corpus, gain, relevance_level)
    except (MetricConfigError, TraceFileError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    except (duckdb.IOException, duckdb.OutOfMemoryException) as exc:
        # beyond its memory limit DuckDB spills to disk: a full disk, or no room left at all
        raise click.ClickException(" ".join(str(exc).split())) from None
    if output is not None:
        write_table(run.per_query, output)
    if quarantine is not None:
        write_table(run.quarantine, quarantine)
    click.echo(json.dumps(summary(run), indent=2) if fmt == "json" else summary_text(run))


def summary(run: EvaluationRun) -> dict[str, object]:
    """The counts and means a user is told, as data."""
    return {
        "records_read": run.ingest.read,
        "records_scored": run.ingest.valid,
        "records_quarantined": run.ingest.quarantined,
        "files": run.ingest.files,
        "traces_annotated": run.traces.annotated,
        "traces_unannotated": run.traces.unannotated,
        "traces_no_relevant": run.traces.no_relevant,
        "labels": run.labels.labels,
        "stale_labels_dropped": run.labels.stale,
        "duplicate_ids_dropped": run.ingest.duplicate_ids_dropped,
        "corpus_documents": run.corpus.documents,
        "corpus_rows_rejected": run.corpus.rejected,
        "means": run.means(),
    }


def summary_text(run: EvaluationRun) -> str:
    ingest, traces, labels = run.ingest, run.traces, run.labels
    coverage = traces.annotated / traces.traces if traces.traces else 0.0
    lines = [
        f"Read {ingest.read} records from {ingest.files} file(s): {ingest.valid} scored, "
        f"{ingest.quarantined} quarantined.",
        f"Annotated traces: {traces.annotated} of {traces.traces} ({coverage:.1%}); "
        f"{traces.unannotated} unannotated (not scored), {traces.no_relevant} with no relevant "
        "document (scored 0).",
        f"Labels: {labels.labels}, of which {labels.stale} stale and dropped "
        f"({labels.traces_with_stale} traces); repeated retrieved ids dropped: "
        f"{ingest.duplicate_ids_dropped}.",
        "",
        f"{'metric':<16}{'mean':>10}  over",
    ]
    for name, mean in run.means().items():
        shown = "-" if mean is None else f"{mean:.4f}"
        lines.append(f"{name:<16}{shown:>10}  {traces.annotated} annotated traces")
    if ingest.quarantined:
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
