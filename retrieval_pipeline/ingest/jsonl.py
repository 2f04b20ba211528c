"""JSON-lines trace files (optionally gzipped) as raw records, a piece of whole lines at a time.

Blank lines are not records; a byte-order mark, a carriage return and invalid UTF-8 are mended
or named line by line, and a gzip stream that breaks or ends early keeps every line before the
break, the cut-off one quarantined with the stream's error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.ingest.gzip import GZIP_MAGIC, GzipStream
from retrieval_pipeline.ingest.pieces import RAW_SCHEMA, RawPiece, file_columns

# Ingestion reads and validates a file in pieces of about this much text (about 40k traces of 100
# ids), so that its memory does not grow with the size of a day.
PIECE_BYTES = 64 * 2**20
_READ_BYTES = 8 * 2**20

# What the record a gzip stream cut off is quarantined with.
_TRUNCATED = "the gzip stream is truncated; this record was cut off"
_CORRUPT = "the gzip stream is corrupt"


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
        if gzipped and not GZIP_MAGIC.startswith(handle.read(2)):
            raise TraceFileError(f"{path}: not a gzip file (the name ends in .gz)")
        handle.seek(0)
        stream = GzipStream() if gzipped else None
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
            if stream is None:
                blocks.append(block)
                size += len(block)
            else:
                for chunk in stream.inflate(block):
                    blocks.append(chunk)
                    size += len(chunk)
                if stream.error is not None:
                    error = _cut_off(stream.error)
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
        if error is None and stream is not None and read_any and not stream.ended:
            error = _TRUNCATED
        rest = b"".join(blocks)
        if rest or error is not None or at_start:  # no empty piece after the last line
            yield JsonlPiece(rest, first_line, at_start, error)


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


def jsonl_file_pieces(path: Path, order: int, piece_bytes: int | None = None) -> Iterator[RawPiece]:
    """Raw records of one JSON-lines file, a piece at a time."""
    for piece in jsonl_pieces(path, piece_bytes):
        yield jsonl_piece(
            piece.data, str(path), order, piece.stream_error, piece.first_line, piece.at_file_start
        )
