"""The precedence of a trace's own labels over its query's judgments (docs/judgments.md): a
trace's own labels and its own `label_source` win; a trace with no labels takes the judgments'
labels, and their `label_source` unless it names one of its own."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.judgments import load_judgments

TS = "2026-11-30T10:00:00Z"


def test_a_traces_own_labels_and_label_source_win_over_the_judgments(
    conn: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    base = {"query_id": "q", "timestamp": TS, "retrieved_ids": ["d1", "d2"]}
    records = [
        base | {"trace_id": "own", "relevant_ids": ["d2"], "label_source": "editorial"},
        base | {"trace_id": "own-unnamed", "relevance_scores": {"d2": 3}},
        base | {"trace_id": "bare"},
        base | {"trace_id": "named", "label_source": "editorial"},
    ]
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in records))
    judgments = tmp_path / "j.jsonl"
    judgments.write_text(
        '{"query_id": "q", "doc_id": "d1", "grade": 2, "label_source": "clicks"}\n'
    )
    load_judgments(conn, [judgments])
    ingest_traces(conn, [traces])
    table = conn.sql("select * from traces order by source_line").to_arrow_table().to_pylist()
    rows = [
        (r["trace_id"], r["label_source"], [(lab["doc_id"], lab["grade"]) for lab in r["labels"]])
        for r in table
    ]
    assert rows == [
        ("own", "editorial", [("d2", 1.0)]),  # its own labels and source
        ("own-unnamed", None, [("d2", 3.0)]),  # its own labels; no source of its own
        ("bare", "clicks", [("d1", 2.0)]),  # the judgments' labels and source
        ("named", "editorial", [("d1", 2.0)]),  # the judgments' labels, its own source
    ]
