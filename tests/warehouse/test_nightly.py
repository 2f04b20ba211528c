"""The pipeline's own SQL (sql/agg_segment_metrics.sql, sql/rpt_regression.sql,
sql/agg_partition_quality.sql) on a DuckDB connection, with expectations as visible arithmetic."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.config import ChecksConfig, PipelineConfig
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse import nightly
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.trend import read_segment_trend

D1, D2, D3 = date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30)
Z = 1.959963984540054  # Phi^-1(0.975)
ALL = OVERALL_SEGMENT


def add_trace(
    conn: duckdb.DuckDBPyConnection,
    day: date,
    trace_id: str,
    segment: str,
    variant: str,
    values: dict[str, float] | None,
) -> None:
    """One trace in `traces` and its rows in `query_metrics` (values None: unannotated)."""
    conn.execute(
        "insert into traces values ($day, $id, 'q', $day::timestamptz, $segment, $variant, null,"
        " [], 0, $judged, [], 'test.jsonl', 1, 0)",
        {"day": day, "id": trace_id, "segment": segment, "variant": variant,
         "judged": values is not None},
    )  # fmt: skip
    for metric in ("ndcg@10", "mrr"):
        value = None if values is None else values.get(metric)
        conn.execute(
            "insert into query_metrics values ($day, $id, 'q', $segment, $variant, $annotated,"
            " 1, $metric, $value)",
            {"day": day, "id": trace_id, "segment": segment, "variant": variant,
             "annotated": values is not None, "metric": metric, "value": value},
        )  # fmt: skip


CONFIG = PipelineConfig(
    metrics=("ndcg@10", "mrr"),
    thresholds={"ndcg@10": 0.5},
    segment_thresholds={"s2": {"ndcg@10": 0.95}},
    checks=ChecksConfig(min_annotated_traces=2),
)


@pytest.fixture
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect()
    add_trace(connection, D3, "t1", "s1", "A", {"ndcg@10": 0.2, "mrr": 1.0})
    add_trace(connection, D3, "t2", "s1", "A", {"ndcg@10": 0.6, "mrr": 0.5})
    add_trace(connection, D3, "t3", "s1", "A", None)
    add_trace(connection, D3, "t4", "s2", "A", {"ndcg@10": 0.9, "mrr": 1.0})
    add_trace(connection, D3, "t5", "s3", "A", None)
    yield connection
    connection.close()


def rows_by_key(frame: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, object]]:
    return {(r["segment"], r["variant"], r["metric"]): r for r in frame.to_dict(orient="records")}


def test_segment_metrics_counts_means_and_intervals(conn: duckdb.DuckDBPyConnection) -> None:
    rows = rows_by_key(nightly.build_segment_metrics(conn, CONFIG, D3, D3))
    s1 = rows[("s1", "A", "ndcg@10")]
    assert (s1["traces"], s1["annotated_traces"], s1["n"]) == (3, 2, 2)
    assert s1["coverage"] == pytest.approx(2 / 3)
    mean, sd = (0.2 + 0.6) / 2, math.sqrt(((0.2 - 0.4) ** 2 + (0.6 - 0.4) ** 2) / (2 - 1))
    assert s1["mean"] == pytest.approx(mean)
    # Wilson's interval on n / phi traces (docs/intervals.md): phi = (n * sd^2 / (mean * (1 -
    # mean)) + 1) / (n + 1) = (2 * 0.08 / 0.24 + 1) / 3 = 5 / 9, so 2 * 9 / 5 = 3.6 traces.
    phi = (2 * sd**2 / (mean * (1 - mean)) + 1) / (2 + 1)
    assert phi == pytest.approx(5 / 9)
    assert (s1["ci_low"], s1["ci_high"]) == pytest.approx(wilson(mean, 2 / phi))
    # one scored trace: Wilson's interval for one observation
    s2 = rows[("s2", "A", "ndcg@10")]
    assert s2["n"] == 1 and s2["mean"] == pytest.approx(0.9)
    assert (s2["ci_low"], s2["ci_high"]) == pytest.approx(wilson(0.9, 1))
    # every interval lies in [0, 1] and holds its mean
    for row in rows.values():
        if not pd.isna(row["mean"]):
            low, mean, high = (float(row[k]) for k in ("ci_low", "mean", "ci_high"))  # type: ignore[arg-type]
            assert 0 <= low <= mean <= high <= 1


def wilson(p: float, m: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion p of m at z = Z."""
    centre = (p + Z**2 / (2 * m)) / (1 + Z**2 / m)
    half = Z / (1 + Z**2 / m) * math.sqrt(p * (1 - p) / m + Z**2 / (4 * m**2))
    return centre - half, centre + half


def test_overall_row_pools_every_segment_of_the_variant(conn: duckdb.DuckDBPyConnection) -> None:
    rows = rows_by_key(nightly.build_segment_metrics(conn, CONFIG, D3, D3))
    overall = rows[(ALL, "A", "ndcg@10")]
    assert (overall["traces"], overall["annotated_traces"]) == (5, 3)
    assert overall["coverage"] == pytest.approx(3 / 5)
    assert overall["mean"] == pytest.approx((0.2 + 0.6 + 0.9) / 3)
    assert rows[(ALL, "A", "mrr")]["mean"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)


def test_statuses_thresholds_and_margins(conn: duckdb.DuckDBPyConnection) -> None:
    rows = rows_by_key(nightly.build_segment_metrics(conn, CONFIG, D3, D3))
    s1 = rows[("s1", "A", "ndcg@10")]
    assert (s1["status"], s1["threshold"]) == ("fail", 0.5)
    assert s1["margin"] == pytest.approx(0.4 - 0.5)
    # the segment override applies; one annotated trace is below min_annotated = 2
    s2 = rows[("s2", "A", "ndcg@10")]
    assert (s2["status"], s2["threshold"], s2["min_annotated"]) == ("insufficient", 0.95, 2)
    # traces but none annotated: no mean, coverage 0, no verdict
    s3 = rows[("s3", "A", "ndcg@10")]
    assert (s3["annotated_traces"], s3["coverage"], s3["status"]) == (0, 0.0, "insufficient")
    assert pd.isna(s3["mean"])
    assert rows[(ALL, "A", "ndcg@10")]["status"] == "pass"
    assert {r["status"] for k, r in rows.items() if k[2] == "mrr"} == {"no_threshold"}


def test_rebuilding_a_day_replaces_it_and_leaves_other_days(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    add_trace(conn, D2, "u1", "s1", "A", {"ndcg@10": 0.7, "mrr": 1.0})
    nightly.build_segment_metrics(conn, CONFIG, D2, D3)
    first = nightly.read_segment_metrics(conn, D2, D3)
    nightly.build_segment_metrics(conn, CONFIG, D3, D3)
    pd.testing.assert_frame_equal(nightly.read_segment_metrics(conn, D2, D3), first)
    assert set(first["partition_date"].dt.date) == {D2, D3}


def test_an_empty_range_has_no_rows(conn: duckdb.DuckDBPyConnection) -> None:
    assert nightly.build_segment_metrics(conn, CONFIG, D1, D1).empty


def test_regression_baseline_is_the_pooled_trailing_mean(conn: duckdb.DuckDBPyConnection) -> None:
    add_trace(conn, D1, "a1", "s1", "A", {"ndcg@10": 0.5, "mrr": 1.0})
    add_trace(conn, D1, "a2", "s1", "A", {"ndcg@10": 0.7, "mrr": 1.0})
    add_trace(conn, D2, "b1", "s1", "A", {"ndcg@10": 0.9, "mrr": 1.0})
    nightly.build_segment_metrics(conn, CONFIG, D1, D3)
    rows = rows_by_key(nightly.build_regression_rows(conn, CONFIG, D3))
    s1 = rows[("s1", "A", "ndcg@10")]
    baseline = (0.5 + 0.7 + 0.9) / 3  # every annotated trace of the window, not mean of means
    assert s1["baseline"] == pytest.approx(baseline)
    assert s1["delta"] == pytest.approx(0.4 - baseline)
    assert (s1["baseline_days"], s1["baseline_n"]) == (2, 3)
    assert (s1["status"], s1["threshold"]) == ("fail", 0.5)
    # s2 had no data in the window
    assert pd.isna(rows[("s2", "A", "ndcg@10")]["baseline"])
    assert rows[("s2", "A", "ndcg@10")]["baseline_days"] == 0


def test_regression_previous_day_and_pinned_baselines(conn: duckdb.DuckDBPyConnection) -> None:
    add_trace(conn, D1, "a1", "s1", "A", {"ndcg@10": 0.5, "mrr": 1.0})
    add_trace(conn, D2, "b1", "s1", "A", {"ndcg@10": 0.9, "mrr": 1.0})
    nightly.build_segment_metrics(conn, CONFIG, D1, D3)
    previous = PipelineConfig.model_validate(
        CONFIG.model_dump() | {"baseline": {"policy": "previous_day"}}
    )
    rows = rows_by_key(nightly.build_regression_rows(conn, previous, D3))
    assert rows[("s1", "A", "ndcg@10")]["baseline"] == pytest.approx(0.9)
    pinned = PipelineConfig.model_validate(
        CONFIG.model_dump() | {"baseline": {"policy": "pinned", "pinned_date": D1}}
    )
    rows = rows_by_key(nightly.build_regression_rows(conn, pinned, D3))
    assert rows[("s1", "A", "ndcg@10")]["baseline"] == pytest.approx(0.5)


def test_quality_counts() -> None:
    conn = connect()
    counts = nightly.quality_counts(conn, D3, D3)
    assert (counts.records_read, counts.quarantine_rate, counts.stale_label_rate) == (0, None, None)
    conn.execute(
        "insert into quarantine values ($d, 'f', 1, null, null, 'malformed JSON', '{')", {"d": D3}
    )
    conn.execute("insert into labels values ($d, 't', 'x', 1, null)", {"d": D3})
    conn.execute("insert into labels values ($d, 't', 'y', 1, 'not in corpus')", {"d": D3})
    conn.execute("insert into labels values ($d, 't', 'z', 1, 'not in corpus')", {"d": D2})
    add_trace(conn, D3, "t1", "s", "A", None)
    counts = nightly.quality_counts(conn, D3, D3)
    assert (counts.records_read, counts.quarantined_records) == (2, 1)
    assert counts.quarantine_rate == pytest.approx(1 / 2)
    assert counts.stale_label_rate == pytest.approx(1 / 2)


def test_an_interval_stored_before_the_bounded_one_is_shown_clipped_to_0_1(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    """A day scored with the old normal interval may hold bounds past [0, 1]: the regression rows
    and the trend read them clipped (clamp_unit), an absent bound stays absent."""
    nightly.build_segment_metrics(conn, CONFIG, D3, D3)
    key = "partition_date = $day and segment = $segment and variant = 'A' and metric = $metric"
    stored = [("s1", "ndcg@10", -0.25, 1.25), ("s1", "mrr", 0.125, 1.5), ("s2", "mrr", None, 0.5)]
    for segment, metric, low, high in stored:
        conn.execute(
            f"update segment_metrics set ci_low = $low, ci_high = $high where {key}",
            {"day": D3, "segment": segment, "metric": metric, "low": low, "high": high},
        )
    # as stored -> as shown: below 0 reads 0, above 1 reads 1, inside is kept, null stays null
    shown = {("s1", "ndcg@10"): (0.0, 1.0), ("s1", "mrr"): (0.125, 1.0), ("s2", "mrr"): (None, 0.5)}
    nightly.build_regression_rows(conn, CONFIG, D3)
    regression = rows_by_key(nightly.read_regression_rows(conn, D3, D3))
    trend = rows_by_key(read_segment_trend(conn, D3, ["ndcg@10", "mrr"]))
    for (segment, metric), (low, high) in shown.items():
        for rows in (regression, trend):
            row = rows[(segment, "A", metric)]
            got_low = None if pd.isna(row["ci_low"]) else row["ci_low"]
            assert (got_low, row["ci_high"]) == (low, high)
