"""The output files of `evaluate`, per query and quarantined: a table as Parquet, CSV or JSON
lines, chosen by the file's extension.

CSV is opened by spreadsheets, which run a cell that starts with `=`, `+`, `-` or `@` (or a tab or
carriage return before one) as a formula: a trace's segment `=cmd|' /C calc'!A0` would be code.
In CSV such a text cell is written with a `'` before it, which a spreadsheet shows as text (the
OWASP advice); numbers are written as they are. Parquet and JSON lines keep every value as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:  # loaded where a CSV or JSON lines file is written (pandas_deferred)
    import pandas as pd

# What a spreadsheet reads as the start of a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """`value` as a CSV cell a spreadsheet will not run: text that starts like a formula gets a
    `'` before it; anything else is returned as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text cell made `csv_safe` (numbers untouched)."""
    import pandas as pd

    safe = frame.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):
            safe[column] = safe[column].map(csv_safe)
    return safe


def write_table(table: pa.Table, path: Path) -> None:
    """Write `table` as Parquet, CSV or JSON lines, chosen by the file's extension; pandas writes
    the text formats, and is loaded only for them."""
    suffix = output_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        pq.write_table(table, path)
        return
    frame = table.to_pandas()
    if suffix == ".csv":
        _csv_frame(frame).to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)


def write_batches(batches: pa.RecordBatchReader, path: Path) -> int:
    """Write a stream of record batches to one file as `write_table` writes a frame, a batch at a
    time, so that memory stays one batch whatever the rows; return the rows written."""
    suffix = output_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    if suffix == ".parquet":
        with pq.ParquetWriter(path, batches.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        return rows
    with path.open("w", encoding="utf-8", newline="") as out:
        for batch in batches:
            frame = batch.to_pandas()
            if suffix == ".csv":
                _csv_frame(frame).to_csv(out, index=False, header=rows == 0)
            elif len(frame):
                frame.to_json(out, orient="records", lines=True, force_ascii=False)
            rows += batch.num_rows
        if suffix == ".csv" and rows == 0:
            import pandas as pd

            pd.DataFrame(columns=batches.schema.names).to_csv(out, index=False)
    return rows


OUTPUT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def output_format(path: Path) -> str:
    """The output format of `path`, its extension; ValueError naming the ones known."""
    suffix = path.suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise ValueError(
            f"{path}: unknown output format {suffix or '(none)'}; use {', '.join(OUTPUT_SUFFIXES)}"
        )
    return suffix
