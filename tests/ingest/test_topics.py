"""Topics files: query texts to query ids (`ingest.topics`), and their use on spans."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from retrieval_pipeline.config import TraceFormatConfig, config_from_mapping
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.ingest.topics import Topics, TopicsError, load_topics
from tests.ingest.span_exports import attribute, export_line, span

EXPECTED = {
    "what is bm25": ("q1",),
    "reranking, with commas": ("q2",),
    "twice": ("q3", "q4"),
}


def write(path: Path, text: str) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


TREC = "q1\twhat is bm25\n\nq2\treranking, with commas\nq3\ttwice\nq4\t twice \nq3\ttwice\n"
CSV = (
    'query_id,text,notes\nq1,what is bm25,\nq2,"reranking, with commas",x\nq3,twice,\nq4, twice ,\n'
)
PAIRS = [("q1", "what is bm25"), ("q2", "reranking, with commas"), ("q3", "twice"), ("q4", "twice")]
JSONL = "\n".join(json.dumps({"query_id": qid, "text": text}) for qid, text in PAIRS)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("topics.tsv", TREC),
        ("topics.txt.gz", TREC),
        ("topics.csv", CSV),
        ("topics.jsonl", JSONL),
        ("topics.jsonl.gz", JSONL),
    ],
)
def test_each_format_gives_the_same_topics(tmp_path: Path, name: str, text: str) -> None:
    topics = load_topics(write(tmp_path / name, text))
    assert topics.ids_by_text == EXPECTED
    assert topics.ids("  what is bm25\n") == ("q1",)
    assert topics.ids("unknown") == ()


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("t.tsv", "q1\tfine\nq2 no tab here\n", "t.tsv:2: expected qid<TAB>text, found no tab"),
        ("t.tsv", "q1\tfine\n\n\t text\n", "t.tsv:3: the query id is missing or empty"),
        ("t.tsv", "q1\t  \n", "t.tsv:1: the query text is missing or empty"),
        ("t.csv", "qid,query\nq1,a\n", "t.csv:1: the header must name query_id and text"),
        ("t.csv", "query_id,text\nq1,a\nq2,b,c\n", "t.csv:3: 3 columns, the header has 2"),
        ("t.jsonl", '{"query_id": "q1", "text": "a"}\n{"query_id": "q2"\n', "t.jsonl:2: not valid"),
        ("t.jsonl", '{"query_id": "q1", "text": "a"}\n[1]\n', "t.jsonl:2: not a JSON object"),
        ("t.jsonl", '{"query_id": true, "text": "a"}\n', "t.jsonl:1: the query id is missing"),
    ],
)
def test_a_bad_line_names_the_file_and_line(
    tmp_path: Path, name: str, text: str, reason: str
) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(TopicsError) as caught:
        load_topics(path)
    assert str(caught.value).startswith(f"{tmp_path}/{reason}")


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TopicsError, match=r"absent\.tsv: cannot be read"):
        load_topics(tmp_path / "absent.tsv")
    (tmp_path / "cut.tsv.gz").write_bytes(gzip.compress(b"q1\ta\n")[:-6])
    with pytest.raises(TopicsError, match=r"cut\.tsv\.gz: not a whole gzip file"):
        load_topics(tmp_path / "cut.tsv.gz")


def retriever(span_id: str, query_text: str, metadata: dict[str, str] | None = None) -> dict:
    attributes = [
        attribute("openinference.span.kind", "RETRIEVER"),
        attribute("input.value", query_text),
        attribute("retrieval.documents.0.document.id", "d1"),
    ]
    if metadata is not None:
        attributes.append(attribute("metadata", json.dumps(metadata)))
    return span(span_id, "ab" * 16, "2026-12-01T10:00:00Z", "retrieve", attributes)


def test_spans_take_the_topics_ids_of_their_query_texts(tmp_path: Path) -> None:
    """Only a query id that is the query text is replaced; a text under two ids is
    quarantined naming them; a text the topics lack stays, and is counted."""
    topics = write(tmp_path / "topics.tsv", TREC)
    spans = [
        retriever("00000000000000a1", " what is bm25 "),
        retriever("00000000000000a2", "what is bm25", {"query_id": "own"}),
        retriever("00000000000000a3", "twice"),
        retriever("00000000000000a4", "not in the topics"),
    ]
    path = write(tmp_path / "spans.jsonl", export_line([spans]) + "\n")
    config = config_from_mapping({"trace_format": {"topics_file": str(topics)}})
    reading = SpanReading(config.trace_format)
    # the --topics option's way: the same section with the file set
    same = SpanReading(TraceFormatConfig().model_copy(update={"topics_file": str(topics)}))
    assert same.topics == reading.topics == load_topics(topics)
    converter = reading.converter()
    assert converter.topics is reading.topics  # read once, shared by the converters
    rows = list(converter.convert_file(path))
    made = {r.span_id: json.loads(r.record)["query_id"] for r in rows if r.record}
    assert made == {
        "00000000000000a1": "q1",
        "00000000000000a2": "own",
        "00000000000000a4": "not in the topics",
    }
    assert [r.error for r in rows if r.error] == [
        'span 00000000000000a3: the query text "twice" is under several query ids in the topics '
        "(q3, q4): which one is meant is unknown"
    ]
    assert converter.counts.unknown_query_texts == 1
    # without topics the text is the query id, and nothing is counted
    plain = SpanReading().converter()
    rows = list(plain.convert_file(path))
    assert [json.loads(r.record)["query_id"] for r in rows if r.record][2] == "twice"
    assert plain.counts.unknown_query_texts == 0


def test_topics_are_a_mapping_of_stripped_texts() -> None:
    assert len(Topics({"a": ("q",)})) == 1
    assert Topics().ids("a") == ()
