"""A JSON-lines file is cut into pieces whose size is bounded whatever the file holds (issue 27):
a gzip bomb of newlines, one line of tens of megabytes, millions of short lines. Each line is kept
whole, or, past the limit, named with its size; line numbers stay exact."""

from __future__ import annotations

import json
import tracemalloc
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.cli import main
from retrieval_pipeline.ingest import jsonl, lines
from retrieval_pipeline.ingest.jsonl import jsonl_piece
from retrieval_pipeline.ingest.lines import LineSplitter, too_long_reason
from retrieval_pipeline.ingest.pieces import RawPiece, coalesced

RECORD = {
    "trace_id": "t1",
    "query_id": "q",
    "timestamp": "2026-11-30T10:00:00Z",
    "retrieved_ids": ["a"],
    "relevant_ids": ["a"],
}


def expected_records(text: bytes, max_line: int) -> dict[int, tuple[bytes, str | None]]:
    """What the pieces must hold, by line number, from the text itself: every non-blank line as
    it is, or, past `max_line` bytes, its first bytes and the reason with its size."""
    found: dict[int, tuple[bytes, str | None]] = {}
    for number, line in enumerate(text.split(b"\n"), start=1):
        if len(line) > max_line:
            found[number] = (line[: lines.KEPT_PREFIX], too_long_reason(len(line), max_line))
        elif line:
            found[number] = (line, None)
    return found


def held_records(pieces: list[lines.LinePiece]) -> dict[int, tuple[bytes, str | None]]:
    found: dict[int, tuple[bytes, str | None]] = {}
    for piece in pieces:
        for number, line in enumerate(piece.data.split(b"\n"), start=piece.first_line):
            if line or number in piece.line_errors:
                found[number] = (line, piece.line_errors.get(number))
    return found


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=8),
    max_line=st.integers(min_value=1, max_value=120),
    piece_bytes=st.integers(min_value=1, max_value=400),
    first_piece_bytes=st.integers(min_value=1, max_value=400),
    piece_lines=st.integers(min_value=1, max_value=12),
    big_line=st.integers(min_value=2, max_value=200),
    last_newline=st.booleans(),
)
def test_every_line_is_kept_or_named_and_every_piece_is_bounded(
    sizes: list[int],
    cuts: list[int],
    max_line: int,
    piece_bytes: int,
    first_piece_bytes: int,
    piece_lines: int,
    big_line: int,
    last_newline: bool,
) -> None:
    # lines of `x` of the drawn sizes (0: a blank line), fed in chunks of the drawn sizes
    text = b"\n".join(b"x" * size for size in sizes) + (b"\n" if last_newline else b"")
    chunks: list[bytes] = []
    at = 0
    while at < len(text):
        size = cuts[len(chunks) % len(cuts)]
        chunks.append(text[at : at + size])
        at += size
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lines, "BIG_LINE", big_line)
        splitter = LineSplitter(piece_bytes, piece_lines, max_line, first_piece_bytes)
        pieces = [piece for chunk in chunks for piece in splitter.feed(chunk)]
        fed = len(pieces)
        pieces += list(splitter.finish())
    assert held_records(pieces) == expected_records(text, max_line)
    step = min(big_line, max_line, piece_lines)
    stand_in = lines.KEPT_PREFIX + 1  # what a line too long leaves in its piece, at most
    for piece in pieces:
        assert piece.data.count(b"\n") < piece_lines + step + 1
        # a piece ends once full; it may hold the last chunk or step read, a stand-in and the
        # start of a line that was not ended yet
        assert len(piece.data) <= piece_bytes + max(cuts) + step + stand_in + max_line
        # a big line kept shares its piece only with what the step that ended it held
        kept = [
            line
            for number, line in enumerate(piece.data.split(b"\n"), start=piece.first_line)
            if line and number not in piece.line_errors
        ]
        if any(len(line) > big_line for line in kept):
            others = sum(len(line) + 1 for line in kept if len(line) <= big_line)
            assert others <= step + stand_in + 1
    assert [p.at_file_start for p in pieces] == [True] + [False] * (len(pieces) - 1)
    # a piece cut once full says the file may go on; the last one, cut by finish, does not
    assert [p.continues for p in pieces] == [True] * fed + [False] * (len(pieces) - fed)


def test_a_files_first_piece_ends_sooner_then_every_piece_is_full_size() -> None:
    # 100 lines of 10 bytes fed a line at a time: the first piece ends once it holds 50 bytes
    # (5 lines), every later one at 200 bytes (20 lines), the rest in the last: 5 + 4 x 20 + 15
    splitter = LineSplitter(200, 1000, 100, first_piece_bytes=50)
    line = b"x" * 9 + b"\n"
    pieces = [piece for _ in range(100) for piece in splitter.feed(line)]
    pieces += list(splitter.finish())
    assert [p.data.count(b"\n") for p in pieces] == [5, 20, 20, 20, 20, 15]
    assert [p.first_line for p in pieces] == [1, 6, 26, 46, 66, 86]
    assert [p.continues for p in pieces] == [True] * 5 + [False]


def test_a_piece_cut_once_full_is_handed_out_before_the_next_is_read() -> None:
    # `coalesced` holds a small piece to join it with the next; a piece its file goes on after is
    # handed out at once, so validation need not wait for a second piece to be read
    pulled: list[int] = []

    def pieces() -> Iterator[RawPiece]:
        for number in range(3):
            pulled.append(number)
            text = json.dumps(RECORD | {"trace_id": f"t{number}"}).encode() + b"\n"
            raw = jsonl_piece(text, "day.jsonl", 0, None, number + 1, number == 0)
            yield replace(raw, continues=number < 2)

    joined = coalesced(pieces(), max_rows=1000, max_bytes=2**20)
    first = next(joined)
    assert pulled == [0] and first.records.column("source_line").to_pylist() == [1]
    rest = list(joined)
    assert [p.records.column("source_line").to_pylist() for p in rest] == [[2], [3]]
    # without the mark, small pieces of one kind are joined: the first waits for the next
    pulled.clear()
    plain = (replace(piece, continues=False) for piece in pieces())
    assert [p.records.num_rows for p in coalesced(plain, 1000, 2**20)] == [3]


def _newlines_gz(total: int) -> bytes:
    """A record, `total` newlines and a second record, gzipped (about 1,000 to 1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = [compressor.compress(json.dumps(RECORD).encode() + b"\n")]
    block = b"\n" * 2**20
    body += [compressor.compress(block) for _ in range(total // len(block))]
    body.append(compressor.compress(json.dumps(RECORD | {"trace_id": "t2"}).encode() + b"\n"))
    body.append(compressor.flush())
    return b"".join(body)


def test_a_gzip_bomb_of_newlines_is_read_in_bounded_memory(tmp_path: Path) -> None:
    total = 128 * 2**20
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(_newlines_gz(total))
    assert path.stat().st_size < 200_000  # 128 MiB inflated from a file of some 130 KB
    tracemalloc.start()
    try:
        pieces = list(jsonl.jsonl_pieces(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = {n: line for p in pieces for n, line in enumerate(p.data.split(b"\n"), p.first_line)}
    records = {n: json.loads(line)["trace_id"] for n, line in held.items() if line}
    # line 1 ends at its own newline; the 128 Mi newlines after it end the empty lines 2 to
    # total + 1, so the second record is line total + 2
    assert records == {1: "t1", total + 2: "t2"}
    # before: the whole inflated block was held at once (128 MiB and more); now a chunk or two
    assert peak < 40 * 2**20


def test_millions_of_short_lines_make_many_small_pieces(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"x\n" * 1_000_000)
    pieces = list(jsonl.jsonl_pieces(path))
    counts = [piece.data.count(b"\n") for piece in pieces]
    assert sum(counts) == 1_000_000
    # a piece stops at PIECE_LINES, give or take the last step read (at most a big line's bytes)
    assert max(counts) <= lines.PIECE_LINES + lines.BIG_LINE // 2
    assert len(pieces) >= 1_000_000 // (lines.PIECE_LINES + lines.BIG_LINE // 2)


def test_evaluate_quarantines_a_line_over_the_limit_with_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_record = json.dumps(RECORD | {"trace_id": "long", "segment": "s" * 5000})
    path = tmp_path / "t.jsonl.gz"
    body = "\n".join([json.dumps(RECORD), long_record, json.dumps(RECORD | {"trace_id": "t3"})])
    path.write_bytes(zlib.compress(body.encode(), wbits=31))
    monkeypatch.setenv("RETRIEVAL_PIPELINE_MAX_LINE_BYTES", "4KiB")
    quarantine = tmp_path / "q.jsonl"
    result = CliRunner().invoke(main, ["evaluate", str(path), "--quarantine", str(quarantine)])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("Read 3 records from 1 file(s): 2 valid (")
    assert first.endswith("), 1 quarantined.")
    reason = too_long_reason(len(long_record), 4096)
    assert reason == (
        f"the line is too long to read: {len(long_record):,} bytes, more than the limit of "
        "4,096 (RETRIEVAL_PIPELINE_MAX_LINE_BYTES)"
    )
    (row,) = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert (row["source_line"], row["reason"]) == (2, reason)
    assert row["raw_record"] == long_record[: lines.KEPT_PREFIX]


def test_a_long_line_ends_the_file_without_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(RECORD).encode() + b"\n" + b"y" * 5000)
    pieces = list(jsonl.jsonl_pieces(path, max_line_bytes=1024))
    errors = {n: e for p in pieces for n, e in p.line_errors.items()}
    assert errors == {2: too_long_reason(5000, 1024)}
