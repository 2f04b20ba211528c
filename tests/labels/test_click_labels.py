"""Click labels: propensities and inverse-propensity-weighted labels by hand, and on simulated
position-biased logs with known propensities and relevance (tests/labels/click_simulation.py)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.csv as pv
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.labels.clicks import (
    MIN_CLIP,
    ClickLabelError,
    ClickLabelOptions,
    ClickTable,
    click_labels,
    estimate_propensities,
)
from retrieval_pipeline.labels.command import (
    LabelsOutputError,
    judgments_bytes,
    labels_from_clicks,
    summary_lines,
)
from retrieval_pipeline.labels.impressions import Impression
from retrieval_pipeline.text import json_text
from tests.labels.click_simulation import PROPENSITIES, simulate

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def pages(query: str, shown: list[str], clicked_per_page: list[list[str]]) -> list[Impression]:
    """One impression per entry of `clicked_per_page`, all showing `shown`."""
    return [
        Impression(f"{query}-{i}", query, T0 + timedelta(minutes=i), "v", tuple(shown),
                   frozenset(clicked))
        for i, clicked in enumerate(clicked_per_page)
    ]  # fmt: skip


def clicks(n_pages: int, n_clicked: int, doc: str) -> list[list[str]]:
    return [[doc]] * n_clicked + [[]] * (n_pages - n_clicked)


def hand_table() -> ClickTable:
    """a: rank 1 6/10 clicks, rank 2 3/10. b: rank 1 4/20, rank 2 1/10. c: rank 2 4/10, rank 3
    4/100. d: 3 pages at rank 1 (too few). e: only at rank 4, which no pair links to rank 1."""
    table = ClickTable(max_rank=4)
    table.add_all(pages("q", ["a", "x1"], clicks(10, 6, "a")))
    table.add_all(pages("q", ["x1", "a"], clicks(10, 3, "a")))
    table.add_all(pages("q", ["b", "x2"], clicks(20, 4, "b")))
    table.add_all(pages("q", ["x2", "b"], clicks(10, 1, "b")))
    table.add_all(pages("q", ["x3", "c"], clicks(10, 4, "c")))
    table.add_all(pages("q", ["x4", "x5", "c"], clicks(100, 4, "c")))
    table.add_all(pages("q", ["d"], clicks(3, 1, "d")))
    table.add_all(pages("r", ["y1", "y2", "y3", "e"], clicks(30, 5, "e")))
    return table


def test_propensities_by_hand() -> None:
    props = estimate_propensities(hand_table())
    # ranks 1 and 2 share a and b: (6/10 + 4/20) / (3/10 + 1/10) = p_1 / p_2
    p2 = (3 / 10 + 1 / 10) / (6 / 10 + 4 / 20)
    assert props.values[2] == pytest.approx(p2)
    # ranks 2 and 3 share c only: p_3 / p_2 = (4/100) / (4/10)
    assert props.values[3] == pytest.approx(p2 * (4 / 100) / (4 / 10))
    assert props.values[1] == 1.0 and props.values[4] is None
    # a, b, x1, x2 (never clicked, they count all the same) at ranks 1 and 2; c at 2 and 3; the
    # others were shown at one rank only
    assert props.pairs == {1: 4, 2: 5, 3: 1, 4: 0}


def test_labels_by_hand_with_clipping_and_unjudged_pairs() -> None:
    table = hand_table()
    options = ClickLabelOptions(
        max_rank=4, min_impressions=5, clip=0.1, cut_points=(0.1, 0.25, 0.5)
    )
    labels = click_labels(table, estimate_propensities(table), options)
    rows = {(r["query_id"], r["doc_id"]): r for r in labels.judgments.to_pylist()}
    p2, p3 = 0.5, 0.05  # from test_propensities_by_hand; p3 is below the clip
    a = rows[("q", "a")]
    assert a["estimate"] == pytest.approx((6 / 1 + 3 / p2) / 20)
    assert a["effective_impressions"] == pytest.approx((10 * 1 + 10 * 2) ** 2 / (10 * 1 + 10 * 4))
    assert (a["impressions"], a["clicks"], a["grade"]) == (20, 9, 3.0)  # 0.6 >= 0.5
    assert rows[("q", "b")]["estimate"] == pytest.approx((4 / 1 + 1 / p2) / 30)
    assert rows[("q", "b")]["grade"] == 1.0  # 0.2 is in [0.1, 0.25)
    c = rows[("q", "c")]
    # rank 3's weight is 1 / max(0.05, 0.1) = 10, not 20
    assert p3 < options.clip
    assert c["estimate"] == pytest.approx((4 / p2 + 4 / options.clip) / 110)
    assert c["grade"] == 2.0  # 48 / 110 = 0.436
    # d: 3 impressions < 5; e: its 30 impressions are at rank 4, which has no propensity
    assert ("q", "d") not in rows and ("r", "e") not in rows
    assert labels.unjudged == labels.pairs - len(rows)
    assert labels.unused_impressions == 30  # e's, at rank 4
    assert {r["label_source"] for r in rows.values()} == {"clicks"}
    assert a["judged_at"] == T0 + timedelta(minutes=9)  # the last page that showed it


def pairwise_accuracy(scores: dict[tuple[str, str], float], truth: dict) -> float:
    """Share of same-query document pairs of different true relevance that `scores` orders the
    same way as the truth (a tie counts as wrong): (1 + Kendall's tau-a on those pairs) / 2."""
    by_query: dict[str, list[tuple[float, float]]] = {}
    for (query, doc), score in scores.items():
        by_query.setdefault(query, []).append((truth[(query, doc)], score))
    right = total = 0
    for items in by_query.values():
        for i, (true_i, score_i) in enumerate(items):
            for true_j, score_j in items[i + 1 :]:
                if true_i != true_j:
                    total += 1
                    right += (true_i - true_j) * (score_i - score_j) > 0
    return right / total


def test_simulated_logs_recover_propensities_and_beat_raw_ctr(tmp_path: Path) -> None:
    log = simulate(seed=2026)
    clicks_file = tmp_path / "clicks.jsonl"
    clicks_file.write_text("".join(json.dumps(r) + "\n" for r in log.records))
    out, props_out = tmp_path / "judgments.jsonl", tmp_path / "PROPENSITIES.json"
    run = labels_from_clicks([clicks_file], out, props_out)
    assert run.counts.used == len(log.records) == 80 * 4 * 100

    document = json.loads(props_out.read_text())
    assert document["method"] == "intervention_harvesting"
    assert document["propensities"]["1"] == 1.0
    for rank in range(2, 6):
        estimate, truth = document["propensities"][str(rank)], PROPENSITIES[rank - 1]
        assert abs(estimate / truth - 1) < 0.15, (rank, estimate, truth)
        assert document["pairs"][str(rank)] > 100  # (query, document) pairs behind each rank
    assert set(document["pairs"]) == {str(rank) for rank in range(2, 11)}

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 80 * 10  # every pair has 400 impressions >= 20
    debiased = {(r["query_id"], r["doc_id"]): r["estimate"] for r in rows}
    raw_ctr = {(r["query_id"], r["doc_id"]): r["clicks"] / r["impressions"] for r in rows}
    debiased_accuracy = pairwise_accuracy(debiased, log.relevance)
    raw_accuracy = pairwise_accuracy(raw_ctr, log.relevance)
    assert debiased_accuracy > raw_accuracy + 0.02, (debiased_accuracy, raw_accuracy)
    # the grades follow the default cut points 0.1, 0.25, 0.5
    for r in rows:
        assert r["grade"] == sum(r["estimate"] >= cut for cut in (0.1, 0.25, 0.5))
    assert any("propensity by rank" in line for line in summary_lines(run))


def test_output_kinds_follow_the_name(tmp_path: Path) -> None:
    log = simulate(seed=1, n_queries=4, pages_per_variant=10)
    source = tmp_path / "clicks.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in log.records))
    tables = {}
    for name in ("j.parquet", "j.csv", "j.jsonl"):
        labels_from_clicks([source], tmp_path / name, tmp_path / "p.json")
    tables["parquet"] = pq.read_table(tmp_path / "j.parquet").to_pylist()
    tables["csv"] = pv.read_csv(tmp_path / "j.csv").to_pylist()
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    tables["jsonl"] = [json.loads(line) for line in lines]
    assert len({len(rows) for rows in tables.values()}) == 1 and tables["jsonl"]
    for kind, rows in tables.items():
        first = rows[0]
        assert {"query_id", "doc_id", "grade", "judged_at", "label_source"} <= set(first), kind
        assert first["estimate"] == pytest.approx(tables["parquet"][0]["estimate"]), kind
    assert tables["jsonl"][0]["judged_at"].endswith("Z")
    assert not list(tmp_path.glob(".*.partial"))
    with pytest.raises(LabelsOutputError, match=r"\.jsonl, \.ndjson, \.parquet or \.csv"):
        labels_from_clicks([source], tmp_path / "j.txt", tmp_path / "p.json")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"max_rank": 1}, "max_rank must be an integer in 2..100"),
        ({"min_impressions": 0}, "min_impressions must be an integer >= 1"),
        ({"clip": 0.0}, "clip must be a number in [1e-06, 1]"),
        ({"clip": 1e-300}, "clip must be a number in [1e-06, 1]"),
        ({"clip": float("nan")}, "clip must be a number in [1e-06, 1]"),
        ({"cut_points": (0.5, 0.25, 0.1)}, "cut_points must be three increasing numbers"),
        ({"cut_points": (0.1, 0.2)}, "cut_points must be three increasing numbers"),
    ],
)
def test_bad_options_are_named(options: dict, words: str) -> None:
    with pytest.raises(ClickLabelError) as error:
        ClickLabelOptions(**options)
    assert words in str(error.value)


def test_min_impressions_is_reached_at_exactly_min_impressions() -> None:
    """A pair with exactly `min_impressions` impressions is labelled; one with one fewer is not."""
    table = ClickTable(max_rank=2)
    table.add_all(pages("q", ["a"], clicks(5, 2, "a")))  # 5 impressions at rank 1
    table.add_all(pages("q", ["b"], clicks(4, 2, "b")))  # 4
    options = ClickLabelOptions(max_rank=2, min_impressions=5)
    labels = click_labels(table, estimate_propensities(table), options)
    assert labels.judgments.select(["doc_id", "impressions", "estimate"]).to_pylist() == [
        {"doc_id": "a", "impressions": 5, "estimate": 2 / 5}
    ]
    assert (labels.pairs, labels.unjudged) == (2, 1)


def _chain_table(max_rank: int, shown: int, clicked_high: int, clicked_low: int) -> ClickTable:
    """Document k shown `shown` times at rank k (clicked `clicked_high` times) and at rank k + 1
    (clicked `clicked_low` times), for every rank: a chain of one extreme ratio per rank pair.
    Counts set directly: a log this size would take minutes to write out page by page."""
    table = ClickTable(max_rank=max_rank)
    for k in range(max_rank - 1):
        row = table._row_of(("q", f"d{k + 1}"))
        table.impressions[row, k] = table.impressions[row, k + 1] = shown
        table.clicks[row, k], table.clicks[row, k + 1] = clicked_high, clicked_low
        table.last_shown[row] = 0  # shown at the epoch
    return table


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("clicked_high", "clicked_low"),
    [(10**12, 1), (1, 10**12)],  # propensities falling to e^-2700, or rising to e^2700
)
def test_a_long_chain_of_extreme_ratios_writes_finite_numbers_only(
    tmp_path: Path, clicked_high: int, clicked_low: int
) -> None:
    """Issue 32: over a long rank chain each rank's propensity is 1e12 times the next one's (or
    the previous one's); a propensity beyond a double has no estimate (before: OverflowError),
    one below it is 0.0, the weights stay within 1 / MIN_CLIP, and every file is strict JSON."""
    table = _chain_table(100, 10**12, clicked_high, clicked_low)
    props = estimate_propensities(table)
    values = [props.values[k] for k in range(1, 101)]
    assert all(v is None or math.isfinite(v) for v in values)
    if clicked_high > clicked_low:  # falling: p_k = 1e-12^(k - 1), 0.0 once past a double
        assert values[1] == pytest.approx(1e-12) and values[99] == 0.0
    else:  # rising: p_k = 1e12^(k - 1); a double ends at 1.8e308, so rank 26 (1e300) is last
        assert values[1] == pytest.approx(1e12) and values[25] == pytest.approx(1e300)
        assert values[26:] == [None] * 74
    options = ClickLabelOptions(max_rank=100, min_impressions=1, clip=MIN_CLIP)
    labels = click_labels(table, props, options)
    for name in ("estimate", "effective_impressions"):
        assert all(map(math.isfinite, labels.judgments[name].to_pylist())), name
    assert max(labels.judgments["estimate"].to_pylist()) <= 1 / MIN_CLIP
    for suffix in (".jsonl", ".csv"):
        text = judgments_bytes(labels.judgments, tmp_path / f"j{suffix}").decode()
        assert "nan" not in text.lower() and "inf" not in text.lower(), suffix
    for line in judgments_bytes(labels.judgments, tmp_path / "j.jsonl").decode().splitlines():
        _strict(line)
    _strict(json_text(props.as_json()))


def test_json_text_refuses_what_strict_json_cannot_hold() -> None:
    assert json_text({"a": [1.5, None]}) == '{"a": [1.5, null]}'
    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="not JSON compliant"):
            json_text({"estimate": value})
