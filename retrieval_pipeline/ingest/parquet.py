"""Parquet trace files (and Arrow rows) as raw records: streamed a piece at a time, with score
columns that DuckDB cannot read as maps turned into JSON objects.

What a file holds must not crash ingestion without naming the file (issue 27): a column name given
twice is refused in words; a column of an Arrow type DuckDB cannot read (half floats, 256-bit
decimals) is left unread when the pipeline does not use it, and refused in words when it does;
text fields stored as binary are read as UTF-8, and a value that is not UTF-8 gives its row a
reason, so that the row is quarantined like a JSON line with invalid UTF-8."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.files import (
    REQUIRED_FIELDS,
    TRACE_FIELDS,
    TraceFileError,
    source_name,
)
from retrieval_pipeline.ingest.filesystems import Location, StoreError, open_file

# The fields that hold text (or lists of it): a binary column there is read as UTF-8.
TEXT_FIELDS: tuple[str, ...] = ("trace_id", "query_id", "timestamp", "retrieved_ids")
TEXT_FIELDS += ("relevant_ids", "segment", "variant", "label_source")


def parquet_table(path: Path) -> pa.Table:
    """Read a Parquet trace file, refusing one without the required columns."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    _require_columns(path, table.column_names)
    return table


def _require_columns(path: Path | str, names: Sequence[str]) -> None:
    missing = [name for name in REQUIRED_FIELDS if name not in names]
    if missing:
        raise TraceFileError(
            f"{path}: Parquet file lacks required column(s) {', '.join(missing)}; "
            f"a trace needs {', '.join(REQUIRED_FIELDS)}"
        )


# Bytes of a Parquet file read at a time (pyarrow's buffered stream).
PARQUET_READ_BUFFER = 1 << 20


def parquet_pieces(path: Path | Location, rows_per_piece: int) -> Iterator[tuple[int, pa.Table]]:
    """A Parquet trace file a piece at a time: (number of the piece's first row, rows).

    Read as a stream, not pre-buffered: pyarrow's pre-buffering read row groups ahead and kept
    their bytes until the file was closed, so the process grew with the file (bench/README.md);
    streamed, its buffers stay at a few row groups."""
    name = source_name(path)
    try:
        source = open_file(path) if isinstance(path, Location) else path
        parquet = pq.ParquetFile(source, pre_buffer=False, buffer_size=PARQUET_READ_BUFFER)
    except StoreError as exc:
        raise TraceFileError(str(exc)) from exc
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{name}: not a readable Parquet file ({exc})") from exc
    try:
        columns = readable_columns(name, parquet.schema_arrow)
        _require_columns(name, parquet.schema_arrow.names)
        first_row = 1
        batches = parquet.iter_batches(batch_size=rows_per_piece, columns=columns)
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as exc:
                raise TraceFileError(f"{name}: not a readable Parquet file ({exc})") from exc
            if batch is None:
                return
            yield first_row, pa.Table.from_batches([batch])
            first_row += batch.num_rows
    finally:
        if isinstance(source, pa.NativeFile):  # a stream this function opened
            source.close()


def _unreadable(kind: pa.DataType) -> bool:
    """Whether DuckDB cannot read a column of Arrow type `kind` (anywhere inside it)."""
    if pa.types.is_float16(kind) or pa.types.is_decimal256(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _unreadable(kind.value_type)
    return any(_unreadable(kind.field(i).type) for i in range(kind.num_fields))


def readable_columns(path: Path | str, schema: pa.Schema) -> list[str]:
    """The columns to read: every column but those of a type DuckDB cannot read, which the
    pipeline does not use; TraceFileError naming the file and column when it uses one, or when a
    column name is given twice."""
    repeated = sorted({name for name in schema.names if schema.names.count(name) > 1})
    if repeated:
        raise TraceFileError(
            f"{path}: column name(s) {', '.join(map(repr, repeated))} given more than once; "
            "each column must have its own name"
        )
    for field in schema:
        if field.name in TRACE_FIELDS and _unreadable(field.type):
            raise TraceFileError(
                f"{path}: column {field.name} has the Arrow type {field.type}, which cannot be "
                "read (half floats and 256-bit decimals are not supported; write it as float, "
                "double or a decimal of at most 38 digits)"
            )
    return [field.name for field in schema if not _unreadable(field.type)]


def _binary(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary_view(kind)
    )


def _utf8(value: bytes, where: str) -> tuple[str, str | None]:
    try:
        return value.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        problem = f"invalid UTF-8 at byte {exc.start} of {where}"
        return value.decode("utf-8", errors="replace"), problem


def binary_text_as_utf8(rows: pa.Table) -> tuple[pa.Table, list[str | None] | None]:
    """`rows` with the text fields stored as binary (or lists of binary) read as UTF-8 strings,
    and each row's first problem (None: none; the list is None when no row has one). DuckDB
    would write a byte that is not UTF-8 as the text `\\xFF`, an id nobody sent."""
    errors: list[str | None] = [None] * rows.num_rows
    found = False
    for name in TEXT_FIELDS:
        if name not in rows.column_names:
            continue
        kind = rows.schema.field(name).type
        is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
        if not (_binary(kind) or (is_list and _binary(kind.value_type))):
            continue
        texts: list[object] = []
        for row, value in enumerate(rows.column(name).to_pylist()):
            if value is None:
                texts.append(None)
                continue
            items = value if is_list else [value]
            decoded = []
            for position, item in enumerate(items):
                where = f"{name}[{position}]" if is_list else name
                text, problem = (None, None) if item is None else _utf8(item, where)
                decoded.append(text)
                if problem is not None and errors[row] is None:
                    errors[row], found = problem, True
            texts.append(decoded if is_list else decoded[0])
        column = pa.array(texts, pa.list_(pa.string()) if is_list else pa.string())
        rows = rows.set_column(rows.column_names.index(name), name, column)
    return rows, errors if found else None


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
