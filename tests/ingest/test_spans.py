"""OTLP/JSON retrieval spans as trace records (`ingest.spans`, `ingest.otlp`).

The records made from spans are compared field by field with the records the spans were written
from (one source of truth, `span_exports.make_records`), and through the record rules
(`records.parse_record`) as validated records.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

from retrieval_pipeline.config import TraceFormatConfig, config_from_mapping
from retrieval_pipeline.ingest.otlp import (
    SNIFF_BYTES,
    SpanFileError,
    is_otlp_line,
    read_lines,
    sniff_file,
)
from retrieval_pipeline.ingest.spans import (
    INPUT_SUFFIX,
    SpanConverter,
    SpanCounts,
    SpanRow,
)
from retrieval_pipeline.records import parse_record
from tests.ingest.span_exports import (
    LABEL_FIELDS,
    attribute,
    export_line,
    genai_retriever,
    make_records,
    nanos,
    openinference_retriever,
    other_span,
    reranker,
    span,
    trace_id_for,
)

RECORD_FIELDS = ("trace_id", "query_id", "timestamp", "retrieved_ids", *LABEL_FIELDS)
OTHER_KINDS = ("LLM", "CHAIN", None, "EMBEDDING")


def write_lines(path: Path, lines: list[str]) -> Path:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def spans_file(tmp_path: Path, records: list[dict[str, Any]], name: str, genai: bool) -> Path:
    """The records as retrieval spans, three per line, each line with two other spans of the
    same traces mixed in; every third OpenInference span keeps its query id in input.value."""
    rng = random.Random(7)
    lines = []
    for start in range(0, len(records), 3):
        group = []
        for n, record in enumerate(records[start : start + 3], start=start):
            trace = trace_id_for(n)
            if genai:
                group.append(genai_retriever(record, trace, rng, as_json_text=n % 2 == 0))
            else:
                group.append(openinference_retriever(record, trace, rng, n % 3 != 0))
        for k in range(2):
            kind = OTHER_KINDS[(start + k) % len(OTHER_KINDS)]
            group.insert(
                k * 2, other_span(f"{start:08x}{k:08x}", trace_id_for(start), "2026-12-01", kind)
            )
        lines.append(export_line([group[:2], group[2:]]))
    return write_lines(tmp_path / name, lines)


def converted(
    path: Path, trace_format: TraceFormatConfig | None = None
) -> tuple[list[SpanRow], SpanCounts]:
    converter = SpanConverter(trace_format)
    rows = list(converter.convert_file(path, name=path.name))
    return rows, converter.counts


def assert_same_records(rows: list[SpanRow], records: list[dict[str, Any]]) -> None:
    assert [row.error for row in rows if row.error] == []
    made = [json.loads(row.record or "") for row in rows]
    assert [m["trace_id"] for m in made] == [r["trace_id"] for r in records]
    for mine, theirs in zip(made, records, strict=True):
        for field in RECORD_FIELDS:
            if field == "timestamp":
                assert parse_record(mine).served_at == parse_record(theirs).served_at
            else:
                assert mine.get(field) == theirs.get(field), (theirs["trace_id"], field)
        assert mine["stage"] == "retriever"
        assert parse_record(mine) == parse_record(theirs)


@pytest.mark.parametrize("name", ["spans.jsonl", "spans.json.gz"])
def test_openinference_spans_give_the_records_they_were_written_from(
    tmp_path: Path, name: str
) -> None:
    records = make_records(40, seed=1)
    rows, counts = converted(spans_file(tmp_path, records, name, genai=False))
    assert_same_records(rows, records)
    lines = -(-40 // 3)  # 14 lines, two other spans on each
    assert counts == SpanCounts(
        read=40 + 2 * lines, converted=40, quarantined=0, skipped=2 * lines, records=40
    )
    assert [row.source_line for row in rows] == [n // 3 + 1 for n in range(40)]


def test_genai_spans_give_the_records_they_were_written_from(tmp_path: Path) -> None:
    records = make_records(25, seed=2)
    rows, counts = converted(spans_file(tmp_path, records, "genai.jsonl", genai=True))
    assert_same_records(rows, records)
    assert (counts.read, counts.converted, counts.skipped) == (25 + 2 * 9, 25, 2 * 9)


def test_ranks_follow_positions_not_scores_nor_attribute_order(tmp_path: Path) -> None:
    attributes = [
        attribute("retrieval.documents.1.document.id", "b"),
        attribute("retrieval.documents.1.document.score", 0.9),
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("retrieval.documents.10.document.id", "k"),
        attribute("input.value", "q"),
    ]
    attributes += [
        attribute(f"retrieval.documents.{i}.document.id", chr(ord("a") + i))
        for i in (0, *range(2, 10))
    ]
    path = write_lines(
        tmp_path / "a.jsonl",
        [
            export_line(
                [[span("00000000000000aa", "ff" * 16, "2026-12-01T10:00:00Z", "r", attributes)]]
            )
        ],
    )
    rows, _ = converted(path)
    assert json.loads(rows[0].record or "")["retrieved_ids"] == list("abcdefghijk")


def test_start_time_is_truncated_to_the_microsecond_and_stays_on_its_day(tmp_path: Path) -> None:
    last_nanosecond = nanos("2026-12-02T00:00:00Z") - 1
    item = openinference_retriever(make_records(1, seed=3)[0], "ab" * 16, random.Random(0))
    item["startTimeUnixNano"] = str(last_nanosecond)
    rows, _ = converted(write_lines(tmp_path / "t.jsonl", [export_line([[item]])]))
    assert json.loads(rows[0].record or "")["timestamp"] == "2026-12-01T23:59:59.999999Z"


def bad_span(record: dict[str, Any], change: str) -> dict[str, Any]:
    """A RETRIEVER span of `record` broken in one way."""
    item = openinference_retriever(record, "cd" * 16, random.Random(0))
    attributes: list[dict[str, Any]] = item["attributes"]

    def drop(prefix: str) -> None:
        attributes[:] = [a for a in attributes if not a["key"].startswith(prefix)]

    def set_attribute(key: str, new: dict[str, Any]) -> None:
        drop(key)
        attributes.append({"key": key, "value": new})

    if change == "documents without ids":
        attributes[:] = [a for a in attributes if not a["key"].endswith(".document.id")]
    elif change == "documents with only metadata":
        attributes[:] = [a for a in attributes if not a["key"].endswith(".document.id")]
        attributes.append(attribute("retrieval.documents.0.document.metadata", '{"id": "a"}'))
    elif change == "a gap in the positions":
        drop("retrieval.documents.1.document.id")
    elif change == "an id with a fraction":
        set_attribute("retrieval.documents.0.document.id", {"doubleValue": 1.5})
    elif change == "genai documents not a list":
        drop("retrieval.documents.")
        attributes.append(attribute("gen_ai.retrieval.documents", json.dumps({"id": "a"})))
    elif change == "genai documents not JSON":
        drop("retrieval.documents.")
        attributes.append(attribute("gen_ai.retrieval.documents", "[{id: a}"))
    elif change == "missing start time":
        del item["startTimeUnixNano"]
    elif change == "start time not a number":
        item["startTimeUnixNano"] = "yesterday"
    elif change == "metadata not JSON":
        set_attribute("metadata", {"stringValue": '{"query_id": "q1",'})
    elif change == "metadata a list":
        set_attribute("metadata", {"stringValue": "[1, 2]"})
    elif change == "no query id":
        set_attribute("metadata", {"stringValue": "{}"})
        drop("input.value")
    elif change == "relevant_ids not a list":
        set_attribute("metadata", {"stringValue": '{"query_id": "q", "relevant_ids": "d1"}'})
    elif change == "a negative grade":
        set_attribute(
            "metadata", {"stringValue": '{"query_id": "q", "relevance_scores": {"d": -1}}'}
        )
    elif change == "no spanId":
        del item["spanId"]
    elif change == "attributes not a list":
        item["attributes"] = {"openinference.span.kind": "RETRIEVER"}
    return item


BAD_SPANS = {
    "documents without ids": "the documents have no retrieval.documents.{i}.document.id: their "
    "ranks cannot be scored",
    "documents with only metadata": "the documents have no retrieval.documents.{i}.document.id, "
    "only retrieval.documents.{i}.document.metadata: set [trace_format] document_metadata_id_key "
    "to the metadata key holding your document ids",
    "a gap in the positions": "retrieval.documents.1.document.id is missing, yet the span has ids "
    "up to position",
    "an id with a fraction": "retrieval.documents.0.document.id is a number with a fraction; ids "
    "must be non-empty strings or integers",
    "genai documents not a list": "gen_ai.retrieval.documents must be a list of {id, score} "
    "objects (got an object)",
    "genai documents not JSON": "gen_ai.retrieval.documents is a string that is not valid JSON",
    "missing start time": "missing startTimeUnixNano",
    "start time not a number": "startTimeUnixNano must be an integer of nanoseconds "
    '(got "yesterday")',
    "metadata not JSON": "metadata is a string that is not valid JSON",
    "metadata a list": "metadata must be a JSON object (got a list)",
    "no query id": "no query id: metadata has no query_id and the span has no input.value or "
    "gen_ai.retrieval.query.text",
    "relevant_ids not a list": "relevant_ids must be a list of ids (got a string)",
    "a negative grade": 'relevance_scores["d"] must be a finite number >= 0 (got -1)',
    "no spanId": "span resourceSpans[0].scopeSpans[1].spans[0] (no spanId): the span has no spanId",
    "attributes not a list": "attributes must be a list of {key, value} objects",
}


def test_each_bad_span_gives_one_line_naming_file_line_and_span(tmp_path: Path) -> None:
    records = make_records(len(BAD_SPANS), seed=4)
    good = make_records(3, seed=5)
    rng = random.Random(1)
    lines = [export_line([[openinference_retriever(good[0], "01" * 16, rng)]])]
    for record, change in zip(records, BAD_SPANS, strict=True):
        # each bad span on its own line, in the second scope, after an LLM span in the first
        llm = other_span("ee" * 8, "cd" * 16, "2026-12-01", "LLM")
        lines.append(export_line([[llm, bad_span(record, change)]]))
    lines.append("not json at all")
    lines.append(json.dumps({"trace_id": "t1"}))
    lines.append(export_line([[openinference_retriever(good[1], "02" * 16, rng)]]))
    path = write_lines(tmp_path / "bad.jsonl", lines)
    rows, counts = converted(path)

    errors = [row.message() for row in rows if row.error]
    expected = []
    for line, (record, change) in enumerate(zip(records, BAD_SPANS, strict=True), start=2):
        named = "" if change == "no spanId" else f"span {record['trace_id']}: "
        expected.append(f"bad.jsonl line {line}: {named}{BAD_SPANS[change]}")
    n = len(BAD_SPANS)
    expected.append(f"bad.jsonl line {n + 2}: malformed JSON")
    expected.append(
        f"bad.jsonl line {n + 3}: not an OTLP export line: resourceSpans is null, not a list of "
        "resource spans"
    )
    assert len(errors) == len(expected)
    for got, want in zip(errors, expected, strict=True):
        assert got.startswith(want), (got, want)
    assert [json.loads(r.record or "")["trace_id"] for r in rows if r.record] == [
        good[0]["trace_id"],
        good[1]["trace_id"],
    ]
    # read: 2 good + n bad + n LLM spans + 2 unreadable lines
    assert counts == SpanCounts(
        read=2 + n + n + 2, converted=2, quarantined=n + 2, skipped=n, records=2
    )
    assert counts.read == counts.converted + counts.quarantined + counts.skipped


def test_a_truncated_gzip_keeps_the_whole_lines(tmp_path: Path) -> None:
    records = make_records(9, seed=6)
    whole = spans_file(tmp_path, records, "whole.jsonl.gz", genai=False)
    cut = tmp_path / "cut.jsonl.gz"
    data = gzip.decompress(whole.read_bytes())
    last_line_start = data.rstrip(b"\n").rfind(b"\n") + 1
    cut.write_bytes(gzip.compress(data)[:-30])  # the end of the last line and the trailer lost
    rows, counts = converted(cut)
    assert [json.loads(r.record or "")["trace_id"] for r in rows if r.record] == [
        r["trace_id"] for r in records[:6]
    ]
    assert [r.message() for r in rows if r.error] == [
        "cut.jsonl.gz line 3: the gzip stream is truncated; this line was cut off"
    ]
    assert last_line_start > 0
    assert (counts.read, counts.quarantined) == (6 + 4 + 1, 1)


def test_not_gzip_stops_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"plain text")
    with pytest.raises(SpanFileError, match=r"x\.jsonl\.gz: not a gzip file"):
        list(read_lines(path))


# --- stages -----------------------------------------------------------------------------------


def retriever_and_reranker(n: int, record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    trace = trace_id_for(n)
    retrieve = openinference_retriever(record, trace, random.Random(n))
    ids = record["retrieved_ids"]
    rerank = reranker(f"{n + 1:08x}aaaaaaaa", trace, record["timestamp"], ids, ids[::-1][:3])
    return retrieve, rerank


def test_a_reranker_gives_its_input_and_output_with_the_retrievers_labels(tmp_path: Path) -> None:
    records = make_records(4, seed=8)
    pairs = [retriever_and_reranker(n, r) for n, r in enumerate(records)]
    lines = [
        export_line([[pairs[0][1], pairs[0][0]]]),  # reranker first in the same line
        export_line([[pairs[1][0]]]),
        export_line([[pairs[1][1], pairs[2][0]]]),  # reranker a line after its retriever
        export_line([[pairs[2][1]]]),
    ]
    rows, counts = converted(write_lines(tmp_path / "stages.jsonl", lines))
    assert [r.error for r in rows if r.error] == []
    made = [json.loads(r.record or "") for r in rows]
    by_id = {m["trace_id"]: m for m in made}
    for n, record in enumerate(records[:3]):
        span_id = pairs[n][1]["spanId"]
        retrieved = by_id[record["trace_id"]]
        given, reranked = by_id[span_id + INPUT_SUFFIX], by_id[span_id]
        assert (retrieved["stage"], given["stage"], reranked["stage"]) == (
            "retriever",
            "reranker_input",
            "reranker",
        )
        assert given["retrieved_ids"] == record["retrieved_ids"]
        assert reranked["retrieved_ids"] == record["retrieved_ids"][::-1][:3]
        for field in ("query_id", *LABEL_FIELDS):
            assert given.get(field) == reranked.get(field) == record.get(field), field
        assert given["otel_trace_id"] == reranked["otel_trace_id"] == trace_id_for(n)
        assert given["timestamp"] == reranked["timestamp"]
    # 3 retrievers + 3 rerankers converted, 3 + 2 * 3 records
    assert counts == SpanCounts(read=6, converted=6, quarantined=0, skipped=0, records=9)


def test_a_reranker_without_its_retriever_uses_its_own_metadata(tmp_path: Path) -> None:
    record = make_records(1, seed=9)[0]
    own = [attribute("metadata", json.dumps({"query_id": "own-q", "segment": "s1"}))]
    alone = reranker("ab" * 8, "12" * 16, record["timestamp"], ["a", "b"], ["b"], own)
    bare = reranker("cd" * 8, "34" * 16, record["timestamp"], ["a"], ["a"])
    # two retrievers in one trace: which one the bare reranker follows is unknown
    first, _ = retriever_and_reranker(0, record)
    second = json.loads(json.dumps(first)) | {"spanId": "99" * 8}
    ambiguous = reranker("ef" * 8, first["traceId"], record["timestamp"], ["a"], ["a"])
    lines = [export_line([[alone, bare]]), export_line([[first, second, ambiguous]])]
    rows, counts = converted(write_lines(tmp_path / "alone.jsonl", lines))
    made = {json.loads(r.record)["trace_id"]: json.loads(r.record) for r in rows if r.record}
    assert (made["ab" * 8]["query_id"], made["ab" * 8]["segment"]) == ("own-q", "s1")
    assert [r.message() for r in rows if r.error] == [
        f"alone.jsonl line 1: span {'cd' * 8}: no query id: metadata has no query_id and the span "
        "has no reranker.query or input.value",
        f"alone.jsonl line 2: span {'ef' * 8}: its trace {first['traceId']} holds several "
        "RETRIEVER spans, so which one it reranks is unknown, and no query id: metadata has no "
        "query_id and the span has no reranker.query or input.value",
    ]
    assert counts.unpaired_rerankers == 1
    assert counts == SpanCounts(
        read=5, converted=3, quarantined=2, skipped=0, records=4, unpaired_rerankers=1
    )


def test_the_remembered_traces_are_bounded(tmp_path: Path) -> None:
    records = make_records(3, seed=10)
    pairs = [retriever_and_reranker(n, r) for n, r in enumerate(records)]
    lines = [export_line([[p[0]]]) for p in pairs] + [export_line([[pairs[0][1]]])]
    converter = SpanConverter(recent_traces=2)
    path = write_lines(tmp_path / "b.jsonl", lines)
    rows = list(converter.convert_file(path))
    # trace 0's retriever was forgotten: its reranker falls back on its own (absent) metadata
    assert [r.error for r in rows if r.error] == [
        f"span {pairs[0][1]['spanId']}: no query id: metadata has no query_id and the span has "
        "no reranker.query or input.value"
    ]


# --- mapping and detection -------------------------------------------------------------------


def test_the_mapping_is_configurable(tmp_path: Path) -> None:
    config = config_from_mapping(
        {
            "trace_format": {
                "document_id_attribute": "hits.{i}.key",
                "metadata_attribute": "app.meta",
                "query_id_key": "qid",
                "segment_key": "tenant",
            }
        }
    )
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("hits.0.key", "x"),
        attribute("hits.1.key", 7),
        attribute("app.meta", json.dumps({"qid": "Q", "tenant": "acme", "query_id": "no"})),
    ]
    item = span("0f" * 8, "1e" * 16, "2026-12-01T08:00:00Z", "r", attributes)
    rows, _ = converted(
        write_lines(tmp_path / "m.jsonl", [export_line([[item]])]), config.trace_format
    )
    record = json.loads(rows[0].record or "")
    assert (record["retrieved_ids"], record["query_id"], record["segment"]) == (
        ["x", 7],
        "Q",
        "acme",
    )
    assert record["timestamp"] == "2026-12-01T08:00:00.000000Z"


def test_detection_by_content(tmp_path: Path) -> None:
    line = export_line([[other_span("aa" * 8, "bb" * 16, "2026-12-01", "LLM")]])
    assert is_otlp_line(line)
    assert is_otlp_line(b"\xef\xbb\xbf" + line.encode())
    assert is_otlp_line(json.dumps({"other": 1, "resourceSpans": []}))
    assert not is_otlp_line(json.dumps(make_records(1, seed=11)[0]))
    assert not is_otlp_line("not json")
    # a first line much longer than what is sniffed: only its start is read
    big = export_line(
        [
            [
                openinference_retriever(r, "cc" * 16, random.Random(0))
                for r in make_records(400, seed=12)
            ]
        ]
    )
    assert len(big) > 4 * SNIFF_BYTES
    records = write_lines(
        tmp_path / "records.jsonl.gz", [json.dumps(r) for r in make_records(3, 13)]
    )
    assert sniff_file(write_lines(tmp_path / "big.jsonl.gz", ["", big]))
    assert sniff_file(write_lines(tmp_path / "big.json", [big]))
    assert not sniff_file(records)
    assert not sniff_file(write_lines(tmp_path / "empty.jsonl", []))


def test_an_empty_genai_list_is_an_empty_result(tmp_path: Path) -> None:
    record = make_records(1, seed=14)[0] | {"retrieved_ids": []}
    empty_list = genai_retriever(record, "aa" * 16, random.Random(0), as_json_text=False)
    empty_text = genai_retriever(
        record | {"trace_id": "bb" * 8}, "aa" * 16, random.Random(0), as_json_text=True
    )
    rows, counts = converted(
        write_lines(tmp_path / "e.jsonl", [export_line([[empty_list, empty_text]])])
    )
    assert [json.loads(r.record or "")["retrieved_ids"] for r in rows] == [[], []]
    assert counts == SpanCounts(read=2, converted=2, records=2, empty=2)


def test_no_document_attribute_is_an_empty_result_for_each_stage(tmp_path: Path) -> None:
    """OpenInference writes nothing for an empty list: a RETRIEVER span without documents and a
    RERANKER span without output documents are empty rankings, not quarantined."""
    record = make_records(1, seed=16)[0] | {"retrieved_ids": []}
    empty = openinference_retriever(record, "aa" * 16, random.Random(0))
    cut = reranker("bb" * 8, "aa" * 16, record["timestamp"], ["d1", "d2"], [])
    rows, counts = converted(write_lines(tmp_path / "e.jsonl", [export_line([[empty, cut]])]))
    made = {json.loads(r.record or "")["trace_id"]: json.loads(r.record or "") for r in rows}
    assert [r.error for r in rows] == [None] * 3
    assert made[record["trace_id"]]["retrieved_ids"] == []
    assert made["bb" * 8 + INPUT_SUFFIX]["retrieved_ids"] == ["d1", "d2"]
    assert made["bb" * 8]["retrieved_ids"] == []
    assert made["bb" * 8]["query_id"] == record["query_id"]  # paired with the held retriever
    assert counts == SpanCounts(read=2, converted=2, records=3, empty=2)


def test_line_ends_a_bom_and_a_corrupt_gzip(tmp_path: Path) -> None:
    records = make_records(4, seed=15)
    rng = random.Random(0)
    lines = [export_line([[openinference_retriever(r, "aa" * 16, rng)]]) for r in records]
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n\r\n".join(line.encode() for line in lines) + b"\r\n")
    rows, counts = converted(path)
    assert [r.source_line for r in rows] == [1, 3, 5, 7]  # blank lines are not spans
    assert counts == SpanCounts(read=4, converted=4, records=4)
    # two members: the first whole, the second broken after its header
    first = gzip.compress(("\n".join(lines[:2]) + "\n").encode())
    second = bytearray(gzip.compress(("\n".join(lines[2:]) + "\n").encode()))
    second[12:20] = b"\xff" * 8
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(first + bytes(second))
    rows, counts = converted(broken)
    assert [json.loads(r.record or "")["trace_id"] for r in rows if r.record] == [
        r["trace_id"] for r in records[:2]
    ]
    (error,) = [r.message() for r in rows if r.error]
    assert error.startswith("broken.jsonl.gz line 3: the gzip stream is corrupt after ")
    assert error.endswith("; this line was cut off")


def test_an_export_line_over_the_limit_is_quarantined_unread(tmp_path: Path) -> None:
    """A line longer than the limit is not held in memory: it is reported with its size, and
    the lines around it are read as usual."""
    records = make_records(2, seed=3)
    rng = random.Random(3)
    good = [
        export_line([[openinference_retriever(r, trace_id_for(n), rng, True)]])
        for n, r in enumerate(records)
    ]
    limit = max(map(len, good)) + 100
    huge = '{"resourceSpans": [], "padding": "' + "x" * 5000 + '"}'
    path = write_lines(tmp_path / "spans.jsonl", [good[0], huge, good[1]])
    converter = SpanConverter(max_line_bytes=limit)
    rows = list(converter.convert_file(path, name="spans.jsonl"))
    assert [(row.source_line, row.error) for row in rows if row.error] == [
        (
            2,
            f"the line is too long to read: {len(huge):,} bytes, more than the limit of"
            f" {limit:,} (RETRIEVAL_PIPELINE_MAX_LINE_BYTES)",
        )
    ]
    assert [row.source_line for row in rows if row.record] == [1, 3]


def test_json_nested_deeper_than_python_reads_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = write_lines(tmp_path / "deep.jsonl", [deep])
    assert not sniff_file(path)
    assert not is_otlp_line(deep)
    converter = SpanConverter()
    (row,) = converter.convert_line(deep, "deep.jsonl", 1)
    assert row.record is None and row.error is not None and "nested too deeply" in row.error
