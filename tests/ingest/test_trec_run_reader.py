"""TREC run files read into one trace per query, in trec_eval's order, bad lines quarantined."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retrieval_pipeline.ingest import trec
from retrieval_pipeline.ingest.trec import (
    TRACE_SCHEMA,
    TrecRun,
    TrecRunError,
    read_trec_run,
    stream_trec_run,
)
from retrieval_pipeline.store import DayBatches

TREC_EVAL = Path(__file__).resolve().parents[1] / "data" / "trec_eval"
WHEN = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _counts_add_up(run: TrecRun) -> None:
    assert run.read == run.kept + run.quarantined
    assert run.kept == sum(len(docs) for docs in run.ranked().values())


def test_ties_are_broken_by_docno_descending_and_the_rank_column_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text(
        "q1 Q0 dA 1 1.5 sys\n"
        "q1 Q0 dC 2 1.5 sys\n"  # ties with dA and dB: dC, dB, dA
        "q1 Q0 dB 3 1.5 sys\n"
        "q1 Q0 dZ 9 2.0e0 sys\n"  # the highest score, whatever its rank says
        "q1 Q0 dY 8 -3 sys\n"
        "q0 Q0 x 1 0.1 sys\n"
        "q0 Q0 X 2 0.1 sys\n"  # byte order: 'x' > 'X'
    )
    run = read_trec_run(path, served_at=WHEN)
    _counts_add_up(run)
    assert run.ranked() == {"q0": ["x", "X"], "q1": ["dZ", "dC", "dB", "dA", "dY"]}
    assert run.table().schema == TRACE_SCHEMA
    assert run.table().to_pylist()[0] == {
        "trace_id": "q0",
        "query_id": "q0",
        "timestamp": "2026-11-30T12:00:00.000000Z",
        "retrieved_ids": ["x", "X"],
        "variant": "sys",
        "segment": "unknown",
    }


def test_bad_lines_are_quarantined_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text(
        "# produced by sys\n"  # 1 skipped
        "q1 Q0 d1 1 3.0 a\n"  # 2
        "q1 Q0 d2 2 2.0\n"  # 3: five fields
        "q1 Q0 d3 3 abc a\n"  # 4
        "q1 Q0 d4 4 nan a\n"  # 5
        "q1 Q0 d1 5 1.0 a\n"  # 6: d1 again; line 2 kept
        "\n"  # 7 skipped
        "   # indented comment\n"  # 8 skipped, as trec_eval skips it
        "q2 Q0 d9 1 1.0 b extra fields\n"  # 9: fields after the sixth ignored
        "q2 Q0 d8 2 inf b\n"  # 10
    )
    run = read_trec_run(path, served_at=WHEN)
    _counts_add_up(run)
    assert (run.read, run.kept, run.quarantined, run.skipped) == (7, 2, 5, 3)
    assert run.ranked() == {"q1": ["d1"], "q2": ["d9"]}
    quarantine = run.quarantine.to_pydict()
    assert list(zip(quarantine["source_line"], quarantine["reason"], strict=True)) == [
        (3, "has 5 fields; a run line is `qid Q0 docno rank score tag` (6 fields)"),
        (4, "score is not a number (got 'abc')"),
        (5, "score is not finite (got 'nan')"),
        (6, "document d1 is already ranked for query q1 (line 2)"),
        (10, "score is not finite (got 'inf')"),
    ]
    assert set(quarantine["source_file"]) == {str(path)}
    assert quarantine["raw_record"][0] == "q1 Q0 d2 2 2.0"
    # the variant is the tag of the query's first line; the run id that of the file's last line
    assert run.table()["variant"].to_pylist() == ["a", "b"]
    assert run.run_id == "b"


def test_trec_evals_own_run_in_its_order(tmp_path: Path) -> None:
    """results.test against a plain-Python sort: docno descending, then (stable) score
    descending."""
    run = read_trec_run(TREC_EVAL / "results.test", served_at=WHEN)
    _counts_add_up(run)
    assert (run.read, run.kept, run.quarantined, run.run_id) == (1500, 1500, 0, "STANDARD")
    lines = [line.split() for line in (TREC_EVAL / "results.test").read_text().splitlines()]
    expected: dict[str, list[str]] = {}
    for qid in sorted({fields[0] for fields in lines}):
        rows = [(fields[2], float(fields[4])) for fields in lines if fields[0] == qid]
        rows.sort(key=lambda row: row[0], reverse=True)
        rows.sort(key=lambda row: row[1], reverse=True)
        expected[qid] = [doc for doc, _ in rows]
    assert run.ranked() == expected
    assert sum(len(set(docs)) for docs in expected.values()) == 1500


def test_served_at_defaults_to_the_files_modification_time(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text("q Q0 d 1 1 t\n")
    os.utime(path, (WHEN.timestamp(), WHEN.timestamp()))
    assert read_trec_run(path).table()["timestamp"].to_pylist() == ["2026-11-30T12:00:00.000000Z"]


def test_a_folder_or_an_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TrecRunError, match="a TREC run is one file, not a folder"):
        read_trec_run(tmp_path)
    (tmp_path / "empty.txt").write_text("")
    empty = read_trec_run(tmp_path / "empty.txt", served_at=WHEN)
    assert (empty.read, empty.table().num_rows, empty.run_id) == (0, 0, None)


def _generated_run(path: Path, queries: int, per_query: int, grouped: bool = True) -> Path:
    """A run with ties, a repeated document and bad lines; grouped by query unless `grouped` is
    false (then every query's last line comes at the end)."""
    lines: list[str] = []
    tail: list[str] = []
    for q in range(queries):
        for rank in range(per_query):
            score = float(per_query - rank) // 2  # pairs of equal scores: docno breaks the tie
            line = f"q{q} Q0 d{(q * 3 + rank) % 50} {rank} {score} tag{q % 3}"
            (tail if not grouped and rank == per_query - 1 else lines).append(line)
        lines.append(f"q{q} Q0 d{q * 3 % 50} 99 7.0 tag")  # a repeat of the first document
        lines.append(f"q{q} Q0 dx 1 abc tag")  # score not a number
    lines.append("qbad Q0 d1 1 nan tag")  # a query with no valid line
    path.write_text("\n".join(lines + tail) + "\n")
    return path


def _sorted_rows(run: TrecRun) -> list[dict[str, object]]:
    return sorted(run.table().to_pylist(), key=lambda row: str(row["query_id"]))


@pytest.mark.parametrize("grouped", [True, False])
def test_a_streamed_run_equals_the_run_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grouped: bool
) -> None:
    """`stream_trec_run` (two passes, whole queries at a time) gives the records, quarantine and
    counts of `read_trec_run`; a run whose queries are not grouped is read whole."""
    path = _generated_run(tmp_path / "run.txt", queries=40, per_query=30, grouped=grouped)
    monkeypatch.setattr(trec, "GROUP_LINES", 100)  # many batches of whole queries
    whole, streamed = read_trec_run(path, served_at=WHEN), stream_trec_run(path, served_at=WHEN)
    _counts_add_up(whole)
    assert isinstance(streamed.records, DayBatches) is grouped
    assert _sorted_rows(streamed) == _sorted_rows(whole)
    assert streamed.quarantine.equals(whole.quarantine)
    counts = ("read", "kept", "quarantined", "skipped", "queries", "run_id", "dropped")
    assert [getattr(streamed, name) for name in counts] == [getattr(whole, name) for name in counts]
    assert (whole.queries, whole.quarantined, whole.dropped) == (40, 40 * 2 + 1, ("qbad",))


def test_a_streamed_run_is_made_records_in_bounded_batches_of_whole_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch holds whole queries of about GROUP_LINES lines: never the whole file."""
    path = _generated_run(tmp_path / "run.txt", queries=200, per_query=25)
    monkeypatch.setattr(trec, "GROUP_LINES", 120)
    monkeypatch.setattr(trec, "READ_BYTES", 512)  # blocks of about 20 lines
    run = stream_trec_run(path, served_at=WHEN)
    assert isinstance(run.records, DayBatches)
    batches = list(run.records.batches())
    documents = [sum(map(len, b.column("retrieved_ids").to_pylist())) for b in batches]
    queries = [q for b in batches for q in b.column("query_id").to_pylist()]
    assert len(queries) == len(set(queries)) == 200  # each query once, whole
    # a batch is cut once GROUP_LINES lines are held, at the last query's start: at most
    # GROUP_LINES, a block of lines (512 bytes, lines of 20 bytes or more) and a query's 27 lines
    assert max(documents) <= 120 + 512 // 20 + 27
    assert len(batches) > 20 and sum(documents) == 200 * 25
