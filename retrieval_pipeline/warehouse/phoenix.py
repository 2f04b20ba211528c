"""A Phoenix store's tables both ways (docs/phoenix.md): the day's HUMAN/LLM grade pairs kept for
the agreement, and the day's per-trace scores read back a batch at a time for the span
annotations written to Phoenix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import date

import duckdb
import pandas as pd

from retrieval_pipeline.ingest.phoenix_annotations import SpanScore
from retrieval_pipeline.warehouse.partitions import replace_partitions
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql

AgreementRow = tuple[str, float, float, int]  # segment, HUMAN grade, LLM grade, documents


def replace_label_pairs(
    conn: duckdb.DuckDBPyConnection, day: date, pairs: Counter[tuple[str, float, float]]
) -> None:
    """Replace `day` in `label_agreement` with `pairs` ((segment, human, llm) -> documents)."""
    frame = pd.DataFrame(
        [(s, float(h), float(m), int(n)) for (s, h, m), n in sorted(pairs.items())],
        columns=["segment", "human_grade", "llm_grade", "documents"],
    ).astype({"segment": "object", "human_grade": "float64", "llm_grade": "float64"})
    with registered(conn, "stg_label_agreement", frame):
        params: dict[str, object] = {"partition_date": day}
        replace_partitions(conn, "label_agreement", [day], "int_label_agreement", params)


def read_label_pairs(conn: duckdb.DuckDBPyConnection, day: date) -> list[AgreementRow]:
    """The stored (segment, human grade, llm grade, documents) rows of `day`."""
    rows = conn.execute(load_sql("rpt_label_agreement"), {"day": day}).fetchall()
    return [(str(s), float(h), float(m), int(n)) for s, h, m, n in rows]


def span_scores(
    conn: duckdb.DuckDBPyConnection, day: date, metrics: Sequence[str], batch: int
) -> Iterator[SpanScore]:
    """The day's scored spans' values of `metrics` (sql/rpt_span_scores.sql: the RETRIEVER spans'
    traces, and each RERANKER span's output and gain), `batch` rows held at a time; `conn` runs
    nothing else until they are read."""
    result = conn.execute(load_sql("rpt_span_scores"), {"day": day, "metrics": list(metrics)})
    while rows := result.fetchmany(batch):
        for trace_id, metric, value in rows:
            yield SpanScore(str(trace_id), str(metric), float(value))
