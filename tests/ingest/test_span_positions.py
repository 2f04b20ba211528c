"""A document's position in a span's attribute names is ASCII digits (`span_documents`): any
other digit quarantines that span alone, naming the attribute, and the rest of the run goes on.

`str.isdigit` and `int` take `²` (isdigit only: `int` then raises), Arabic-Indic and full-width
digits, so such a key once stopped `evaluate`, or was read as a position and shadowed the real
one (MRR 0.5 for 1.0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.ingest.spans import SpanConverter, SpanCounts
from tests.ingest.span_exports import attribute, export_line, span

DAY = "2026-12-01T10:00:00.000000Z"
ARABIC_ZERO = "\u0660"  # ARABIC-INDIC DIGIT ZERO
FULL_WIDTH_ONE = "\uff11"  # FULLWIDTH DIGIT ONE
SUPERSCRIPT_TWO = "\u00b2"  # ²


def retriever(span_id: str, ids: dict[str, str], relevant: str) -> dict[str, Any]:
    """A RETRIEVER span whose documents are `position text -> id`, in the order given."""
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("metadata", json.dumps({"query_id": "q1", "relevant_ids": [relevant]})),
    ]
    for position, doc_id in ids.items():
        attributes.append(attribute(f"retrieval.documents.{position}.document.id", doc_id))
    return span(span_id, "ab" * 16, DAY, "retrieve", attributes)


@pytest.mark.parametrize(
    "position",
    [SUPERSCRIPT_TWO, ARABIC_ZERO, FULL_WIDTH_ONE, "01", "1" + ARABIC_ZERO, "0x"],
)
def test_a_position_that_is_not_ascii_digits_quarantines_its_span_alone(
    tmp_path: Path, position: str
) -> None:
    bad = retriever("00000000000000b1", {"0": "doc-a", "1": "doc-b", position: "doc-c"}, "doc-a")
    good = retriever("00000000000000a1", {"0": "doc-a", "1": "doc-b"}, "doc-a")
    path = tmp_path / "spans.jsonl"
    path.write_text(export_line([[bad, good]]) + "\n", encoding="utf-8")
    converter = SpanConverter()
    rows = list(converter.convert_file(path, name="spans.jsonl"))

    key = f"retrieval.documents.{position}.document.id"
    assert [row.message() for row in rows if row.error] == [
        f'spans.jsonl line 1: span 00000000000000b1: the attribute "{key}" is under '
        f'retrieval.documents., yet "{position}" is not a document position: positions are '
        "ASCII digits without a leading zero (retrieval.documents.0.document.id, "
        "retrieval.documents.1.document.id, ...)"
    ]
    assert [json.loads(row.record or "")["retrieved_ids"] for row in rows if row.record] == [
        ["doc-a", "doc-b"]
    ]
    # 2 spans read = 1 converted + 1 quarantined
    assert converter.counts == SpanCounts(read=2, converted=1, quarantined=1, records=1)


def test_another_attribute_sharing_the_prefix_without_a_digit_is_not_a_document(
    tmp_path: Path,
) -> None:
    good = retriever("00000000000000a1", {"0": "doc-a"}, "doc-a")
    good["attributes"].append(attribute("retrieval.documents.count.document.id", "x"))
    path = tmp_path / "spans.jsonl"
    path.write_text(export_line([[good]]) + "\n", encoding="utf-8")
    rows = list(SpanConverter().convert_file(path))
    assert [json.loads(row.record or "")["retrieved_ids"] for row in rows] == [["doc-a"]]


def test_evaluate_goes_on_past_a_bad_position_and_nothing_shadows_position_0(
    tmp_path: Path,
) -> None:
    """Span 1 has `documents.²`: it once stopped evaluate with `invalid literal for int()`.
    Span 2 has an Arabic-Indic 0 (an irrelevant document) written before `documents.0` (the
    relevant one): read as position 0 it made the relevant one rank 2 (RR 1/2). Both are
    quarantined; span 3 ranks its relevant document first: RR = 1/1, the mean over 1 annotated
    trace."""
    spans = [
        retriever("00000000000000c1", {"0": "doc-a", SUPERSCRIPT_TWO: "doc-b"}, "doc-a"),
        retriever("00000000000000c2", {ARABIC_ZERO: "doc-x", "0": "doc-a"}, "doc-a"),
        retriever("00000000000000c3", {"0": "doc-a", "1": "doc-b"}, "doc-a"),
    ]
    export = tmp_path / "spans.jsonl"
    export.write_text(export_line([spans]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["evaluate", str(export), "--metrics", "mrr"])
    assert result.exit_code == 0, result.output
    assert (
        "Read 3 records from 1 file(s): 1 valid (1 scored; 0 unannotated, not scored), "
        "2 quarantined." in result.output
    )
    assert "Unknown field" not in result.output  # a quarantined span's own keys are not fields
    assert f"{'mrr':<16}{1 / 1:>10.4f}  1 annotated traces" in result.output
    assert f"retrieval.documents.{SUPERSCRIPT_TWO}.document.id" in result.output
    assert f"retrieval.documents.{ARABIC_ZERO}.document.id" in result.output
