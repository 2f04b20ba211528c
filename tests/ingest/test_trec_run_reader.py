"""TREC run files read into one trace per query, in trec_eval's order, bad lines quarantined."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retrieval_pipeline.ingest.trec import TRACE_SCHEMA, TrecRun, TrecRunError, read_trec_run

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
    assert run.records.schema == TRACE_SCHEMA
    assert run.records.to_pylist()[0] == {
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
    assert run.records["variant"].to_pylist() == ["a", "b"]
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
    assert read_trec_run(path).records["timestamp"].to_pylist() == ["2026-11-30T12:00:00.000000Z"]


def test_a_folder_or_an_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TrecRunError, match="a TREC run is one file, not a folder"):
        read_trec_run(tmp_path)
    (tmp_path / "empty.txt").write_text("")
    empty = read_trec_run(tmp_path / "empty.txt", served_at=WHEN)
    assert (empty.read, empty.records.num_rows, empty.run_id) == (0, 0, None)
