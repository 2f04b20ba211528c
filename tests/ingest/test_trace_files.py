"""Reading trace files into raw records: JSON lines (clean and line by line, in pieces, gzipped) and
Parquet, and the files that cannot be read at all.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.ingest import jsonl, parquet, pieces
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.trace_records import good, write_lines


def test_bom_blank_lines_crlf_and_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    body = (
        b"\xef\xbb\xbf" + json.dumps(good("bom")).encode() + b"\r\n"
        b"\n   \n"
        + json.dumps(good("latin-\xff")).encode().replace(b"\\u00ff", b"\xff")
        + b"\n"
        + json.dumps(good("unicode-\u00e9\u4e2d")).encode()
        + b"\n"
    )
    path.write_bytes(body)
    run = run_evaluation(path, "mrr")
    assert run.ingest.read == 3  # blank lines are not records
    assert sorted(run.per_query.trace_id) == ["bom", "unicode-\u00e9\u4e2d"]
    bad = run.quarantine.iloc[0]
    assert bad.source_line == 4
    assert bad.reason.startswith("invalid UTF-8 at byte ")


# Pieces of JSON-lines files: clean lines, and each kind that needs the line-by-line reader.
_LINE_PIECES = [
    b'{"trace_id": "a"}',
    b"",
    b"  ",
    b'\t{"b": 2}',
    b"x\xff",
    b"\xef\xbb\xbf{}",
    b'{"c": "\xc3\xa9\xe4\xb8\xad"}',
    b"{}\r",
    b"[]",
    b"not json",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_LINE_PIECES), max_size=8),
    st.booleans(),
)
def test_clean_file_reader_gives_the_rows_of_the_line_by_line_reader(
    pieces: list[bytes], final_newline: bool
) -> None:
    data = b"\n".join(pieces) + (b"\n" if final_newline else b"")
    expected = [
        (line, text, error) for _, _, line, text, error in jsonl._jsonl_rows(data, "f", 3, None)
    ]
    piece = jsonl.jsonl_piece(data, "f", 3)
    table = piece.records
    # a clean piece's rows end with their newlines (pieces.RAW_SCHEMA), which the SQL trims
    texts = [text.rstrip("\n") for text in table.column("raw_record").to_pylist()]
    if piece.jsonl is not None:  # the text the plain lane parses: the records' lines, in order
        assert [line.decode() for line in piece.jsonl.split(b"\n") if line] == texts
        assert not any(table.column("read_error").to_pylist())
    got = list(
        zip(
            table.column("source_line").to_pylist(),
            texts,
            table.column("read_error").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    assert set(table.column("source_file").to_pylist()) <= {"f"}
    assert set(table.column("file_order").to_pylist()) <= {3}


def test_clean_file_reader_takes_only_files_it_reads_exactly() -> None:
    clean = b'{"a": 1}\n\n{"b": "\xc3\xa9"}\n[3]'
    table = jsonl._clean_jsonl_table(clean, "f", 0)
    assert table is not None
    assert table.column("source_line").to_pylist() == [1, 3, 4]
    # each row a view of the piece: its line, its newline and the blank line after it
    assert table.column("raw_record").to_pylist() == ['{"a": 1}\n\n', '{"b": "\u00e9"}\n', "[3]"]
    # a byte-order mark, a carriage return, a line that starts with whitespace, invalid UTF-8
    for other in (b"\xef\xbb\xbf{}\n", b"{}\r\n", b"{}\n\t{}\n", b"{}\n\xff\n"):
        assert jsonl._clean_jsonl_table(other, "f", 0) is None, other


def test_empty_file_and_only_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n  \n")
    run = run_evaluation(tmp_path, "mrr")
    assert (run.ingest.files, run.ingest.read, run.ingest.valid) == (2, 0, 0)
    assert run.per_query.empty


def test_truncated_gzip_keeps_complete_lines_and_quarantines_the_cut_one(tmp_path: Path) -> None:
    lines = [
        json.dumps(good(f"t{i}", retrieved_ids=[f"d{j}" for j in range(50)])) for i in range(200)
    ]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    run = run_evaluation(path, "mrr")
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined
    assert run.ingest.valid > 0
    assert run.ingest.quarantined == 1
    assert "gzip stream is truncated" in run.quarantine.iloc[0].reason


def test_gzip_name_without_gzip_content_is_a_file_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl.gz", [json.dumps(good("x"))])
    with pytest.raises(TraceFileError, match="not a gzip file"):
        run_evaluation(path, "mrr")


def test_unreadable_paths_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file or directory"):
        run_evaluation(tmp_path / "missing.jsonl", "mrr")
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(TraceFileError, match=r"notes\.txt: not a trace file"):
        run_evaluation(other, "mrr")
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet")
    with pytest.raises(TraceFileError, match=r"fake\.parquet: not a readable Parquet file"):
        run_evaluation(fake, "mrr")


@pytest.mark.parametrize("name", pieces.ROW_NUMBER_COLUMNS)
def test_a_parquet_column_named_as_the_row_numbers_is_a_file_error(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{**good("a"), name: 1}]), path)
    with pytest.raises(TraceFileError, match=f"t.parquet: column name {name} is reserved"):
        run_evaluation(path, "mrr")


def test_parquet_without_a_required_column_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"trace_id": ["a"], "query_id": ["q"], "timestamp": ["x"]}), path)
    with pytest.raises(TraceFileError, match="lacks required column\\(s\\) retrieved_ids"):
        run_evaluation(path, "mrr")


def test_a_parquet_file_is_read_without_holding_the_whole_file(tmp_path: Path) -> None:
    """Memory does not grow with the rows of a Parquet file: pyarrow's pre-buffering read row
    groups ahead and kept them until the file was closed (1.3 GiB for 1M traces)."""
    rows, ids_per_row = 4_000, 100
    ids = [os.urandom(8).hex() for _ in range(rows * ids_per_row)]  # 16 bytes, incompressible
    table = pa.table(
        {
            "trace_id": [f"t{i}" for i in range(rows)],
            "query_id": ["q"] * rows,
            "timestamp": ["2026-11-30T10:00:00Z"] * rows,
            "retrieved_ids": [ids[i : i + ids_per_row] for i in range(0, len(ids), ids_per_row)],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=100, compression="none", use_dictionary=False)
    del table, ids
    held: list[int] = []
    for first_row, piece in parquet.parquet_pieces(path, 100):
        assert first_row == len(held) * 100 + 1
        del piece
        held.append(pa.total_allocated_bytes())
    assert len(held) == 40
    # the file is 4,000 * 100 * (16 + 4) bytes = 8 MB, a piece 0.2 MB (pre-buffered: 8.4 MB held
    # from the first piece on); read as a stream, about 0.5 MB
    assert path.stat().st_size > 8_000_000
    assert max(held) < 2_000_000


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    last_newline=st.booleans(),
    gzipped=st.booleans(),
    read_bytes=st.integers(min_value=1, max_value=64),
    piece_bytes=st.integers(min_value=1, max_value=200),
)
def test_pieces_are_whole_lines_numbered_from_the_file_start(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    last_newline: bool,
    gzipped: bool,
    read_bytes: int,
    piece_bytes: int,
) -> None:
    # Reads of any size (a line across many reads, many lines in one) and pieces of any size:
    # the pieces hold the file's bytes in order, each ends at a newline but the last, and each
    # starts at the line its number says.
    text = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path = tmp_path_factory.mktemp("pieces") / ("t.jsonl.gz" if gzipped else "t.jsonl")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    with mock.patch.object(jsonl, "_READ_BYTES", read_bytes):
        pieces = list(jsonl.jsonl_pieces(path, piece_bytes=piece_bytes))
    assert b"".join(p.data for p in pieces) == text
    assert all(p.data.endswith(b"\n") for p in pieces[:-1])
    assert all(p.data for p in pieces[1:])  # only an empty file's one piece is empty
    assert all(p.stream_error is None for p in pieces)
    assert [p.at_file_start for p in pieces] == [True] + [False] * (len(pieces) - 1)
    before = 0
    for piece in pieces:
        assert piece.first_line == 1 + before
        before += piece.data.count(b"\n")
