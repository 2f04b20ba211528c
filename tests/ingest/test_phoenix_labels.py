"""Phoenix document annotations chosen as labels: HUMAN over LLM over CODE, grades from the
score or the label text, the rest quarantined with its reason."""

from __future__ import annotations

from typing import Any

from retrieval_pipeline.ingest.phoenix_labels import DocumentLabel, choose_labels


def note(
    kind: str,
    position: Any,
    *,
    score: Any = None,
    label: Any = None,
    span: str = "s1",
    name: str = "relevance",
) -> dict[str, Any]:
    return {
        "span_id": span,
        "name": name,
        "annotator_kind": kind,
        "document_position": position,
        "score": score,
        "label": label,
    }


def test_human_wins_over_llm_and_llm_over_code() -> None:
    chosen = choose_labels(
        [
            note("LLM", 0, score=0.0),
            note("HUMAN", 0, score=2.0),  # HUMAN 2 wins
            note("CODE", 1, label="relevant"),
            note("LLM", 1, label="irrelevant"),  # LLM 0
            note("HUMAN", 2, label="Not Relevant"),  # HUMAN 0 by its label
        ],
        kinds=("HUMAN", "LLM", "CODE"),
    )
    assert chosen.labels == [
        DocumentLabel("s1", 0, 2.0, "phoenix:human"),
        DocumentLabel("s1", 1, 0.0, "phoenix:llm"),
        DocumentLabel("s1", 2, 0.0, "phoenix:human"),
    ]
    assert chosen.overlaps == [(2.0, 0.0)]
    assert chosen.quarantined == [] and chosen.skipped == 0


def test_code_and_other_names_do_not_count_by_default() -> None:
    chosen = choose_labels([note("CODE", 0, score=1.0), note("HUMAN", 0, score=1.0, name="x")])
    assert chosen.labels == [] and chosen.skipped == 2


def test_unknown_labels_and_bad_positions_are_quarantined_with_reasons() -> None:
    chosen = choose_labels(
        [
            note("HUMAN", 0, label="meh"),
            note("LLM", -1, score=1.0),
            note("HUMAN", 1, score=float("nan")),
            note("HUMAN", 2, score=1.0),
        ]
    )
    assert chosen.labels == [DocumentLabel("s1", 2, 1.0, "phoenix:human")]
    reasons = [r for _, _, r in chosen.quarantined]
    assert len(reasons) == 3
    assert "label 'meh' is none of" in reasons[0]
    assert "document_position -1" in reasons[1]
    assert "not finite" in reasons[2]
    # every annotation read is a label, quarantined or skipped: 1 + 3 + 0 == 4
    assert len(chosen.labels) + len(chosen.quarantined) + chosen.skipped == 4


def test_several_names_the_kind_decides_then_the_earlier_name() -> None:
    names = ("relevance", "relevance_llm")
    chosen = choose_labels(
        [
            note("LLM", 0, score=0.0, name="relevance_llm"),
            note("HUMAN", 0, score=2.0, name="relevance"),  # HUMAN wins under either name
            note("HUMAN", 1, score=0.0, name="relevance_llm"),
            note("HUMAN", 1, score=1.0, name="relevance"),  # one kind twice: the earlier name
            note("LLM", 2, label="relevant", name="judge"),  # a name not configured: skipped
        ],
        name=names,
    )
    assert chosen.labels == [
        DocumentLabel("s1", 0, 2.0, "phoenix:human"),
        DocumentLabel("s1", 1, 1.0, "phoenix:human"),
    ]
    assert chosen.overlaps == [(2.0, 0.0)] and chosen.skipped == 1


def test_a_score_outside_the_grade_range_is_quarantined() -> None:
    chosen = choose_labels([note("HUMAN", 0, score=150.0), note("HUMAN", 1, score=-1.0)])
    assert chosen.labels == []
    assert [r.split(": ", 1)[1] for _, _, r in chosen.quarantined] == [
        "score 150.0 is not a grade from 0 to 100",
        "score -1.0 is not a grade from 0 to 100",
    ]
