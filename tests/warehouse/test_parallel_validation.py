"""Parallel validation (docs/scaling.md): pieces validated by several workers at once give the
rows, quarantine reasons and counts of one validating thread, repeats across pieces included."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_pipeline import environment, resources_budget
from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.warehouse import parallel_validation
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.ingestion import IngestCounts, ingest_traces
from retrieval_pipeline.warehouse.judgments import load_judgments
from retrieval_pipeline.warehouse.sources import NumberedFiles

TS = "2026-11-30T10:00:00Z"
# two records a piece, none joined: a day of a few lines is many pieces, several in flight at once
SMALL_PIECE_LINES = 2
SMALL_PIECE_BYTES = 300


def _record(trace: str, **changes: object) -> str:
    fields = {
        "trace_id": trace,
        "query_id": f"q-{trace}",
        "timestamp": TS,
        "segment": "faq",
        "retrieved_ids": ["d1", "d2", "d3", "d2"],
        "relevance_scores": {"d1": 2, "d3": 1},
    }
    return json.dumps({**fields, **changes})


def _day(folder: Path) -> tuple[NumberedFiles, Path, Path, Path]:
    """Three files of one day: repeats within a piece, across pieces and across files, records
    that are not valid, one labelled by the judgments, and typed Parquet rows."""
    folder.mkdir()
    a, b, c = folder / "a.jsonl", folder / "b.jsonl", folder / "c.parquet"
    a_lines = [
        _record("t1"),  # 1
        _record("t2"),  # 2
        _record("t1"),  # 3: repeats line 1
        '{"trace_id": "t9", ',  # 4: not JSON
        _record("t3"),  # 5
        _record("t2"),  # 6: repeats line 2
        _record("t4", retrieved_ids="d1,d2"),  # 7: ids as a string
        _record("t5", relevant_docs=["d1"]),  # 8: a field a trace record does not have
        _record("t1"),  # 9: repeats line 1
        _record("t6", retrieved_ids=["d5", "d5", "d6"]),  # 10: a repeated id
        _record("t8", query_id="judged").replace(', "relevance_scores": {"d1": 2, "d3": 1}', ""),
    ]
    a.write_text("\n".join(a_lines) + "\n")
    b_lines = [_record("t3"), _record("t7"), _record("t7"), _record("t2")]
    b.write_text("\n".join(b_lines) + "\n")
    rows = [json.loads(_record("t1")), json.loads(_record("t10"))]
    for row in rows:
        row["relevance_scores"] = list(row["relevance_scores"].items())
    scores = pa.map_(pa.string(), pa.int64())
    pq.write_table(
        pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("trace_id", pa.string()),
                    ("query_id", pa.string()),
                    ("timestamp", pa.string()),
                    ("segment", pa.string()),
                    ("retrieved_ids", pa.list_(pa.string())),
                    ("relevance_scores", scores),
                ]
            ),
        ),
        c,
    )
    judgments = folder / "judgments.jsonl"
    judgments.write_text('{"query_id": "judged", "doc_id": "d2", "grade": 3}\n')
    return NumberedFiles(((0, a), (1, b), (2, c))), a, b, judgments


def _ingested(
    tmp_path: Path, name: str, source: NumberedFiles, judgments: Path | None = None
) -> tuple[IngestCounts, list[dict[str, Any]], list[dict[str, Any]]]:
    conn = connect(tmp_path / f"{name}.duckdb")
    try:
        if judgments is not None:
            load_judgments(conn, [judgments])
        counts = ingest_traces(conn, source)
        traces = conn.sql("select * from traces order by source_file, source_line").fetchall()
        columns = [c[0] for c in conn.sql("select * from traces limit 0").description]
        quarantine = conn.sql(
            "select * from quarantine order by source_file, source_line"
        ).to_arrow_table()
        rows = [dict(zip(columns, row, strict=True)) for row in traces]
        return counts, rows, quarantine.to_pylist()
    finally:
        conn.close()


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "PIECE_LINES", SMALL_PIECE_LINES)
    monkeypatch.setattr(jsonl, "PIECE_BYTES", SMALL_PIECE_BYTES)


def test_workers_give_the_rows_reasons_and_counts_of_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_pieces: None
) -> None:
    source, a, b, judgments = _day(tmp_path / "day")
    monkeypatch.setenv(environment.VALIDATION_WORKERS, "1")
    one = _ingested(tmp_path, "one", source, judgments)

    calls: list[int] = []
    across = parallel_validation.repeats_across_pieces

    def counted(*args: Any) -> pa.Table:
        staged = args[2]
        changed = across(*args)
        calls.append(int(staged.column("reason") != changed.column("reason")))
        return changed

    monkeypatch.setattr(parallel_validation, "repeats_across_pieces", counted)
    for workers in (2, 3):
        monkeypatch.setenv(environment.VALIDATION_WORKERS, str(workers))
        counts, traces, quarantine = _ingested(tmp_path, f"k{workers}", source, judgments)
        assert counts.validation_workers == workers
        assert (replace(counts, validation_workers=1), traces, quarantine) == one
    # the parallel path ran over many pieces, and some repeats were only seen across them
    assert len(calls) >= 2 * 5 and sum(calls) >= 2 * 2

    counts, traces, quarantine = one
    # 17 records: 1 not JSON, 1 with its ids as a string, 7 repeats of a valid trace_id
    assert (counts.read, counts.valid, counts.quarantined) == (17, 17 - 9, 9)
    # t6's second d5, and the second d2 of each of the 7 other valid traces
    assert counts.duplicate_ids_dropped == 1 + 7
    assert counts.unknown_fields == (("relevant_docs", 1),)
    reasons = {(Path(r["source_file"]).name, r["source_line"]): r["reason"] for r in quarantine}
    first = "duplicate trace_id {} (first seen at {} line {})"
    assert reasons[("a.jsonl", 3)] == first.format("t1", a, 1)
    assert reasons[("a.jsonl", 6)] == first.format("t2", a, 2)
    assert reasons[("a.jsonl", 9)] == first.format("t1", a, 1)
    assert reasons[("b.jsonl", 1)] == first.format("t3", a, 5)
    assert reasons[("b.jsonl", 3)] == first.format("t7", b, 2)
    assert reasons[("b.jsonl", 4)] == first.format("t2", a, 2)
    assert reasons[("c.parquet", 1)] == first.format("t1", a, 1)
    assert reasons[("a.jsonl", 4)] == "malformed JSON"
    assert len(reasons) == 9
    # a repeat keeps its record's own text; the judgments label the trace without labels
    texts = {(Path(r["source_file"]).name, r["source_line"]): r["raw_record"] for r in quarantine}
    assert json.loads(texts[("b.jsonl", 1)]) == json.loads(_record("t3"))
    assert json.loads(texts[("c.parquet", 1)])["trace_id"] == "t1"
    judged = next(t for t in traces if t["trace_id"] == "t8")
    assert [(label["doc_id"], label["grade"], label["rank"]) for label in judged["labels"]] == [
        ("d2", 3.0, 2)
    ]
    valid = ["t1", "t10", "t2", "t3", "t5", "t6", "t7", "t8"]
    assert sorted(t["trace_id"] for t in traces) == valid


_lines = st.lists(
    st.one_of(
        st.builds(_record, st.sampled_from(["t1", "t2", "t3", "t4"])),
        st.builds(
            lambda trace: _record(trace, timestamp="yesterday"), st.sampled_from(["t1", "t2"])
        ),
        st.just('{"trace_id": "t1"'),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=_lines, second=_lines)
def test_any_day_gives_the_same_rows_with_three_workers(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    small_pieces: None,
    first: list[str],
    second: list[str],
) -> None:
    folder = tmp_path_factory.mktemp("day")
    files = []
    for order, lines in enumerate((first, second)):
        path = folder / f"{order}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files.append((order, path))
    source = NumberedFiles(tuple(files))
    results = []
    for workers in ("1", "3"):
        monkeypatch.setenv(environment.VALIDATION_WORKERS, workers)
        results.append(_ingested(folder, f"k{workers}", source))
    counts, traces, quarantine = results[1]
    assert (replace(counts, validation_workers=1), traces, quarantine) == results[0]


def test_the_default_is_one_worker_per_four_threads_within_one_to_eight() -> None:
    workers = resources_budget.validation_workers
    assert [workers(t, {}) for t in (1, 2, 4, 5, 8, 16, 32, 33, 64)] == [1, 1, 1, 2, 2, 4, 8, 8, 8]
    assert workers(2, {environment.VALIDATION_WORKERS: "3"}) == 3


@pytest.mark.parametrize("text", ["0", "-1", "two", "65", "1.5"])
def test_a_worker_count_that_is_not_a_whole_number_from_1_is_refused_by_name(text: str) -> None:
    with pytest.raises(environment.EnvironmentValueError, match=environment.VALIDATION_WORKERS):
        resources_budget.validation_workers(4, {environment.VALIDATION_WORKERS: text})
