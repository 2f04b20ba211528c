"""Parquet trace files (and Arrow rows) as raw records: streamed a piece at a time, with score
columns that DuckDB cannot read as maps turned into JSON objects."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.files import REQUIRED_FIELDS, TraceFileError


def parquet_table(path: Path) -> pa.Table:
    """Read a Parquet trace file, refusing one without the required columns."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    _require_columns(path, table.column_names)
    return table


def _require_columns(path: Path, names: Sequence[str]) -> None:
    missing = [name for name in REQUIRED_FIELDS if name not in names]
    if missing:
        raise TraceFileError(
            f"{path}: Parquet file lacks required column(s) {', '.join(missing)}; "
            f"a trace needs {', '.join(REQUIRED_FIELDS)}"
        )


# Bytes of a Parquet file read at a time (pyarrow's buffered stream).
PARQUET_READ_BUFFER = 1 << 20


def parquet_pieces(path: Path, rows_per_piece: int) -> Iterator[tuple[int, pa.Table]]:
    """A Parquet trace file a piece at a time: (number of the piece's first row, rows).

    Read as a stream, not pre-buffered: pyarrow's pre-buffering read row groups ahead and kept
    their bytes until the file was closed, so the process grew with the file (bench/README.md);
    streamed, its buffers stay at a few row groups."""
    try:
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=PARQUET_READ_BUFFER)
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    _require_columns(path, parquet.schema_arrow.names)
    first_row = 1
    batches = parquet.iter_batches(batch_size=rows_per_piece)
    while True:
        try:
            batch = next(batches, None)
        except (OSError, pa.ArrowException) as exc:
            raise TraceFileError(f"{path}: not a readable Parquet file ({exc})") from exc
        if batch is None:
            return
        yield first_row, pa.Table.from_batches([batch])
        first_row += batch.num_rows


def _json_value(value: object) -> object:
    if isinstance(value, Decimal):
        return float(value)
    return str(value)


def _json_object(pairs: Iterable[tuple[object, object]]) -> str:
    """JSON object text of key/value pairs, in order and with repeats kept."""
    return (
        "{"
        + ",".join(
            json.dumps(str(key)) + ":" + json.dumps(value, default=_json_value)
            for key, value in pairs
        )
        + "}"
    )


def _as_json_column(table: pa.Table, name: str, texts: list[str | None]) -> pa.Table:
    index = table.column_names.index(name)
    return table.set_column(index, name, pa.array(texts, type=pa.json_(pa.string())))


def struct_scores_as_json(table: pa.Table) -> pa.Table:
    """A struct-typed `relevance_scores` (what pandas makes of a dict column) as JSON objects
    without the null fields: a struct column has every key in every row, null where the row
    does not grade that document. A map column is left as it is."""
    if "relevance_scores" not in table.column_names:
        return table
    column = table.column("relevance_scores")
    if not pa.types.is_struct(column.type):
        return table
    texts = [
        None if row is None else _json_object((k, v) for k, v in row.items() if v is not None)
        for row in column.to_pylist()
    ]
    return _as_json_column(table, "relevance_scores", texts)


def maps_as_json(table: pa.Table) -> pa.Table:
    """Every map column as JSON objects that keep repeated keys, for a file DuckDB cannot read
    as maps (it refuses an Arrow map with a repeated key): the validator then names the record
    and the key instead of the whole file failing."""
    for field in table.schema:
        if pa.types.is_map(field.type):
            texts = [
                None if row is None else _json_object(row)
                for row in table.column(field.name).to_pylist()
            ]
            table = _as_json_column(table, field.name, texts)
    return table
