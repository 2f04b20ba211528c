"""Numbered text lines from a byte stream, gzip or not, with memory bounded by one block.

The judgments and TREC run readers take their lines from here, so that both count lines the same
way (from 1, every newline counts, blank lines included), read a file in blocks rather than
whole, and report a damaged line instead of stopping: a line that is not UTF-8, a line longer
than `MAX_LINE_BYTES` (its text is never held whole), or the end of a gzip stream that is cut
short or corrupt. A byte-order mark at the start of the file is dropped, and so is the carriage
return of a Windows line end.

`line_blocks` hands out a block's lines at once (a list of strings, decoded in one call), for
readers that validate whole columns with Arrow; `numbered_lines` hands them out one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.ingest.gzip import GZIP_MAGIC, GzipStream

# Bytes read from the stream at a time.
READ_BYTES = 1 << 20
# A line longer than this is reported as damaged and skipped to its end: no judgment or run line
# comes near it, and holding it would let one newline-free file take any amount of memory.
MAX_LINE_BYTES = 1 << 20
# How much of a damaged line's text a report keeps.
RAW_CHARS = 200

_BOM = "\ufeff"

# A line that could not be kept, in the words of the trace quarantine (less its trace_id).
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
        ("field", pa.string()),
        ("reason", pa.string()),
        ("raw_record", pa.string()),
    ]
)
# Whitespace around a value, as C's isspace (and trec_eval) sees it.
SPACE = " \t\n\r\f\v"


class Quarantine:
    """Lines left out, each with its file, line, field and reason (QUARANTINE_SCHEMA); `table()`
    orders them by file (in reading order) and line."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {name: [] for name in QUARANTINE_SCHEMA.names}
        self.files: list[int] = []

    def __len__(self) -> int:
        return len(self.files)

    def add(
        self, source: str, line: int, field: str | None, reason: str, raw: str, file: int = 0
    ) -> None:
        for name, value in zip(
            QUARANTINE_SCHEMA.names, (source, line, field, reason, raw[:RAW_CHARS]), strict=True
        ):
            self.columns[name].append(value)
        self.files.append(file)

    def table(self) -> pa.Table:
        rows = pa.Table.from_pydict(self.columns, schema=QUARANTINE_SCHEMA)
        in_order = rows.append_column("_file", pa.array(self.files, pa.int64()))
        by_line = [("_file", "ascending"), ("source_line", "ascending")]
        return in_order.sort_by(by_line).drop_columns(["_file"])


@dataclass(frozen=True)
class SplitLines:
    """The lines of a block that hold a record, split at whitespace: `fields` (a list per line),
    their numbers and texts; and how many were blank or comments."""

    fields: pa.Array
    numbers: pa.Array
    texts: list[str]
    skipped: int


def split_lines(
    block: LineBlock,
    source: str,
    quarantine: Quarantine,
    counts: tuple[int, int | None],
    layout: str,
    comment_after_space: bool,
    file: int = 0,
) -> SplitLines:
    """A block of whitespace-separated lines, as trec_eval reads its files: blank lines and
    comments (`#` first on the line, or first after leading whitespace with
    `comment_after_space`) skipped; a damaged line, or one whose number of fields is outside
    `counts` (least, most or None), quarantined with `layout` in its reason."""
    texts, first = block.texts, block.first
    lines = pa.array(texts, pa.string())
    numbers = pa.array(np.arange(first, first + len(texts), dtype=np.int64))
    trimmed = pc.utf8_trim(lines, characters=SPACE)
    damaged = np.zeros(len(texts), dtype=bool)
    for offset, reason in block.errors.items():
        damaged[offset] = True
        quarantine.add(source, first + offset, None, reason, texts[offset], file)
    comments = pc.starts_with(trimmed if comment_after_space else lines, "#")
    skip = pc.and_(pc.or_(pc.equal(trimmed, ""), comments), pa.array(~damaged))
    wanted = pc.and_(pc.invert(skip), pa.array(~damaged))
    fields = pc.ascii_split_whitespace(trimmed)
    lengths = pc.list_value_length(fields)
    least, most = counts
    fits = pc.greater_equal(lengths, least)
    if most is not None:
        fits = pc.and_(fits, pc.less_equal(lengths, most))
    for row in true_rows(pc.and_(wanted, pc.invert(fits))):
        count = len(fields[row])
        reason = f"has {count} field{'s' if count != 1 else ''}; {layout}"
        quarantine.add(source, first + row, None, reason, texts[row], file)
    good = pc.and_(wanted, fits)
    return SplitLines(
        fields=fields.filter(good),
        numbers=numbers.filter(good),
        texts=[texts[row] for row in true_rows(good)],
        skipped=pc.sum(skip).as_py() or 0,
    )


def true_rows(mask: pa.Array | pa.ChunkedArray) -> list[int]:
    """The positions where `mask` is true (a null counts as true: never silently dropped)."""
    return np.flatnonzero(pc.fill_null(mask, True).to_numpy(zero_copy_only=False)).tolist()


class ByteStream(Protocol):
    """What is read from: a local file opened in binary mode, or an object store's stream."""

    def read(self, size: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Line:
    """One line: its number (from 1), its text without the line end, or why it has none."""

    number: int
    text: str
    error: str | None = None


@dataclass(frozen=True)
class LineBlock:
    """Consecutive lines: `texts[i]` is line `first + i`; `errors` maps the offset `i` of a damaged
    line to its reason (its text is then what could be read, cut to RAW_CHARS)."""

    first: int
    texts: list[str]
    errors: dict[int, str] = field(default_factory=dict)


def numbered_lines(
    stream: ByteStream, gzipped: bool = False, read_bytes: int = READ_BYTES
) -> Iterator[Line]:
    """Every line of `stream`, one at a time."""
    for block in line_blocks(stream, gzipped, read_bytes):
        errors = block.errors
        for offset, text in enumerate(block.texts):
            yield Line(block.first + offset, text, errors.get(offset) if errors else None)


def line_blocks(
    stream: ByteStream, gzipped: bool = False, read_bytes: int = READ_BYTES
) -> Iterator[LineBlock]:
    """Every line of `stream`, numbered from 1, a block of whole lines at a time."""
    chunks = _gunzipped(stream, read_bytes) if gzipped else _blocks(stream, read_bytes)
    number = 1  # of the next line
    carry = b""  # the start of a line whose end has not been read yet
    overlong = False  # that line is already too long: only its start is kept
    for chunk in chunks:
        if isinstance(chunk, _StreamError):
            yield LineBlock(number, [_text(carry)], {0: chunk.reason})
            return
        cut = chunk.rfind(b"\n")
        if cut < 0:
            if not overlong:
                carry += chunk
                overlong = len(carry) > MAX_LINE_BYTES
            continue
        block = LineBlock(number, [], {})
        if overlong:
            block.texts.append(_text(carry))
            block.errors[0] = _OVERLONG
            end = chunk.find(b"\n")
            if end < cut:
                _decode_into(block, chunk[end + 1 : cut])
        else:
            _decode_into(block, carry + chunk[:cut])
        yield block
        number += len(block.texts)
        carry, overlong = chunk[cut + 1 :], False
    if overlong:
        yield LineBlock(number, [_text(carry)], {0: _OVERLONG})
    elif carry:
        block = LineBlock(number, [], {})
        _decode_into(block, carry)
        yield block


_OVERLONG = f"line longer than {MAX_LINE_BYTES:,} bytes; not read"


def _text(data: bytes) -> str:
    return data[: RAW_CHARS * 4].decode("utf-8", "replace")[:RAW_CHARS]


def _decode_into(block: LineBlock, data: bytes) -> None:
    """Append the lines of `data` (whole lines, without the last one's newline) to `block`."""
    start = len(block.texts)
    try:
        decoded = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        decoded = []
        for offset, line in enumerate(data.split(b"\n"), start=start):
            try:
                decoded.append(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                decoded.append(_text(line))
                block.errors[offset] = f"invalid UTF-8 at byte {exc.start} of the line"
    if block.first == 1 and start == 0 and decoded[0].startswith(_BOM):
        decoded[0] = decoded[0][1:]
    if any(text.endswith("\r") for text in decoded):
        decoded = [text.removesuffix("\r") for text in decoded]
    block.texts.extend(decoded)
    if len(data) > MAX_LINE_BYTES:  # a line begun in the carry may be past the limit
        for offset, text in enumerate(decoded, start=start):
            if len(text) > MAX_LINE_BYTES // 4 and len(text.encode("utf-8")) > MAX_LINE_BYTES:
                block.texts[offset] = text[:RAW_CHARS]
                block.errors[offset] = _OVERLONG


@dataclass(frozen=True)
class _StreamError:
    reason: str


def _blocks(stream: ByteStream, read_bytes: int) -> Iterator[bytes]:
    while block := stream.read(read_bytes):
        yield block


def _gunzipped(stream: ByteStream, read_bytes: int) -> Iterator[bytes | _StreamError]:
    """The decompressed bytes, then a `_StreamError` if the stream did not end whole."""
    inflater = GzipStream(max_output=read_bytes)
    head = stream.read(len(GZIP_MAGIC))
    if not head:
        return  # an empty file holds no lines
    if not GZIP_MAGIC.startswith(head) or len(head) < len(GZIP_MAGIC):
        yield _StreamError("not a gzip file (the name ends in .gz)")
        return
    block = head + stream.read(read_bytes)
    while block:
        yield from inflater.inflate(block)
        if inflater.error is not None:
            yield _StreamError(inflater.error)
            return
        block = stream.read(read_bytes)
    if not inflater.ended:
        yield _StreamError("the gzip stream is cut short; this line was cut off")
