"""A NaN or missing mean never passes a threshold in the warehouse's statuses
(sql/agg_segment_metrics.sql) and never poisons a baseline (sql/rpt_regression.sql).

DuckDB orders NaN above every number, so `NaN >= 0.65` is true: one trace scored NaN made its
segment's mean NaN and the status `pass` (issue 27). Values are inserted by hand here, as a
warehouse written before grades were bounded may hold them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse import nightly
from retrieval_pipeline.warehouse.connection import connect

D1, D2, D3 = date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30)
ALL = OVERALL_SEGMENT


def add_trace(
    conn: duckdb.DuckDBPyConnection, day: date, trace_id: str, segment: str, value: float | None
) -> None:
    """One trace of variant A in `traces`, and its ndcg@10 in `query_metrics` (None:
    unannotated)."""
    conn.execute(
        "insert into traces values ($day, $id, 'q', $day::timestamptz, $segment, 'A', null,"
        " [], 0, $judged, [], 'test.jsonl', 1, 0)",
        {"day": day, "id": trace_id, "segment": segment, "judged": value is not None},
    )
    conn.execute(
        "insert into query_metrics values ($day, $id, 'q', $segment, 'A', $annotated, 1,"
        " 'ndcg@10', $value)",
        {
            "day": day,
            "id": trace_id,
            "segment": segment,
            "annotated": value is not None,
            "value": value,
        },
    )


def config(min_annotated: int, trailing_days: int = 7) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "metrics": ["ndcg@10"],
            "thresholds": {"ndcg@10": 0.65},
            "checks": {"min_annotated_traces": min_annotated},
            "baseline": {"trailing_days": trailing_days},
        }
    )


@pytest.fixture
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect()
    yield connection
    connection.close()


def statuses(frame: pd.DataFrame) -> dict[tuple[str, date], tuple[str, float]]:
    return {
        (row["segment"], pd.Timestamp(row["partition_date"]).date()): (row["status"], row["mean"])
        for row in frame.to_dict(orient="records")
    }


def test_a_nan_mean_fails_its_threshold(conn: duckdb.DuckDBPyConnection) -> None:
    # multi_hop misses its threshold for real (0.449 < 0.650); one NaN trace made its mean NaN
    add_trace(conn, D3, "t1", "multi_hop", 0.449)
    add_trace(conn, D3, "t2", "multi_hop", math.nan)
    add_trace(conn, D3, "t3", "faq", 0.9)
    rows = statuses(nightly.build_segment_metrics(conn, config(1), D3, D3))
    status, mean = rows[("multi_hop", D3)]
    assert status == "fail" and math.isnan(mean)
    # the overall row pools multi_hop's NaN: it fails too; faq alone still passes
    assert rows[(ALL, D3)][0] == "fail"
    assert rows[("faq", D3)] == ("pass", pytest.approx(0.9))


def test_a_nan_mean_fails_even_below_the_minimum_of_annotated_traces(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    add_trace(conn, D3, "t1", "multi_hop", math.nan)
    rows = statuses(nightly.build_segment_metrics(conn, config(20), D3, D3))
    assert rows[("multi_hop", D3)][0] == "fail"


def test_no_mean_where_a_verdict_is_due_fails(conn: duckdb.DuckDBPyConnection) -> None:
    # min_annotated_traces = 0: a verdict is due whatever the count, and there is no mean
    add_trace(conn, D3, "t1", "multi_hop", None)
    rows = statuses(nightly.build_segment_metrics(conn, config(0), D3, D3))
    status, mean = rows[("multi_hop", D3)]
    assert status == "fail" and pd.isna(mean)
    # with a minimum not reached it is no verdict either way, as before
    rows = statuses(nightly.build_segment_metrics(conn, config(1), D3, D3))
    assert rows[("multi_hop", D3)][0] == "insufficient"


def test_a_nan_day_is_left_out_of_the_baseline(conn: duckdb.DuckDBPyConnection) -> None:
    add_trace(conn, D1, "a1", "faq", 0.8)
    add_trace(conn, D1, "a2", "faq", 0.6)
    add_trace(conn, D2, "b1", "faq", math.nan)
    add_trace(conn, D3, "c1", "faq", 0.5)
    settings = config(1, trailing_days=2)
    nightly.build_segment_metrics(conn, settings, D1, D3)
    rows = nightly.build_regression_rows(conn, settings, D3)
    faq = rows[rows["segment"] == "faq"].iloc[0]
    # D1 alone: (0.8 + 0.6) / 2 over 2 traces; D2's NaN is not a day with data
    assert (faq["baseline"], faq["baseline_days"], faq["baseline_n"]) == (
        pytest.approx((0.8 + 0.6) / 2),
        1,
        2,
    )
    assert faq["delta"] == pytest.approx(0.5 - 0.7)
    assert faq["status"] == "fail"
