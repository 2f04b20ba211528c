"""The validation lanes' statements: a piece of raw records becomes the rows of
sql/stg_trace_records.sql, valid traces and quarantined records with their reasons.

Two lanes give the same rows (tests/warehouse/test_validation_lanes.py): the plain lane reads
fields already typed (a JSON-lines piece typed by pyarrow's strict JSON reader, or Parquet and
Arrow columns of the plain types, `ingest.lanes`), the JSON lane (sql/stg_trace_fields.sql) reads
any record and names what is wrong with it. Repeated retrieved ids are then dropped
(`ingest.screen.keep_first_occurrences`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import TypeAlias

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from retrieval_pipeline.ingest.files import RECORD_FIELDS, REQUIRED_FIELDS
from retrieval_pipeline.ingest.lanes import (
    NOT_PLAIN,
    PLAIN_FIELDS,
    is_map_of_grades,
    is_plain_type,
    other_types,
)
from retrieval_pipeline.ingest.parquet import (
    binary_text_as_utf8,
    maps_as_json,
    readable_columns,
    struct_scores_as_json,
)
from retrieval_pipeline.ingest.pieces import (
    RAW_SCHEMA,
    ROW_NUMBER_COLUMNS,
    RawPiece,
    numbered_rows,
)
from retrieval_pipeline.ingest.screen import keep_first_occurrences
from retrieval_pipeline.pandas_deferred import numbers
from retrieval_pipeline.warehouse.judgments import with_judged_labels
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql

# Rows of one file: its rows, its name, its place in the ingestion and the number of its first row.
RowsOfFile: TypeAlias = tuple[pa.Table, str, int, int]


def rows_as_raw(
    conn: duckdb.DuckDBPyConnection,
    rows: pa.Table,
    source_file: str,
    file_order: int,
    first_row: int = 1,
) -> RawPiece:
    """Parquet or Arrow rows (numbered from `first_row`) as raw records, so one set of rules
    validates every input. Where the columns are typed as the plain lane reads them
    (`_typed_fields`) the rows' JSON text is left to be written where it is read (a quarantined
    record, the JSON lane): writing it for every row was a large share of a Parquet file's
    ingestion (bench/README.md)."""
    return rows_of_files_as_raw(conn, [(rows, source_file, file_order, first_row)])


def rows_of_files_as_raw(conn: duckdb.DuckDBPyConnection, parts: Sequence[RowsOfFile]) -> RawPiece:
    """`rows_as_raw` of the rows of several files of one schema at once, each row keeping its
    own file and row number: many small Parquet files cost one set of statements, not one
    each. Columns of a type DuckDB cannot read are left out (`readable_columns`), and text stored
    as binary is read as UTF-8, a row that is not quarantined with its reason."""
    rows = pa.concat_tables(
        [
            struct_scores_as_json(part.select(readable_columns(source_file, part.schema)))
            for part, source_file, _, _ in parts
        ]
    )
    if len(parts) > 1:  # one chunk per column: DuckDB scans a chunk as a vector of its own
        rows = rows.combine_chunks()
    rows, read_errors = binary_text_as_utf8(rows)
    numbered = _numbered(rows, parts, read_errors)
    try:
        # a row that cannot be read goes through the JSON lane, which names its reason
        typed = None if read_errors else _typed_fields(conn, rows)
    except duckdb.InvalidInputException as exc:
        if "duplicate key" not in str(exc):
            raise
        typed = None  # a map that repeats a key: read as text below
    if typed is not None and not any(pa.types.is_map(kind) for kind in other_types(rows)):
        return RawPiece(_records_without_text(numbered), typed=typed, rows=numbered)
    try:
        raw = _rows_as_json(conn, numbered)
    except duckdb.InvalidInputException as exc:
        if "duplicate key" not in str(exc):
            raise
        return RawPiece(_rows_as_json(conn, _numbered(maps_as_json(rows), parts, read_errors)))
    return RawPiece(raw, typed=typed)


def _numbered(
    rows: pa.Table, parts: Sequence[RowsOfFile], read_errors: list[str | None] | None
) -> pa.Table:
    """`rows` (the parts' rows, in order) numbered by the file each came from, with each row's
    read error (`numbered_rows`)."""
    pieces, start = [], 0
    for part, source_file, file_order, first_row in parts:
        count = part.num_rows
        errors = None if read_errors is None else read_errors[start : start + count]
        pieces.append(
            numbered_rows(rows.slice(start, count), source_file, file_order, first_row, errors)
        )
        start += count
    return pa.concat_tables(pieces).combine_chunks() if len(pieces) > 1 else pieces[0]


def _rows_as_json(conn: duckdb.DuckDBPyConnection, numbered: pa.Table) -> pa.Table:
    """Every row of `numbered` (numbered_rows) as a raw record with its JSON text."""
    with registered(conn, "raw_rows", numbered):
        raw = conn.sql(load_sql("stg_rows_as_json")).to_arrow_table()
    return raw.cast(RAW_SCHEMA)


def _records_without_text(numbered: pa.Table) -> pa.Table:
    """The raw records of `numbered`'s rows with a null raw_record, for a piece whose text is
    written where it is read (`raw_records`)."""
    count = numbered.num_rows
    return pa.table(
        [
            numbered.column("__source_file"),
            numbered.column("__file_order"),
            numbered.column("__source_row"),
            pa.nulls(count, pa.string()),
            pa.nulls(count, pa.string()),
        ],
        schema=RAW_SCHEMA,
    )


@contextmanager
def raw_records(conn: duckdb.DuckDBPyConnection, piece: RawPiece) -> Iterator[None]:
    """The piece's raw records as `raw_records` for the block: its table, or, for rows whose text
    is written where it is read, a view of them (sql/stg_rows_as_json.sql). DuckDB then writes
    the text of the rows a statement reads: none for a plain piece without a repeated trace_id
    (an inner join with nothing on its other side reads none)."""
    if piece.rows is None:
        with registered(conn, "raw_records", _in_scan_batches(piece.records)):
            yield
        return
    with registered(conn, "raw_rows", _in_scan_batches(piece.rows)):
        conn.execute("create or replace temp view raw_records as " + load_sql("stg_rows_as_json"))
        try:
            yield
        finally:
            conn.execute("drop view raw_records")


def _typed_fields(conn: duckdb.DuckDBPyConnection, rows: pa.Table) -> pa.Table | None:
    """The fields of Parquet or Arrow rows as the plain lane reads them (PLAIN_FIELDS and
    scores_json), without parsing their JSON text: None unless every column is already of a type
    the JSON text of which the plain lane would read back as the same value (ids as strings and
    lists of strings, the timestamp as a string or a timestamp, relevance_scores as a map of
    numbers). A column of another type (integer ids, say) leaves the rows to the JSON lane, which
    reads and names what it finds."""
    columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    for field in PLAIN_FIELDS:
        if field.name not in rows.column_names:
            if field.name in REQUIRED_FIELDS:
                return None
            columns[field.name] = pa.nulls(rows.num_rows, field.type)
            continue
        column = rows.column(field.name)
        optional_nulls = pa.types.is_null(column.type) and field.name not in REQUIRED_FIELDS
        if field.name == "timestamp" and pa.types.is_timestamp(column.type):
            columns[field.name] = column  # as text below, as to_json writes it
        elif optional_nulls or is_plain_type(column.type, field.type):
            columns[field.name] = column.cast(field.type)
        else:
            return None
    scores = (
        rows.column("relevance_scores")
        if "relevance_scores" in rows.column_names
        else pa.nulls(rows.num_rows, pa.map_(pa.string(), pa.float64()))
    )
    if not (pa.types.is_null(scores.type) or is_map_of_grades(scores.type)):
        return None
    # the text of the timestamp and of the grades, each as the record's JSON text holds it
    parts = pa.table({"timestamp": columns["timestamp"], "relevance_scores": scores})
    with registered(conn, "typed_rows", parts):
        texts = conn.sql(load_sql("stg_typed_rows_as_text")).to_arrow_table()
    columns["timestamp"] = texts.column("timestamp")
    fields = pa.table(columns, schema=PLAIN_FIELDS)
    return fields.append_column("scores_json", texts.column("scores_json"))


# Rows of one Arrow record batch handed to DuckDB: it scans an Arrow table a batch per thread, so
# a piece in one batch would be validated on one core.
SCAN_BATCH_ROWS = 8_192


def _in_scan_batches(table: pa.Table) -> pa.Table:
    return pa.Table.from_batches(table.to_batches(max_chunksize=SCAN_BATCH_ROWS), table.schema)


def valid_and_quarantined(staged: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows of `staged` (sql/stg_trace_records.sql) that passed validation, and the rest;
    the whole table, not a copy, where every row passed."""
    reasons = staged.column("reason")
    if reasons.null_count == staged.num_rows:
        return staged, staged.slice(0, 0)
    is_valid = pc.is_null(reasons)
    return staged.filter(is_valid), staged.filter(pc.invert(is_valid))


def stage_records(
    conn: duckdb.DuckDBPyConnection,
    piece: RawPiece,
    partition_date: date | None,
    keep_retrieved_ids: bool = True,
    judged: bool = False,
    unknown_fields: Counter[str] | None = None,
) -> pa.Table:
    """One piece of raw records validated (sql/stg_trace_records.sql), labelled from the
    judgments where a trace carries no labels of its own (`judged`: `judged_queries` exists,
    `warehouse.judgments`), repeats dropped (or every list emptied: `ingest_traces`). The records
    that carry each field a trace record does not have are added to `unknown_fields`.

    Its typed fields come from the plain lane (sql/stg_plain_trace_fields.sql) when every record
    is plainly valid, else from the JSON lane (sql/stg_trace_fields.sql), which reads any record
    and names what is wrong with it: both give the same rows for a plain piece."""
    with raw_records(conn, piece):
        one_object_per_line, unknown = _record_fields(conn, piece)
        if unknown_fields is not None:
            unknown_fields.update(unknown)
        staged = _plain_lane(conn, piece, partition_date, one_object_per_line)
        if staged is None:
            staged = _trace_records(conn, "stg_trace_fields", partition_date)
        assert staged is not None
    if judged:
        staged = with_judged_labels(conn, staged)
    return keep_first_occurrences(staged, keep_retrieved_ids)


def _record_fields(conn: duckdb.DuckDBPyConnection, piece: RawPiece) -> tuple[bool, Counter[str]]:
    """Whether every record of the piece (registered as `raw_records`) is one JSON object, and
    how many records carry each field a trace record does not have: from the columns of Parquet
    or Arrow rows (their JSON text is not written for this), else from the one parse of the
    records' text in sql/agg_record_fields.sql."""
    if piece.records.num_rows == 0 or piece.from_spans:
        return False, Counter()
    if piece.rows is not None:
        columns = set(piece.rows.column_names) - set(RECORD_FIELDS) - set(ROW_NUMBER_COLUMNS)
        rows = piece.rows.num_rows
        counts = {name: rows - piece.rows.column(name).null_count for name in columns}
        return False, Counter({name: n for name, n in counts.items() if n})
    row = conn.execute(load_sql("agg_record_fields"), {"known": list(RECORD_FIELDS)}).fetchone()
    assert row is not None
    return bool(row[0]), Counter(row[1] or {})


def _plain_lane(
    conn: duckdb.DuckDBPyConnection,
    piece: RawPiece,
    partition_date: date | None,
    one_object_per_line: bool,
) -> pa.Table | None:
    """The plain lane's rows of the piece (registered as `raw_records`); None when a record is
    not plain.

    The lists of retrieved ids are pyarrow's, attached to the statement's rows here: the
    statement reads them (labels' ranks, checks) but does not hand them back, which spares
    DuckDB copying every id into its Arrow result, a large share of its time (bench/README.md)."""
    plain = _plain_fields(piece, one_object_per_line)
    if plain is None:
        return None
    with _as_plain_records(conn, plain):
        staged = _trace_records(
            conn, "stg_plain_trace_fields", partition_date, without=["retrieved_ids"]
        )
    if staged is None:
        return None
    return _with_column_of(staged, plain, "retrieved_ids")


@contextmanager
def _as_plain_records(conn: duckdb.DuckDBPyConnection, fields: pa.Table) -> Iterator[None]:
    """`fields` (`_plain_fields`) as the `plain_records` that sql/stg_plain_trace_fields.sql
    reads: typed rows have their grades as text already, a JSON-lines piece's are taken from its
    lines (sql/stg_plain_scores_from_lines.sql)."""
    if "scores_json" in fields.column_names:
        with registered(conn, "plain_records", fields):
            yield
        return
    with registered(conn, "parsed_records", fields):
        conn.execute(
            "create or replace temp view plain_records as "
            + load_sql("stg_plain_scores_from_lines")
        )
        try:
            yield
        finally:
            conn.execute("drop view plain_records")


def record_keys(table: pa.Table) -> np.ndarray:
    """Each record's place in the ingestion: its file's order (0 when not given), then its line
    (or row)."""
    lines = numbers(table.column("source_line")).astype(np.int64)
    if "file_order" not in table.column_names:
        return lines
    return (numbers(table.column("file_order")).astype(np.int64) << 40) | lines


def _with_column_of(staged: pa.Table, fields: pa.Table, name: str) -> pa.Table:
    """`staged` in the order of `fields`, with its column `name`: one row each for the same
    records, matched by file order and line (ascending in `fields`, a piece of one file or of
    several joined in order: `ingest.pieces.coalesced`). DuckDB's parallel join does not keep
    the rows' order; putting them back moves the narrower table, and the column (100 ids a row)
    is shared, not copied."""
    lines = record_keys(fields)
    staged_lines = record_keys(staged)
    rows = np.searchsorted(lines, staged_lines).clip(0, max(len(lines) - 1, 0))
    order = np.argsort(rows)
    # each line of `fields` once: the rows are a permutation of them
    assert np.array_equal(lines[rows], staged_lines)
    assert np.array_equal(rows[order], np.arange(len(lines)))
    if not np.array_equal(order, np.arange(len(order))):
        staged = staged.take(pa.array(order))
    return staged.append_column(name, fields.column(name))


def _plain_fields(piece: RawPiece, one_object_per_line: bool) -> pa.Table | None:
    """The piece's records (registered as `raw_records`) as the plain lane's typed fields, with
    their file, line and text: the typed rows' own (`_typed_fields`), or a JSON-lines piece's
    text typed by pyarrow's strict JSON reader; None when the records are neither typed rows nor
    one JSON object per line of the types in PLAIN_FIELDS."""
    if piece.records.num_rows == 0:
        return None
    if piece.typed is not None:
        return _in_scan_batches(_with_raw_columns(piece.typed, piece.records))
    if piece.jsonl is None:
        return None
    # pyarrow's reader crashes on a JSON null between records, and reads two objects on one line
    # as two records: it is given only lines that are each one JSON object (`_record_fields`)
    if not one_object_per_line:
        return None
    try:
        typed = pj.read_json(
            pa.BufferReader(piece.jsonl),
            read_options=pj.ReadOptions(use_threads=len(piece.jsonl) > _JSON_BLOCK_BYTES),
            parse_options=pj.ParseOptions(
                explicit_schema=PLAIN_FIELDS, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid:
        return None
    if typed.num_rows != piece.records.num_rows:
        return None
    return _in_scan_batches(_with_raw_columns(typed, piece.records))


# pyarrow's JSON reader parses blocks of this size (its default) in parallel: a piece of one block
# is read on the calling thread, which spares a few hundred traces the start of its thread pool.
_JSON_BLOCK_BYTES = pj.ReadOptions().block_size


def _with_raw_columns(fields: pa.Table, records: pa.Table) -> pa.Table:
    """`fields` with each record's file, line and text, from `records` (the same rows)."""
    for name in ("source_file", "file_order", "source_line", "raw_record"):
        fields = fields.append_column(name, records.column(name))
    return fields


def _trace_records(
    conn: duckdb.DuckDBPyConnection,
    lane: str,
    partition_date: date | None,
    without: Sequence[str] = (),
) -> pa.Table | None:
    """sql/stg_trace_records.sql over the fields of `lane`, less the columns `without`; None
    when the plain lane finds a record that is not plain."""
    conn.execute("create or replace temp view trace_fields as " + load_sql(lane))
    try:
        rows = conn.sql(load_sql("stg_trace_records"), params={"partition_date": partition_date})
        if without:
            rows = rows.project(f"* exclude ({', '.join(without)})")
        return rows.to_arrow_table()
    except duckdb.InvalidInputException as exc:
        if NOT_PLAIN not in str(exc):
            raise
        return None
    finally:
        conn.execute("drop view trace_fields")
