"""Reading trace files into raw records: one row per JSON line or Parquet row, nothing dropped.

Only I/O-level problems are handled here (gzip, UTF-8, a BOM, blank lines, a file that is not JSON
lines or Parquet); what a record means is validated in DuckDB (`engine._stage_records`).
A damaged line becomes a raw record with a `read_error`, so it is quarantined with its file and
line like any other bad record; a file that cannot be read at all raises `TraceFileError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from isal import isal_zlib

# gzip is inflated by ISA-L: the same streams as zlib, in about half the time (bench/README.md).
GZIP_INFLATE: ModuleType = isal_zlib

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)
REQUIRED_FIELDS = ("trace_id", "query_id", "timestamp", "retrieved_ids")

# raw_record is the record's text. The rows of a clean piece (`_clean_jsonl_table`) share its
# bytes, newline included: each ends with its line's newline and any blank lines after it, which
# the SQL trims where it keeps the text (sql/stg_trace_records.sql).
RAW_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("file_order", pa.int32()),
        ("source_line", pa.int64()),
        ("raw_record", pa.string()),
        ("read_error", pa.string()),
    ]
)


class TraceFileError(ValueError):
    """A trace file (or path) that cannot be read at all."""


@dataclass(frozen=True)
class TraceFile:
    path: Path
    kind: str  # "jsonl" or "parquet"


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def discover(paths: Iterable[Path | str]) -> list[TraceFile]:
    """Expand files and directories (recursively) into trace files, in a stable order."""
    found: list[TraceFile] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                kind = _kind(child)
                if kind is not None:
                    found.append(TraceFile(child, kind))
        elif path.is_file():
            kind = _kind(path)
            if kind is None:
                raise TraceFileError(
                    f"{path}: not a trace file; expected one of "
                    f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}"
                )
            found.append(TraceFile(path, kind))
        else:
            raise TraceFileError(f"{path}: no such file or directory")
    return found


# Ingestion reads and validates a file in pieces of about this much text (about 40k traces of 100
# ids), so that its memory does not grow with the size of a day.
PIECE_BYTES = 64 * 2**20
_READ_BYTES = 8 * 2**20


@dataclass(frozen=True)
class JsonlPiece:
    """Whole lines of a JSON-lines file, decompressed: `data` starts at line `first_line` and ends
    with a newline, except in the file's last piece, which carries `stream_error` when a gzip
    stream ended or broke early (its last line was cut off)."""

    data: bytes
    first_line: int
    at_file_start: bool
    stream_error: str | None = None


def jsonl_pieces(path: Path, piece_bytes: int | None = None) -> Iterator[JsonlPiece]:
    """The file in pieces of whole lines; a gzip file is decompressed member by member, so that a
    truncated or corrupt tail keeps every line before it."""
    piece_bytes = piece_bytes or PIECE_BYTES
    gzipped = path.name.lower().endswith(".gz")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with handle:
        # An empty file holds no records; one cut inside the gzip header is a truncated stream.
        if gzipped and not b"\x1f\x8b".startswith(handle.read(2)):
            raise TraceFileError(f"{path}: not a gzip file (the name ends in .gz)")
        handle.seek(0)
        inflater = GZIP_INFLATE.decompressobj(wbits=31) if gzipped else None
        # blocks read since the last piece, joined once a piece's worth is there (appending each
        # block to one bytes object would copy the growing piece at every block)
        blocks: list[bytes] = []
        size = 0
        first_line, at_start, read_any, error = 1, True, False, None
        while error is None:
            try:
                block = handle.read(_READ_BYTES)
            except OSError as exc:
                raise TraceFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
            if not block:
                break
            read_any = True
            if inflater is not None:
                block, inflater, error = _inflate(block, inflater)
            blocks.append(block)
            size += len(block)
            if size < piece_bytes:
                continue
            # the last block with a newline: the piece ends there, and the blocks after it hold
            # the start of the next line only
            last = next((i for i in range(len(blocks) - 1, -1, -1) if b"\n" in blocks[i]), None)
            if last is None:
                continue
            cut = blocks[last].rfind(b"\n") + 1
            piece = b"".join([*blocks[:last], blocks[last][:cut]])  # the piece's one copy
            yield JsonlPiece(piece, first_line, at_start)
            first_line += piece.count(b"\n")
            blocks, at_start = [blocks[last][cut:], *blocks[last + 1 :]], False
            size = sum(map(len, blocks))
        if error is None and inflater is not None and read_any and not inflater.eof:
            error = "the gzip stream is truncated; this record was cut off"
        rest = b"".join(blocks)
        if rest or error is not None or at_start:  # no empty piece after the last line
            yield JsonlPiece(rest, first_line, at_start, error)


def _inflate(block: bytes, inflater: Any) -> tuple[bytes, Any, str | None]:
    """Decompress one block of a gzip file, starting a new inflater at each member."""
    parts: list[bytes] = []  # joined once (a block is mostly one part, which joins without a copy)
    try:
        while block:
            if inflater.eof:  # another gzip member follows
                inflater = GZIP_INFLATE.decompressobj(wbits=31)
            parts.append(inflater.decompress(block))
            block = inflater.unused_data if inflater.eof else b""
    except GZIP_INFLATE.error as exc:
        error = f"the gzip stream is corrupt ({exc}); this record was cut off"
        return b"".join(parts), inflater, error
    return b"".join(parts), inflater, None


def _jsonl_rows(
    data: bytes,
    name: str,
    order: int,
    stream_error: str | None,
    first_line: int = 1,
    at_file_start: bool = True,
) -> Iterator[tuple[str, int, int, str, str | None]]:
    if at_file_start and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if stream_error is None and lines and lines[-1] == b"":
        lines.pop()
    last = first_line + len(lines) - 1
    for number, line in enumerate(lines, start=first_line):
        # a byte-order mark can also start a later line, where files were concatenated
        line = line.removesuffix(b"\r").removeprefix(b"\xef\xbb\xbf")
        cut_off = stream_error is not None and number == last
        if not line.strip() and not cut_off:
            continue  # blank lines are not records
        error = stream_error if cut_off else None
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = line.decode("utf-8", errors="replace")
            error = error or f"invalid UTF-8 at byte {exc.start} of the line"
        yield name, order, number, text, error


# ASCII whitespace as bytes.strip() knows it: a line starting with one may be blank.
_WHITESPACE = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)


def _clean_jsonl_table(data: bytes, name: str, order: int, first_line: int = 1) -> pa.Table | None:
    """The same rows as `_jsonl_rows` for the common file, built in Arrow without a Python object
    per line; None when the file needs the line-by-line reader (a byte-order mark, a carriage
    return, a whitespace-only line, invalid UTF-8)."""
    # (`in` on bytes scans at memchr's speed; the BOM's first byte is looked for first)
    if b"\r" in data or (b"\xef" in data and b"\xef\xbb\xbf" in data):
        return None
    buffer = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buffer == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    if starts[-1] == len(data):  # the file ends with a newline: no line after it
        starts, ends = starts[:-1], ends[:-1]
    numbers = np.arange(first_line, first_line + len(starts), dtype=np.int64)
    keep = ends > starts  # empty lines are not records
    starts, ends, numbers = starts[keep], ends[keep], numbers[keep]
    if len(starts) and np.isin(buffer[starts], _WHITESPACE).any():
        return None  # maybe a whitespace-only line, which would sit inside its neighbour's text
    if len(data) >= 2**31:  # beyond a string column's 32-bit offsets: one huge line
        return None
    # Each row spans from its line's start to the next row's: its own newline and any empty lines
    # after it (RAW_SCHEMA). The rows are views of `data`, not a copy.
    offsets = np.concatenate((starts, [len(data)])).astype(np.int32)
    lines = pa.StringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
    try:
        lines.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return None
    count = len(starts)
    return pa.Table.from_arrays(
        [
            *_file_columns(name, order, count),
            pa.array(numbers),
            lines,
            pa.nulls(count, pa.string()),
        ],
        schema=RAW_SCHEMA,
    )


@dataclass(frozen=True)
class RawPiece:
    """Raw records of one piece of an ingestion, and what the plain lane of validation reads
    instead of parsing them again (engine._plain_fields): `jsonl`, the piece's text, when the
    records are exactly its non-empty lines, in order and unmended (no byte-order mark, carriage
    return, whitespace-only line, invalid UTF-8 or cut-off stream); `typed`, the fields as the
    columns of Parquet or Arrow rows already typed them (engine._typed_fields)."""

    records: pa.Table
    jsonl: bytes | None = None
    typed: pa.Table | None = None
    # Parquet or Arrow rows (`numbered_rows`) whose JSON text is written only where SQL reads it
    # (sql/stg_rows_as_json.sql as the view `raw_records`): `records`' raw_record is then null.
    rows: pa.Table | None = None


def jsonl_piece(
    data: bytes,
    name: str,
    order: int = 0,
    stream_error: str | None = None,
    first_line: int = 1,
    at_file_start: bool = True,
) -> RawPiece:
    """Raw records of JSON-lines bytes whose first line is `first_line`; `stream_error` marks
    the last line as cut off."""
    if stream_error is None:
        clean = _clean_jsonl_table(data, name, order, first_line)
        if clean is not None:
            return RawPiece(clean, data)
    rows = list(_jsonl_rows(data, name, order, stream_error, first_line, at_file_start))
    columns: list[list[object]] = [[row[i] for row in rows] for i in range(len(RAW_SCHEMA))]
    return RawPiece(
        pa.Table.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, RAW_SCHEMA, strict=True)],
            schema=RAW_SCHEMA,
        )
    )


# The columns `numbered_rows` adds; a file's own column of one of these names is refused.
ROW_NUMBER_COLUMNS = ("__source_file", "__file_order", "__source_row")


def numbered_rows(rows: pa.Table, source_file: str, file_order: int, first_row: int) -> pa.Table:
    """Parquet or Arrow rows with their file, its order and each row's number (from
    `first_row`), as sql/stg_rows_as_json.sql reads them."""
    for name in ROW_NUMBER_COLUMNS:
        if name in rows.column_names:
            raise TraceFileError(f"{source_file}: column name {name} is reserved")
    count = rows.num_rows
    file_name, order = _file_columns(source_file, file_order, count)
    return (
        rows.append_column("__source_file", file_name)
        .append_column("__file_order", order)
        .append_column("__source_row", pa.array(np.arange(first_row, first_row + count)))
    )


def _file_columns(name: str, order: int, count: int) -> tuple[pa.Array, pa.Array]:
    """`count` rows' source_file and file_order (RAW_SCHEMA's types)."""
    return (
        pa.array([name], pa.string()).take(np.zeros(count, dtype=np.int64)),
        pa.array(np.full(count, order, dtype=np.int32)),
    )


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
    their bytes until the file was closed. Reading a file of 1M traces, its buffers grew to 836 MiB
    and the process to 1.3 GiB; streamed, they stay at 125 MiB, the process at 0.55 GiB."""
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


def jsonl_file_pieces(path: Path, order: int, piece_bytes: int | None = None) -> Iterator[RawPiece]:
    """Raw records of one JSON-lines file, a piece at a time."""
    for piece in jsonl_pieces(path, piece_bytes):
        yield jsonl_piece(
            piece.data, str(path), order, piece.stream_error, piece.first_line, piece.at_file_start
        )


def read_jsonl_files(files: Sequence[TraceFile]) -> pa.Table:
    """Raw records of the JSON-lines files among `files` (file_order = index in `files`), all at
    once (ingestion itself takes them a piece at a time)."""
    tables = [
        piece.records
        for order, trace_file in enumerate(files)
        if trace_file.kind == "jsonl"
        for piece in jsonl_file_pieces(trace_file.path, order)
    ]
    return pa.concat_tables(tables) if tables else RAW_SCHEMA.empty_table()


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
