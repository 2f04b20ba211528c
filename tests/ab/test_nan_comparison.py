"""A NaN score in the comparison window never passes the candidate's threshold: the A/B
comparison flags the cell in words instead of failing on "paired values must be finite numbers"
(issue 27). A warehouse written before grades were bounded may hold such values.
The NaN values are left out of the numbers (the candidate's level is its 24 other traces), and the
comparison is flagged for them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date

import duckdb
import pytest

from retrieval_pipeline.ab.day import compare_window
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.warehouse.ab_window import read_window
from retrieval_pipeline.warehouse.connection import connect

DAY = date(2026, 11, 30)


@pytest.fixture
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect()
    # 25 queries served by both arms: control 0.80 throughout, the candidate 0.85 but one NaN
    for n in range(25):
        for variant, value in (("control", 0.8), ("candidate", math.nan if n == 0 else 0.85)):
            connection.execute(
                "insert into query_metrics values ($day, $id, $query, 'multi_hop', $variant,"
                " true, 1, 'ndcg@10', $value)",
                {
                    "day": DAY,
                    "id": f"{variant}-{n}",
                    "query": f"q{n}",
                    "variant": variant,
                    "value": value,
                },
            )
    yield connection
    connection.close()


def test_a_nan_score_flags_the_candidate_in_words(conn: duckdb.DuckDBPyConnection) -> None:
    config = PipelineConfig.model_validate(
        {"metrics": ["ndcg@10"], "comparison": {"lookback_days": 1, "n_resamples": 99}}
    )
    result = compare_window(read_window(conn, DAY, config), DAY, config)
    assert result.flagged
    assert result.comparison is not None
    assert result.comparison.reasons == (
        "multi_hop: ndcg@10 is not a number (NaN) for 1 candidate trace, left out of the "
        "comparison",
        "all segments: ndcg@10 is not a number (NaN) for 1 candidate trace, left out of the "
        "comparison",
    )
    cell = result.comparison.cell("multi_hop", "ndcg@10")
    assert (cell.candidate_traces, cell.candidate_trace_mean) == (24, pytest.approx(0.85))
    assert (cell.n, cell.delta) == (24, pytest.approx(0.85 - 0.8))
