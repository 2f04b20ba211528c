"""Why a mean moved (warehouse.attribution, docs/why.md) on stores with one known cause
injected on the day (tests/warehouse/why_stores.py): the report names the queries that carry
it first, the documents that fell, and the cause with its share, against contributions computed
here with pandas from query_metrics and the changes worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.reports.why import Explanation
from retrieval_pipeline.warehouse import attribution, nightly
from tests.warehouse import why_stores
from tests.warehouse.why_stores import CONFIG, DAY, DAYS, HARD, NEW_QUERY, QUERIES

HIT = ["q03", "q07"]


def explanation(
    tmp_path: Path, cause: str, keep_ids: bool = True
) -> tuple[Explanation, pd.DataFrame]:
    """The day's explanation of segment s / v's nDCG@10, and its per-query frame by pandas."""
    root = why_stores.write_store(tmp_path / "store", cause, [] if cause == "traffic" else HIT)
    conn = why_stores.build(root, tmp_path / "w.duckdb", keep_ids)
    try:
        report = build_report(nightly.read_regression_rows(conn, DAY, DAY), CONFIG, DAY)
        report = attribution.with_why(conn, CONFIG, report)
        frame = expected_contributions(conn)
    finally:
        conn.close()
    found = {(e.segment, e.metric): e for e in report.why}
    assert ("s", "ndcg@10") in found, "the drop is a miss, so it is explained"
    return found[("s", "ndcg@10")], frame


def expected_contributions(conn: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Each query's within, mix and new part, computed here from query_metrics with pandas."""
    values = conn.execute(
        "select partition_date, query_id, value from query_metrics"
        " where metric = 'ndcg@10' and is_annotated and value is not null"
    ).df()
    values["side"] = (values["partition_date"].dt.date == DAY).map({True: "day", False: "base"})
    means = values.pivot_table(index="query_id", columns="side", values="value", aggfunc="mean")
    counts = values.pivot_table(index="query_id", columns="side", values="value", aggfunc="size")
    shares = counts.fillna(0) / counts.sum()
    baseline = values[values["side"] == "base"]["value"].mean()
    frame = pd.DataFrame(
        {
            "day_share": shares["day"],
            "base_share": shares["base"],
            "day_mean": means["day"],
            "base_mean": means["base"],
        }
    )
    recurring = frame["day_mean"].notna() & frame["base_mean"].notna()
    frame["within"] = (frame["day_share"] * (frame["day_mean"] - frame["base_mean"])).where(
        recurring, 0.0
    )
    frame["mix"] = (
        (frame["day_share"] - frame["base_share"]) * (frame["base_mean"] - baseline)
    ).where(recurring, 0.0)
    frame["new"] = (frame["day_share"] * (frame["day_mean"] - baseline)).where(
        frame["base_mean"].isna(), 0.0
    )
    frame["contribution"] = frame["within"] + frame["mix"]
    frame.attrs["change"] = values[values["side"] == "day"]["value"].mean() - baseline
    return frame


def causes(e: Explanation) -> dict[str, float]:
    return dict(e.causes)


@pytest.mark.parametrize(
    ("cause", "named"),
    [("rankings", "rankings"), ("labels", "labels"), ("coverage", "coverage")],
)
def test_an_injected_cause_is_named_with_its_queries_and_share(
    tmp_path: Path, cause: str, named: str
) -> None:
    e, frame = explanation(tmp_path, cause)
    # 20 queries x 2 traces a day: 80 baseline traces, all at nDCG@10 = 1 but the 5 hard
    # queries' (0): baseline 60 / 80; the day: 42 traces (the new query's 2 at 1), of which
    # the two hit queries' 4 now score 0
    assert e.base_value == pytest.approx(60 / 80)
    assert e.day_value == pytest.approx((42 - 10 - 4) / 42)
    assert e.change == pytest.approx(frame.attrs["change"])
    # the hit queries first, each contributing its share of the day (2 / 42) x (0 - 1), plus
    # its mix, as pandas computes it
    assert [c.query_id for c in e.contributors[:2]] == HIT
    for c in e.contributors:
        assert c.contribution == pytest.approx(frame.loc[c.query_id, "contribution"])
    assert e.contributors[0].within == pytest.approx(2 / 42 * (0 - 1))
    assert e.top_share == pytest.approx(
        frame.loc[[c.query_id for c in e.contributors], "contribution"].sum()
        / frame.attrs["change"]
    )
    # the cause carries the two queries' within change, every other cause none; new queries
    # theirs; the parts add up to the change
    parts = causes(e)
    assert parts[named] == pytest.approx(2 * 2 / 42 * (0 - 1))
    assert parts[named] / e.change == pytest.approx(e.share(parts[named]))
    for other in ("rankings", "labels", "coverage"):
        if other != named:
            assert parts[other] == pytest.approx(0.0, abs=1e-12)
    assert parts["traffic mix"] == pytest.approx(frame["mix"].sum())
    assert parts["new queries"] == pytest.approx(frame["new"].sum())
    assert sum(parts.values()) == pytest.approx(e.change)
    assert parts["remainder"] == pytest.approx(0.0, abs=1e-12)
    assert e.largest_cause()[0] == named
    # the new query in a group of its own, with its day mean
    assert (e.new_queries, e.new_traces, e.new_day_mean) == (1, 2, 1.0)
    assert NEW_QUERY not in {c.query_id for c in e.contributors}


def test_pushed_down_documents_are_named_with_their_ranks(tmp_path: Path) -> None:
    e, _ = explanation(tmp_path, "rankings")
    change = e.contributors[0].change
    assert change is not None
    assert [(m.doc_id, m.grade_then, m.rank_then, m.rank_now) for m in change.fell] == [
        ("q03-rel", 3.0, 1, 11)
    ]
    assert change.entered == ()  # the ten above it are judged (grade 0)


def test_a_burst_of_unjudged_documents_is_named(tmp_path: Path) -> None:
    e, _ = explanation(tmp_path, "coverage")
    change = e.contributors[0].change
    assert change is not None
    assert [(m.doc_id, m.rank_then, m.rank_now) for m in change.fell] == [("q03-rel", 1, 11)]
    assert [(m.doc_id, m.grade_now, m.rank_then, m.rank_now) for m in change.entered] == [
        (f"q03-new{i}", None, None, i + 1) for i in range(5)
    ]


def test_stale_labels_are_named(tmp_path: Path) -> None:
    e, _ = explanation(tmp_path, "labels")
    change = e.contributors[0].change
    assert change is not None
    assert change.stale_now == ("q03-rel",)
    assert change.fell == ()  # still retrieved first; only its label went


def test_a_shift_toward_hard_queries_is_traffic_mix(tmp_path: Path) -> None:
    e, frame = explanation(tmp_path, "traffic")
    # baseline 60 / 80 = 0.75; the day: 15 easy queries x 2 at 1, 5 hard x 10 at 0 and the
    # new query's 2 at 1: 32 / 82
    assert e.day_value == pytest.approx(32 / 82)
    # a hard query: (10 / 82 - 4 / 80) x (0 - 0.75); an easy one: (2 / 82 - 4 / 80) x (1 - 0.75)
    hard = (10 / 82 - 4 / 80) * (0 - 0.75)
    assert [c.query_id for c in e.contributors[:5]] == HARD
    assert all(c.contribution == pytest.approx(hard) for c in e.contributors[:5])
    parts = causes(e)
    assert parts["traffic mix"] == pytest.approx(5 * hard + 15 * (2 / 82 - 4 / 80) * 0.25)
    assert parts["traffic mix"] == pytest.approx(frame["mix"].sum())
    assert parts["rankings"] == parts["labels"] == parts["coverage"] == pytest.approx(0.0)
    assert sum(parts.values()) == pytest.approx(e.change)
    assert e.largest_cause()[0] == "traffic mix"
    # 20 recurring queries, 10 shown; the first day is in the baseline window
    assert (e.recurring_queries, len(e.contributors)) == (len(QUERIES), 10)
    assert DAYS[0] >= CONFIG.baseline.window(DAY)[0]


@pytest.mark.parametrize("cause", ["rankings", "coverage"])
def test_without_stored_ids_the_ranks_of_the_labels_serve(tmp_path: Path, cause: str) -> None:
    """A warehouse that keeps no retrieved ids (store_retrieved_ids = false) has each label's
    rank: the same split and the same documents that fell, but no unjudged ids to name."""
    kept, _ = explanation(tmp_path / "kept", cause)
    bare, _ = explanation(tmp_path / "bare", cause, keep_ids=False)
    assert dict(bare.causes) == pytest.approx(dict(kept.causes), abs=1e-12)
    assert [c.query_id for c in bare.contributors] == [c.query_id for c in kept.contributors]
    first, kept_first = bare.contributors[0].change, kept.contributors[0].change
    assert first is not None and kept_first is not None
    assert first.fell == kept_first.fell
    assert first.entered == ()


def test_a_miss_without_a_number_is_not_explained(tmp_path: Path) -> None:
    """A day mean that is NaN (a score that could not be computed) fails its threshold with no
    change from the baseline: nothing to explain."""
    root = why_stores.write_store(tmp_path / "store", "rankings", HIT)
    conn = why_stores.build(root, tmp_path / "w.duckdb")
    try:
        conn.execute(
            "update query_metrics set value = 'nan'::double where partition_date = $day"
            " and trace_id = $trace and metric = 'ndcg@10'",
            {"day": DAY, "trace": f"{DAY}-q03-0"},
        )
        nightly.build_segment_metrics(conn, CONFIG, DAY, DAY)
        rows = nightly.build_regression_rows(conn, CONFIG, DAY)
        report = attribution.with_why(conn, CONFIG, build_report(rows, CONFIG, DAY))
    finally:
        conn.close()
    assert ("s", "v", "ndcg@10") in {(m.segment, m.variant, m.metric) for m in report.misses}
    assert all(m.value is not None and math.isnan(m.value) for m in report.misses)
    assert report.why == ()


@pytest.mark.parametrize(("cause", "reads_ids"), [("rankings", False), ("coverage", True)])
def test_the_day_s_id_lists_are_read_only_where_coverage_moved_the_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cause: str, reads_ids: bool
) -> None:
    """retrieved_ids, the widest column, is read (sql/attr_day_top.sql) only to name unjudged
    documents where they cost the mean something."""
    read: list[str] = []
    records = attribution._records

    def recording(
        conn: duckdb.DuckDBPyConnection, statement: str, params: dict[str, object]
    ) -> list[dict[str, Any]]:
        read.append(statement)
        return records(conn, statement, params)

    monkeypatch.setattr(attribution, "_records", recording)
    e, _ = explanation(tmp_path, cause)
    assert ("attr_day_top" in read) is reads_ids
    lead = e.contributors[0].change
    assert lead is not None and bool(lead.entered) is reads_ids
