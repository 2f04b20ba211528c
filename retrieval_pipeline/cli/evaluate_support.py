"""What `evaluate` checks before any work and prints beside its summary: output paths that can be
written, the files a directory held that are not trace files, the quarantine's header, and the
means per group (`--by segment,variant`).

Every problem is one line (a `click.ClickException`), raised before a record is read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from retrieval_pipeline.cli.errors import input_errors
from retrieval_pipeline.text import finite, number, printable

if TYPE_CHECKING:
    import pandas as pd

    from retrieval_pipeline.ingest.files import TraceFile
    from retrieval_pipeline.warehouse.evaluation import EvaluationRun

# The columns `--by` may group on, as the per-trace table names them.
GROUP_COLUMNS = ("segment", "variant")
SHOWN = 5  # skipped files and quarantined records listed by name


def check_output(option: str, path: Path) -> None:
    """`path` can be written as `option`'s file: a known format, in an existing folder where a
    file can be created, and not itself a folder; ClickException in one line otherwise."""
    from retrieval_pipeline.reports.per_query import output_format

    try:
        output_format(path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    where = f"{option} {path}"
    if path.is_dir():
        raise click.ClickException(f"{where}: is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        for ancestor in (folder, *folder.parents):
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise click.ClickException(f"{where}: {ancestor} is a file, not a folder")
                break
        raise click.ClickException(f"{where}: the folder {folder} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise click.ClickException(f"{where}: cannot write there ({exc.strerror})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise click.ClickException(f"{where}: the file exists and cannot be replaced")


def check_outputs(options: dict[str, Path | None]) -> None:
    """`check_output` for each given option, and no file given twice."""
    given = {option: path for option, path in options.items() if path is not None}
    for option, path in given.items():
        check_output(option, path)
    seen: dict[Path, str] = {}
    for option, path in given.items():
        key = path.absolute()
        if key in seen:
            raise click.ClickException(f"{seen[key]} and {option} name the same file {path}")
        seen[key] = option


def trace_files(paths: Sequence[Path | str]) -> list[TraceFile]:
    """The trace files under `paths`, the others told on standard error (count, first few);
    ClickException when there is none to read. (ingest.files loads pyarrow: imported here, so
    that the command line starts without it.)"""
    from retrieval_pipeline.ingest.files import JSONL_SUFFIXES, PARQUET_SUFFIXES, survey

    with input_errors():  # a name that is no trace file, or a store that cannot be listed
        found, skipped = survey(paths)
    if skipped:
        names = ", ".join(printable(p) for p in skipped[:SHOWN])
        more = f" and {len(skipped) - SHOWN} more" if len(skipped) > SHOWN else ""
        click.echo(
            f"skipped {len(skipped)} file(s) that are not trace files by their name: {names}{more}",
            err=True,
        )
    if not found:
        where = ", ".join(printable(p) for p in paths)
        kinds = ", ".join(JSONL_SUFFIXES + PARQUET_SUFFIXES)
        raise click.ClickException(f"no trace files ({kinds}) in {where}: nothing to score")
    return found


def quarantine_header(count: int, written_to: Path | None) -> str:
    """The line above the first quarantined records: how many are not shown, and where all go."""
    if count <= SHOWN:
        header = f"Quarantined ({count})"
    else:
        header = f"Quarantined (first {SHOWN} of {count}; {count - SHOWN} more"
        if written_to is None:
            header += ": add --quarantine FILE (.jsonl, .csv or .parquet) to keep them all)"
        else:
            header += ")"
    if written_to is not None:
        header += f"; all {count} written to {written_to}"
    return header + ":"


def parse_by(text: str | None) -> tuple[str, ...]:
    """`--by segment,variant` -> the group columns, in the order given."""
    if text is None:
        return ()
    columns = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [c for c in columns if c not in GROUP_COLUMNS]
    if unknown or not columns:
        raise click.BadParameter(
            f"expected a comma-separated list of {', '.join(GROUP_COLUMNS)}, got {text!r}",
            param_hint="--by",
        )
    return columns


def group_means(
    per_query: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]
) -> list[dict[str, object]]:
    """Per group of `by`: its values, annotated traces, and each metric's mean over them (None
    when none is annotated); groups sorted by their values."""
    groups: list[dict[str, object]] = []
    for key, rows in per_query.groupby(list(by), sort=True, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        annotated = rows[list(metrics)].notna().any(axis=1)
        means: dict[str, float | None] = {}
        for metric in metrics:
            column = rows.loc[annotated, metric].dropna()
            means[metric] = float(column.mean()) if len(column) else None
        groups.append(
            {
                **{column: str(value) for column, value in zip(by, values, strict=True)},
                "traces": len(rows),
                "annotated_traces": int(annotated.sum()),
                "means": means,
            }
        )
    return groups


def group_table(
    groups: Sequence[dict[str, object]], by: Sequence[str], metrics: Sequence[str]
) -> str:
    """`group_means` as an aligned table for the terminal."""
    header = [*by, "annotated", *metrics]
    rows = []
    for group in groups:
        means = group["means"]
        assert isinstance(means, dict)
        rows.append(
            [
                *(printable(group[column], 24) for column in by),
                f"{group['annotated_traces']} of {group['traces']}",
                *(_mean(means[metric]) for metric in metrics),
            ]
        )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for row in [header, *rows]:
        cells = [
            str(cell).ljust(width) if index < len(by) else str(cell).rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _mean(value: object) -> str:
    return "-" if finite(value, numbers_only=True) is None else number(value, digits=4)


def records_line(run: EvaluationRun) -> str:
    """The first line of every scoring command's summary, in the one vocabulary
    (docs/evaluate.md, "Words"): read = valid + quarantined + skipped, valid = scored
    (annotated) + unannotated (kept, not scored)."""
    ingest, traces = run.ingest, run.traces
    empty = f", {traces.empty} of them empty results, scored 0" if traces.empty else ""
    skipped = (
        f", {ingest.skipped} skipped (spans of other kinds or stages)" if ingest.skipped else ""
    )
    return (
        f"Read {ingest.read} records from {ingest.files} file(s): {ingest.valid} valid "
        f"({traces.annotated} scored{empty}; {traces.unannotated} unannotated, not scored), "
        f"{ingest.quarantined} quarantined{skipped}."
    )
