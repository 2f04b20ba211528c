"""A span id repeated in its trace (`spans.SpanConverter`): the repeat is quarantined, naming
where the span was first read, and `read = scored + quarantined + skipped`, counted in spans.

Two spans sharing a `spanId` on one line once read as "Read 3 records: 1 scored, 1
quarantined, 1 skipped": both made a record, and the pieces counted the line's span once."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.ingest.spans import SpanConverter, SpanCounts
from tests.ingest.span_exports import export_line, other_span
from tests.ingest.test_span_positions import retriever

SPAN = "00000000000000d1"
TRACE, OTHER_TRACE = "ab" * 16, "cd" * 16  # the trace of `retriever`'s spans, and another


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_span_id_repeated_in_its_trace_is_quarantined_naming_its_first_line(
    tmp_path: Path,
) -> None:
    first = retriever(SPAN, {"0": "doc-a"}, "doc-a")
    again = retriever(SPAN, {"0": "doc-b"}, "doc-a")  # other documents: not the same record
    later = retriever(SPAN, {"0": "doc-c"}, "doc-a")
    llm = other_span(SPAN, TRACE, "2026-12-01", "LLM")  # not a retrieval: skipped, not a repeat
    path = write(
        tmp_path / "spans.jsonl", [export_line([[first, again]]), export_line([[later, llm]])]
    )
    converter = SpanConverter()
    rows = list(converter.convert_file(path, name="spans.jsonl"))

    reason = f"span {SPAN}: duplicate span id {SPAN} in trace {TRACE}: first seen at line 1"
    assert [row.message() for row in rows if row.error] == [
        f"spans.jsonl line 1: {reason}",
        f"spans.jsonl line 2: {reason}",
    ]
    assert [json.loads(row.record or "")["retrieved_ids"] for row in rows if row.record] == [
        ["doc-a"]
    ]
    # 4 spans read = 1 converted + 2 quarantined + 1 skipped (the LLM span)
    assert converter.counts == SpanCounts(read=4, converted=1, quarantined=2, skipped=1, records=1)


def test_evaluate_counts_spans_once_and_the_counts_add_up(tmp_path: Path) -> None:
    """Line 1: the same span id twice in one trace (the repeat quarantined here), and once in
    another trace (a record whose trace_id repeats the first's: quarantined downstream as a
    repeated trace id). 3 spans read = 1 scored + 2 quarantined + 0 skipped."""
    first = retriever(SPAN, {"0": "doc-a"}, "doc-a")
    again = retriever(SPAN, {"0": "doc-b"}, "doc-a")
    elsewhere = retriever(SPAN, {"0": "doc-b"}, "doc-a") | {"traceId": OTHER_TRACE}
    export = write(tmp_path / "spans.jsonl", [export_line([[first, again, elsewhere]])])
    result = CliRunner().invoke(main, ["evaluate", str(export), "--metrics", "mrr"])
    assert result.exit_code == 0, result.output
    assert (
        "Read 3 records from 1 file(s): 1 valid (1 scored; 0 unannotated, not scored), "
        "2 quarantined." in result.output
    )
    assert "Unknown field" not in result.output  # a quarantined span's own keys are not fields
    assert f"duplicate span id {SPAN} in trace {TRACE}: first seen at line 1" in result.output
    assert f"duplicate trace_id {SPAN}" in result.output


def test_the_span_ids_kept_are_bounded(tmp_path: Path) -> None:
    """With room for 2 span ids, a repeat after 2 other spans is no longer found here (it is
    found downstream, as a repeated trace id); with room for 3 it is."""
    spans = [retriever(f"00000000000000e{n}", {"0": "doc-a"}, "doc-a") for n in range(3)]
    path = write(tmp_path / "spans.jsonl", [export_line([spans]), export_line([spans[:1]])])
    for room, quarantined in ((2, 0), (3, 1)):
        converter = SpanConverter(recent_spans=room)
        list(converter.convert_file(path))
        assert (converter.counts.read, converter.counts.quarantined) == (4, quarantined)
        assert converter.counts.converted == 4 - quarantined
