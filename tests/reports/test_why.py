"""The pure half of the attribution (reports/why_causes.py, reports/why.py, why_html.py): a
query's change split by re-scoring, what moved, and the report's forms, with expectations as
visible arithmetic."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from retrieval_pipeline.metrics import parse_metric
from retrieval_pipeline.reference import score_trace
from retrieval_pipeline.reports.why import (
    SPLIT_TRACES,
    TRACES_PER_SIDE,
    explain,
    split_plan,
    why_lead,
    why_markdown,
    why_table,
)
from retrieval_pipeline.reports.why_causes import (
    UNLABELLED,
    QueryTrace,
    Scoring,
    median_rank,
    ranking_from_labels,
    split_query,
)
from retrieval_pipeline.reports.why_html import why_html
from retrieval_pipeline.text import json_text

NDCG3 = Scoring(parse_metric("ndcg@3"), gain="linear")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
IDEAL = 2 + 1 / math.log2(3)  # labels {a: 2, b: 1}: linear gains 2, 1 at ranks 1, 2


def trace(
    on_day: bool, ranking: str, labels: dict[str, float], value: float, n: int = 0
) -> QueryTrace:
    """A trace ranking one-letter documents; a day trace's served top is its ranking."""
    top = tuple(ranking) if on_day else ()
    return QueryTrace(on_day, T0 + timedelta(hours=n), tuple(ranking), labels, value, top=top)


def test_unjudged_documents_above_the_judged_ones_are_coverage() -> None:
    labels = {"a": 2.0, "b": 1.0}
    day_value = (2 / math.log2(3) + 1 / math.log2(4)) / IDEAL  # [x, a, b]: x unjudged
    change = split_query(
        [trace(False, "abc", labels, 1.0), trace(True, "xab", labels, day_value)], NDCG3
    )
    assert change is not None
    # condensed, the day's list is [a, b] again: the whole change is the unjudged x's
    assert change.coverage == pytest.approx(day_value - 1)
    assert change.rankings == pytest.approx(0.0)
    assert change.labels == pytest.approx(0.0)
    assert [m.doc_id for m in change.entered] == ["x"]
    assert change.fell == ()  # a at rank 2 and b at 3 are still in the top 3


def test_the_same_labels_in_another_order_is_rankings() -> None:
    labels = {"a": 2.0, "b": 1.0}
    day_value = (1 + 2 / math.log2(3)) / IDEAL  # [b, a]
    change = split_query(
        [trace(False, "ab", labels, 1.0), trace(True, "ba", labels, day_value)], NDCG3
    )
    assert change is not None
    assert change.rankings == pytest.approx(day_value - 1)
    assert change.coverage == pytest.approx(0.0) and change.labels == pytest.approx(0.0)


def test_a_label_gone_stale_is_labels() -> None:
    # the day's trace lost a's label (stale): [a, b] scores 1 / log2(3) / (1) against {b: 1}
    day_value = (1 / math.log2(3)) / 1
    base = trace(False, "ab", {"a": 2.0, "b": 1.0}, 1.0)
    day = QueryTrace(True, T0, ("a", "b"), {"b": 1.0}, day_value, stale=("a",))
    change = split_query([base, day], NDCG3)
    assert change is not None
    assert change.labels == pytest.approx(day_value - 1)
    assert change.rankings == pytest.approx(0.0) and change.coverage == pytest.approx(0.0)
    assert change.stale_now == ("a",)


def test_the_latest_baseline_label_wins_and_parts_add_up() -> None:
    traces = [
        trace(False, "ab", {"a": 1.0, "b": 1.0}, 0.7, n=0),
        trace(False, "ba", {"a": 2.0, "b": 1.0}, 0.8, n=1),  # later: a is grade 2
        trace(True, "ba", {"a": 2.0}, 0.3, n=2),
    ]
    change = split_query(traces, NDCG3)
    assert change is not None
    total = change.labels + change.coverage + change.rankings
    assert total == pytest.approx(0.3 - (0.7 + 0.8) / 2)


def test_median_rank_needs_more_than_half_of_the_traces() -> None:
    traces = [trace(False, r, {}, 0.0) for r in ("ab", "ba", "cd")]
    assert median_rank("a", traces) == 2  # ranks 1, 2, out: the median is 2
    assert median_rank("c", traces) is None  # 1, out, out
    assert median_rank("a", traces[:2]) == 2  # of two, the higher: 1, 2
    assert median_rank("c", traces[1:]) is None  # out, 1


def test_a_ranking_rebuilt_from_its_labels_ranks() -> None:
    ranking = ranking_from_labels([("a", 2), ("b", None), ("c", 4)], 4)
    assert ranking == (f"{UNLABELLED}1", "a", f"{UNLABELLED}3", "c")


def findings_frames(query: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    key = {"segment": "s|1", "variant": "v", "metric": "ndcg@3"}
    parts = pd.DataFrame(
        [
            {**key, "day_value": 0.5, "base_value": 0.75, "mix": -0.05, "new_part": 0.0,
             "recurring_queries": 2, "new_queries": 0, "new_traces": 0, "new_day_mean": None,
             "gone_queries": 0}
        ]
    )  # fmt: skip
    top = pd.DataFrame(
        [
            {**key, "query_id": query, "place": 1, "day_traces": 1, "base_traces": 1,
             "day_mean": 0.0, "base_mean": 1.0, "day_share": 0.2, "base_share": 0.25,
             "within": -0.2, "mix": -0.0125}
        ]
    )  # fmt: skip
    return parts, top


def test_an_explanation_adds_up_and_is_escaped_everywhere() -> None:
    query = "q|<script>"
    parts, top = findings_frames(query)
    labels = {"a": 2.0, "b": 1.0}
    traces = {
        ("s|1", "v", "ndcg@3", query): [
            trace(False, "abc", labels, 1.0),
            trace(True, "cdxab", labels, 0.0),  # a and b at ranks 4 and 5: out of the top 3
        ]
    }
    (e,) = explain([("s|1", "v", "ndcg@3", "miss")], parts, top, traces, {"ndcg@3": NDCG3})
    causes = dict(e.causes)
    # the query: share 0.2 x change (0 - 1), all coverage (c, d unjudged above a, b)
    assert causes["coverage"] == pytest.approx(0.2 * (0 - 1))
    assert causes["traffic mix"] == pytest.approx(-0.05)
    assert causes["remainder"] == pytest.approx((0.5 - 0.75) - (-0.2 - 0.05))
    assert e.top_share == pytest.approx((-0.2 - 0.0125) / (0.5 - 0.75))
    assert e.largest_cause() == ("coverage", pytest.approx(-0.2))
    lead = e.contributors[0]
    assert lead.change is not None
    assert [(m.doc_id, m.rank_then, m.rank_now) for m in lead.change.fell] == [
        ("a", 1, 4),
        ("b", 2, 5),
    ]
    markdown = "\n".join(why_markdown([e]) + why_lead([e])) + why_table([e])
    assert "<script>" not in markdown and "q\\|&lt;script&gt;" in markdown
    html = why_html([e])
    assert html is not None and "<script>" not in html and "q|&lt;script&gt;" in html
    document = json.loads(json_text([e.to_dict()]))
    assert document[0]["contributors"][0]["fell"][0] == {
        "doc_id": "a", "grade_then": 2.0, "grade_now": 2.0, "rank_then": 1, "rank_now": 4,
    }  # fmt: skip
    assert len(document[0]["lines"]) == 3
    assert why_html([]) is None and why_markdown([]) == [] and why_lead([]) == []


def test_a_finding_without_a_baseline_is_not_explained() -> None:
    parts, top = findings_frames("q")
    parts["base_value"] = None
    assert explain([("s|1", "v", "ndcg@3", "miss")], parts, top, {}, {"ndcg@3": NDCG3}) == ()


@pytest.mark.parametrize(
    "name", ["ndcg@10", "precision@5", "recall@20", "map@10", "mrr@10", "hit_rate@3", "judged@10"]
)
@pytest.mark.parametrize("judged_only", [False, True])
def test_a_cut_scoring_reads_only_the_first_k_and_agrees(name: str, judged_only: bool) -> None:
    """Scoring cuts the list to its first k places (condensed first, where condensed lists are
    scored): the reference's score of the whole list, on lists of 40 of 60 documents."""
    rng = random.Random(f"{name}{judged_only}")
    scoring = Scoring(parse_metric(name), judged_only=judged_only)
    for _ in range(200):
        ranking = [f"d{i}" for i in rng.sample(range(60), 40)]
        labels = {f"d{rng.randrange(60)}": float(rng.randrange(4)) for _ in range(8)}
        whole = score_trace(ranking, labels, [scoring.metric], judged_only=judged_only, judged=True)
        assert whole is not None
        assert scoring.score(ranking, labels) == pytest.approx(whole[name], abs=1e-12)


def test_the_split_reads_every_query_shown_and_others_within_its_budget() -> None:
    # 111 queries each reading 25 + 25 traces (the cap a side): the 10 shown, then
    # SPLIT_TRACES / 50 = 100 more, by place
    assert (TRACES_PER_SIDE, SPLIT_TRACES) == (25, 5_000)
    top = pd.DataFrame(
        {"segment": "s", "variant": "v", "metric": "m", "place": range(1, 112),
         "query_id": [f"q{n}" for n in range(1, 112)], "day_traces": 40, "base_traces": 900}
    )  # fmt: skip
    plan = split_plan(top)
    assert sorted(plan["place"]) == list(range(1, 111))
    few = top.assign(day_traces=1, base_traces=2)  # 3 traces each: all fit
    assert len(split_plan(few)) == 111
