"""A page of Phoenix spans labelled by their document annotations (ingest/phoenix_day_labels.py),
the annotations given here in place of the server's: which spans take them, by which document id,
and what is counted (the real server: tests/defs/test_phoenix_nightly.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retrieval_pipeline.config import PhoenixConfig, TraceFormatConfig
from retrieval_pipeline.ingest import phoenix_day_labels
from retrieval_pipeline.ingest.otlp import SpanView
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.phoenix_day_labels import DayLabeller
from retrieval_pipeline.ingest.phoenix_labels import LabelTally


def view(span_id: str, ids: list[str], metadata: Any, kind: str = "RETRIEVER") -> SpanView:
    attributes: dict[str, object] = {"openinference.span.kind": kind, "metadata": metadata}
    for position, doc_id in enumerate(ids):
        attributes[f"retrieval.documents.{position}.document.id"] = doc_id
    return SpanView(span_id=span_id, trace_id="t" + span_id, start_ns=1, attributes=attributes)


def note(span_id: str, position: int, kind: str, score: float) -> dict[str, Any]:
    return {
        "span_id": span_id,
        "name": "relevance",
        "annotator_kind": kind,
        "label": None,
        "score": score,
        "document_position": position,
    }


NOTES = [
    note("s1", 0, "HUMAN", 2.0),
    note("s1", 0, "LLM", 1.0),  # loses, and is a pair for agreement
    note("s1", 2, "LLM", 1.0),  # d1 again, at a later position: the first position's grade stays
    note("s1", 1, "LLM", 0.0),
    note("s1", 5, "HUMAN", 1.0),  # past the span's three documents: refused
    note("s2", 0, "HUMAN", 1.0),  # s2 has labels of its own: counted, not used
    note("s3", 0, "HUMAN", 1.0),  # s3 is a reranker: not labelled here
]


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> tuple[list[SpanView], LabelTally, list[str]]:
    asked: list[str] = []

    def read(store: PhoenixStore, span_ids: list[str]) -> list[dict[str, Any]]:
        asked.extend(span_ids)
        return [n for n in NOTES if n["span_id"] in span_ids]

    monkeypatch.setattr(phoenix_day_labels, "read_document_annotations", read)
    tally = LabelTally()
    labeller = DayLabeller(
        PhoenixStore("http://127.0.0.1:9", "p"), PhoenixConfig(), TraceFormatConfig(), tally
    )
    views = [
        view("s1", ["d1", "d2", "d1"], json.dumps({"query_id": "q1", "segment": "faq"})),
        view("s2", ["d3"], {"query_id": "q2", "relevant_ids": ["d3"]}),
        view("s3", ["d4"], {"query_id": "q3"}, kind="RERANKER"),
        view("s4", ["d5"], {"query_id": "q4"}),  # no annotation: unchanged
    ]
    return labeller.label(views), tally, asked


def test_a_span_without_labels_takes_the_winning_grades_by_document_id(
    labelled: tuple[list[SpanView], LabelTally, list[str]],
) -> None:
    views, _, asked = labelled
    assert asked == ["s1", "s2", "s4"]  # RETRIEVER spans only
    metadata = views[0].attributes["metadata"]
    assert metadata == {
        "query_id": "q1",
        "segment": "faq",
        "relevance_scores": {"d1": 2.0, "d2": 0.0},
        "label_source": "phoenix:human+llm",
    }
    assert views[1].attributes["metadata"] == {"query_id": "q2", "relevant_ids": ["d3"]}
    assert views[2].attributes["metadata"] == {"query_id": "q3"}
    assert views[3].attributes["metadata"] == {"query_id": "q4"}


def test_what_the_annotations_gave_is_counted(
    labelled: tuple[list[SpanView], LabelTally, list[str]],
) -> None:
    _, tally, _ = labelled
    # s1: d1 HUMAN 2 (the LLM's d1 at position 2 is not used), d2 LLM 0
    assert dict(tally.labels) == {"phoenix:human": 1, "phoenix:llm": 1}
    assert (tally.spans_labelled, tally.spans_with_own_labels) == (1, 1)
    assert tally.quarantined == 1 and "no document at that position" in tally.reasons[0]
    assert dict(tally.pairs) == {("faq", 2.0, 1.0): 1}
    assert tally.summary().startswith("2 labels from Phoenix (phoenix:human 1, phoenix:llm 1)")
