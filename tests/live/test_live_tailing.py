"""Reading what arrived (`retrieval_pipeline.live.tailing`, `live.advance`): growing JSON-lines
and .gz files, Parquet rows, and the trace store read from a cursor."""

from __future__ import annotations

import gzip
import json
from datetime import date, timedelta
from pathlib import Path

from retrieval_pipeline.live.advance import advance
from retrieval_pipeline.live.tailing import (
    FileProgress,
    StoreCursor,
    read_new_lines,
    read_new_parquet_rows,
    read_store_arrivals,
)
from retrieval_pipeline.records import parse_record
from tests.live.traces import DOCS, T0, config, windows


def test_a_partially_written_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    found, progress, problem = read_new_lines(path, FileProgress())
    assert [(a.line, a.text) for a in found] == [(1, b'{"a": 1}')] and problem is None
    assert progress.offset == len(b'{"a": 1}\n')
    assert read_new_lines(path, progress)[0] == []
    with path.open("ab") as handle:
        handle.write(b"2}\n\n")
    found, progress, _ = read_new_lines(path, progress)
    assert [(a.line, a.text) for a in found] == [(2, b'{"b": 2}')]
    assert progress.lines == 3  # the blank line is consumed and numbered, not a record
    assert read_new_lines(path, progress)[0] == []


def test_final_reads_the_unterminated_last_line_and_bom_crlf_are_handled(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree")
    found, progress, _ = read_new_lines(path, FileProgress(), final=True)
    assert [(a.line, a.text) for a in found] == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert progress.offset == path.stat().st_size


def test_limit_reads_a_file_in_pieces_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(f"line{i}\n" for i in range(1, 6)))
    progress, seen = FileProgress(), []
    for _ in range(4):
        found, progress, _ = read_new_lines(path, progress, limit=2)
        seen.append([a.line for a in found])
    assert seen == [[1, 2], [3, 4], [5], []]


def test_a_growing_gzip_file_is_read_once_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    whole = gzip.compress(b"".join(f"line{i}\n".encode() for i in range(1, 201)))
    path.write_bytes(whole[: len(whole) // 2])  # still being written
    first, progress, problem = read_new_lines(path, FileProgress())
    assert problem is None and first
    path.write_bytes(whole)
    rest, progress, _ = read_new_lines(path, progress)
    assert [a.line for a in first + rest] == list(range(1, 201))
    assert [a.text for a in first + rest] == [f"line{i}".encode() for i in range(1, 201)]


def test_a_file_that_shrank_is_reported_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("a\nb\n")
    _, progress, _ = read_new_lines(path, FileProgress())
    path.write_text("c\n")
    found, after, problem = read_new_lines(path, progress)
    assert found == [] and after == progress
    assert problem is not None and "shrank" in problem


def test_store_arrivals_in_day_and_name_order_from_the_start_day(tmp_path: Path) -> None:
    from retrieval_pipeline.store import LocalTraceStore

    for day, name, lines in [
        ("2026-03-01", "a.jsonl", ["old"]),
        ("2026-03-02", "b.jsonl", ["b1", "b2"]),
        ("2026-03-02", "a.jsonl", ["a1"]),
        ("2026-03-03", "a.jsonl", ["c1"]),
    ]:
        folder = tmp_path / "traces" / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("".join(f"{line}\n" for line in lines))
    store = LocalTraceStore(tmp_path)
    batch = read_store_arrivals(store, StoreCursor(), backfill_days=1)
    assert batch.start_day == date(2026, 3, 2)
    assert [a.text for a in batch.arrivals] == [b"a1", b"b1", b"b2", b"c1"]
    cursor = StoreCursor(start_day=batch.start_day, files=batch.files)
    again = read_store_arrivals(store, StoreCursor.from_json(cursor.to_json()))
    assert again.arrivals == []


def test_files_growing_side_by_side_are_merged_in_time_order(tmp_path: Path) -> None:
    from retrieval_pipeline.store import LocalTraceStore

    def line(n: int) -> str:
        at = (T0 + timedelta(seconds=10 * n)).isoformat()
        record = {"trace_id": f"t{n}", "query_id": "q", "timestamp": at}
        return json.dumps(record | {"retrieved_ids": DOCS, "relevant_ids": ["d1"]}) + "\n"

    folder = tmp_path / "traces" / "date=2026-03-02"
    folder.mkdir(parents=True)
    # two writers, alternate traces: read file by file, b's traces would all come in late
    (folder / "a.jsonl").write_text("".join(line(n) for n in range(0, 40, 2)))
    (folder / "b.jsonl").write_text("".join(line(n) for n in range(1, 40, 2)))
    cfg = config(window_records=None, window_seconds=60, rules=())
    step = advance(LocalTraceStore(tmp_path), StoreCursor(), cfg)
    closed = windows(step.events)
    assert [(w.records, w.late) for w in closed] == [(6, 0)] * 6  # 400 s: 6 full windows
    assert step.lines == 40 and step.bad == []
    assert step.cursor.monitor is not None and step.cursor.monitor["totals"]["records"] == 40


def test_parquet_rows_read_as_the_same_records_as_json_lines(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"trace_id": "p1", "query_id": "q", "timestamp": "2026-03-02T10:00:00Z"}
        | {"retrieved_ids": ["d1", "d2"], "relevant_ids": ["d2"], "segment": "multi_hop"},
        {"trace_id": "p2", "query_id": "q", "timestamp": "2026-03-02T10:00:01Z"}
        | {"retrieved_ids": ["d1"], "relevant_ids": None, "segment": "multi_hop"},
    ]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    found, progress, problem = read_new_parquet_rows(path, FileProgress(), limit=1)
    more, progress, _ = read_new_parquet_rows(path, progress)
    assert problem is None and [a.line for a in found + more] == [1, 2]
    from retrieval_pipeline.records import parse_line

    assert [parse_line(a.text) for a in found + more] == [parse_record(r) for r in rows]
    assert read_new_parquet_rows(path, progress)[0] == []


def test_a_parquet_column_named_as_the_row_numbers_is_reported_and_read_again(
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"trace_id": "p1", "query_id": "q", "timestamp": "2026-03-02T10:00:00Z"}
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([row | {"retrieved_ids": ["d1"], "__file_order": 3}]), path)
    found, progress, problem = read_new_parquet_rows(path, FileProgress())
    assert found == [] and progress.offset == 0
    assert (
        problem == f"{path}: column name __file_order is reserved; read again when the file changes"
    )
    # unchanged, it is not read again; rewritten without the column, it is
    assert read_new_parquet_rows(path, progress) == ([], progress, None)
    pq.write_table(pa.Table.from_pylist([row | {"retrieved_ids": ["d1"]}]), path)
    found, _, problem = read_new_parquet_rows(path, progress)
    assert problem is None and [a.line for a in found] == [1]
