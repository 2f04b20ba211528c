"""JSON-lines trace files (optionally gzipped) as raw records, a piece of whole lines at a time.

Blank lines are not records; a byte-order mark, a carriage return and invalid UTF-8 are mended
or named line by line, and a gzip stream that breaks or ends early keeps every line before the
break, the cut-off one quarantined with the stream's error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import pyarrow as pa

from retrieval_pipeline.ingest.files import TraceFileError, source_name
from retrieval_pipeline.ingest.filesystems import Location, StoreError, open_file
from retrieval_pipeline.ingest.gzip import GZIP_MAGIC, GzipStream
from retrieval_pipeline.ingest.lines import MAX_LINE_BYTES, PIECE_LINES, LinePiece, LineSplitter
from retrieval_pipeline.ingest.pieces import RAW_SCHEMA, RawPiece, file_columns

# Ingestion reads and validates a file in pieces of about this much text (about 40k traces of 100
# ids), so that its memory does not grow with the size of a day.
PIECE_BYTES = 64 * 2**20
# The first piece of an ingestion ends sooner (at most PIECE_BYTES), so that its validation starts
# while the rest of the file is read and inflated: validation waits for the reader's first piece.
FIRST_PIECE_BYTES = 8 * 2**20
_READ_BYTES = 8 * 2**20

# What the record a gzip stream cut off is quarantined with.
_TRUNCATED = "the gzip stream is truncated; this record was cut off"
_CORRUPT = "the gzip stream is corrupt"


@dataclass(frozen=True)
class JsonlPiece:
    """Whole lines of a JSON-lines file, decompressed: `data` starts at line `first_line` and ends
    with a newline, except in the file's last piece, which carries `stream_error` when a gzip
    stream ended or broke early (its last line was cut off). `line_errors`: lines that cannot be
    read, by number (a line longer than the limit: `data` holds only its first bytes)."""

    data: bytes
    first_line: int
    at_file_start: bool
    stream_error: str | None = None
    line_errors: Mapping[int, str] = field(default_factory=dict)
    continues: bool = False  # cut once full: the file may go on (`LinePiece.continues`)


def _open(path: Path | Location) -> BinaryIO:
    """The file for reading: a local one, or one in an object store (read as stored)."""
    if isinstance(path, Location):
        try:
            return cast(BinaryIO, open_file(path))
        except StoreError as exc:
            raise TraceFileError(str(exc)) from exc
    try:
        return path.open("rb")
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc


def jsonl_pieces(
    path: Path | Location,
    piece_bytes: int | None = None,
    max_line_bytes: int | None = None,
    first_piece_bytes: int | None = None,
) -> Iterator[JsonlPiece]:
    """The file in pieces of whole lines (`ingest.lines`: each bounded in bytes and lines, a line
    longer than `max_line_bytes` named instead of kept, the first ended at `first_piece_bytes`
    when given); a gzip file is decompressed member by member, a chunk at a time, so that a
    truncated or corrupt tail keeps every line before it and a gzip bomb is never held inflated."""
    piece_bytes = piece_bytes or PIECE_BYTES
    gzipped = path.name.lower().endswith(".gz")
    path_name = source_name(path)
    handle = _open(path)
    splitter = LineSplitter(
        piece_bytes, PIECE_LINES, max_line_bytes or MAX_LINE_BYTES, first_piece_bytes
    )
    with handle:
        # An empty file holds no records; one cut inside the gzip header is a truncated stream.
        if gzipped and not GZIP_MAGIC.startswith(handle.read(2)):
            raise TraceFileError(f"{path_name}: not a gzip file (the name ends in .gz)")
        handle.seek(0)
        stream = GzipStream() if gzipped else None
        read_any, error = False, None
        while error is None:
            try:
                block = handle.read(_READ_BYTES)
            except OSError as exc:
                raise TraceFileError(f"{path_name}: cannot be read ({_words(exc)})") from exc
            if not block:
                break
            read_any = True
            # each inflated chunk is cut into pieces before the next is inflated
            for chunk in [block] if stream is None else stream.inflate(block):
                for piece in splitter.feed(chunk):
                    yield _jsonl(piece)
            if stream is not None and stream.error is not None:
                error = _cut_off(stream.error)
        if error is None and stream is not None and read_any and not stream.ended:
            error = _TRUNCATED
        for piece in splitter.finish(always=error is not None):
            yield _jsonl(piece, error)


def _jsonl(piece: LinePiece, stream_error: str | None = None) -> JsonlPiece:
    return JsonlPiece(
        piece.data,
        piece.first_line,
        piece.at_file_start,
        stream_error,
        piece.line_errors,
        piece.continues,
    )


def _cut_off(stream_error: str) -> str:
    """The reason the record a corrupt gzip stream cut off is quarantined with. `GzipStream` says
    `... corrupt after N bytes (<the inflater's words>)`: the reason keeps the inflater's words
    and leaves out the count of bytes (the record's line says where the stream broke)."""
    words = stream_error.partition(" (")[2].removesuffix(")") or stream_error
    return f"{_CORRUPT} ({words}); this record was cut off"


def _jsonl_rows(
    data: bytes,
    name: str,
    order: int,
    stream_error: str | None,
    first_line: int = 1,
    at_file_start: bool = True,
    line_errors: Mapping[int, str] | None = None,
) -> Iterator[tuple[str, int, int, str, str | None]]:
    line_errors = line_errors or {}
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
        error = stream_error if cut_off else line_errors.get(number)
        if not line.strip() and error is None:
            continue  # blank lines are not records
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
            *file_columns(name, order, count),
            pa.array(numbers),
            lines,
            pa.nulls(count, pa.string()),
        ],
        schema=RAW_SCHEMA,
    )


def jsonl_piece(
    data: bytes,
    name: str,
    order: int = 0,
    stream_error: str | None = None,
    first_line: int = 1,
    at_file_start: bool = True,
    line_errors: Mapping[int, str] | None = None,
) -> RawPiece:
    """Raw records of JSON-lines bytes whose first line is `first_line`; `stream_error` marks
    the last line as cut off, `line_errors` gives the lines that cannot be read their reason."""
    if stream_error is None and not line_errors:
        clean = _clean_jsonl_table(data, name, order, first_line)
        if clean is not None:
            return RawPiece(clean, data)
    rows = list(
        _jsonl_rows(data, name, order, stream_error, first_line, at_file_start, line_errors)
    )
    columns: list[list[object]] = [[row[i] for row in rows] for i in range(len(RAW_SCHEMA))]
    return RawPiece(
        pa.Table.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, RAW_SCHEMA, strict=True)],
            schema=RAW_SCHEMA,
        )
    )


def _words(exc: OSError) -> str:
    return exc.strerror or " ".join(str(exc).split())


def jsonl_file_pieces(
    path: Path | Location,
    order: int,
    piece_bytes: int | None = None,
    max_line_bytes: int | None = None,
    first_piece_bytes: int | None = None,
) -> Iterator[RawPiece]:
    """Raw records of one JSON-lines file, a piece at a time (`jsonl_pieces`)."""
    name = source_name(path)
    for piece in jsonl_pieces(path, piece_bytes, max_line_bytes, first_piece_bytes):
        raw = jsonl_piece(
            piece.data,
            name,
            order,
            piece.stream_error,
            piece.first_line,
            piece.at_file_start,
            piece.line_errors,
        )
        yield replace(raw, continues=True) if piece.continues else raw
