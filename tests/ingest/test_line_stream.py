"""Numbered lines from plain and gzipped streams, against a reference that reads the whole file."""

from __future__ import annotations

import gzip
import io
import random

import pytest

from retrieval_pipeline.ingest import line_stream
from retrieval_pipeline.ingest.line_stream import MAX_LINE_BYTES, numbered_lines


def _reference(data: bytes) -> list[tuple[int, str | None]]:
    """The whole file split at once: (line number, text, or None for a damaged line)."""
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    out: list[tuple[int, str | None]] = []
    for number, part in enumerate(parts, start=1):
        part = part.removesuffix(b"\r")
        if number == 1:
            part = part.removeprefix(b"\xef\xbb\xbf")
        if len(part) > MAX_LINE_BYTES:
            out.append((number, None))
            continue
        try:
            out.append((number, part.decode("utf-8")))
        except UnicodeDecodeError:
            out.append((number, None))
    return out


def _read(
    data: bytes, gzipped: bool = False, read_bytes: int = 1 << 20
) -> list[tuple[int, str | None]]:
    stream = io.BytesIO(gzip.compress(data) if gzipped else data)
    return [
        (line.number, None if line.error else line.text)
        for line in numbered_lines(stream, gzipped=gzipped, read_bytes=read_bytes)
    ]


def _random_file(rng: random.Random) -> bytes:
    lines: list[bytes] = []
    for _ in range(rng.randrange(0, 25)):
        kind = rng.random()
        if kind < 0.04:
            lines.append(b"x" * rng.randrange(MAX_LINE_BYTES - 3, MAX_LINE_BYTES + 40))
        elif kind < 0.1:
            lines.append(b"bad \xff\xfe utf-8")
        elif kind < 0.15:
            lines.append(b"")
        elif kind < 0.25:
            lines.append("caf\u00e9 \u20ac\r".encode())
        else:
            lines.append(bytes(rng.choice(b"ab \t#") for _ in range(rng.randrange(0, 30))))
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
    return b"\xef\xbb\xbf" + data if rng.random() < 0.2 else data


@pytest.mark.parametrize("gzipped", [False, True])
def test_lines_match_reading_the_whole_file_whatever_the_block_size(gzipped: bool) -> None:
    rng = random.Random(23)
    for trial in range(60):
        data = _random_file(rng)
        # small blocks cut lines, multi-byte characters and the byte-order mark anywhere
        read_bytes = rng.choice([2, 3, 5, 64, 1 << 20])
        if read_bytes < 64 and len(data) > 100_000:
            read_bytes = 4096
        assert _read(data, gzipped, read_bytes) == _reference(data), (trial, read_bytes)


def test_damaged_lines_say_why_and_the_rest_is_read() -> None:
    data = b"one\nbad \xff line\n" + b"y" * (MAX_LINE_BYTES + 1) + b"\nlast"
    lines = list(numbered_lines(io.BytesIO(data), read_bytes=4096))
    assert [(line.number, line.error) for line in lines] == [
        (1, None),
        (2, "invalid UTF-8 at byte 4 of the line"),
        (3, f"line longer than {MAX_LINE_BYTES:,} bytes; not read"),
        (4, None),
    ]
    assert lines[1].text == "bad \ufffd line"
    assert len(lines[2].text) == line_stream.RAW_CHARS
    assert lines[3].text == "last"


def test_a_gzip_stream_cut_short_or_not_gzip_is_reported_on_its_last_line() -> None:
    whole = gzip.compress(b"a\nb\ncut here")
    lines = list(numbered_lines(io.BytesIO(whole[:-8]), gzipped=True))
    assert [(line.number, line.text, line.error) for line in lines] == [
        (1, "a", None),
        (2, "b", None),
        (3, "cut here", "the gzip stream is cut short; this line was cut off"),
    ]
    corrupt = whole[:12] + bytes(b ^ 0xFF for b in whole[12:20]) + whole[20:]
    last = list(numbered_lines(io.BytesIO(corrupt), gzipped=True))[-1]
    assert last.error is not None and last.error.startswith("the gzip stream is corrupt")
    assert [line.error for line in numbered_lines(io.BytesIO(b"plain\n"), gzipped=True)] == [
        "not a gzip file (the name ends in .gz)"
    ]
    assert list(numbered_lines(io.BytesIO(b""), gzipped=True)) == []
