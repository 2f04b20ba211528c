"""The corpus snapshot file (Parquet or CSV of `doc_id`, `added_at`, `deleted_at`): its rows with
their line numbers, and the fingerprint that tells one version of the file from the next."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.files import TraceFileError


def corpus_fingerprint(path: Path) -> dict[str, object]:
    """What tells a corpus snapshot file from its next version without reading it, as make and
    rsync do: its path, size and times (sql/stg_corpus_kept.sql compares them)."""
    try:
        found = path.stat()
    except FileNotFoundError as exc:
        raise TraceFileError(f"{path}: no such corpus file") from exc
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read the corpus snapshot ({exc})") from exc
    return {
        "source_file": str(path.absolute()),
        "size_bytes": found.st_size,
        "modified_ns": found.st_mtime_ns,
        "changed_ns": found.st_ctime_ns,
    }


def corpus_table(path: Path) -> pa.Table:
    """Read a corpus snapshot (Parquet or CSV with `doc_id`, optional added_at, deleted_at), each
    row with its `source_line`: the CSV line (the header is line 1) or the Parquet row (from 1)."""
    if not path.is_file():
        raise TraceFileError(f"{path}: no such corpus file")
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            table = pq.read_table(path)
        elif name.endswith((".csv", ".csv.gz")):
            import pyarrow.csv as pacsv

            table = pacsv.read_csv(
                path,
                # a blank line is a row (of nulls), so that every row's number is its line's
                parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
                convert_options=pacsv.ConvertOptions(
                    column_types={"doc_id": pa.string()}, strings_can_be_null=True
                ),
            )
        else:
            raise TraceFileError(f"{path}: a corpus snapshot must be .parquet or .csv")
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{path}: cannot read the corpus snapshot ({exc})") from exc
    if "doc_id" not in table.column_names:
        raise TraceFileError(f"{path}: the corpus snapshot has no doc_id column")
    keep = [c for c in ("doc_id", "added_at", "deleted_at") if c in table.column_names]
    table = table.select(keep)
    first_line = 1 if name.endswith(".parquet") else 2
    lines = np.arange(first_line, first_line + table.num_rows, dtype=np.int64)
    table = table.append_column("source_line", pa.array(lines))
    return table.set_column(0, "doc_id", table.column("doc_id").cast(pa.string()))
