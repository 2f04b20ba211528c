"""Annotations both ways against a real Phoenix server: document annotations read back as labels
(Phoenix keeps one per document and name, the last written), span scores written as CODE
annotations, a rerun updating, not adding."""

from __future__ import annotations

import random

import pytest

from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.phoenix_annotations import (
    SpanScore,
    _client,
    env_client_headers,
    read_document_annotations,
    read_span_annotations,
    write_span_scores,
)
from retrieval_pipeline.ingest.phoenix_labels import DocumentLabel, choose_labels
from tests.ingest.phoenix_server import PhoenixServer
from tests.ingest.span_exports import (
    export_line,
    make_records,
    openinference_retriever,
    to_protobuf,
    trace_id_for,
)
from tests.ingest.test_phoenix import wait_until_stored

pytestmark = pytest.mark.slow
PROJECT = "annotated-day"


def test_labels_in_scores_out_and_a_rerun_updates(phoenix: PhoenixServer) -> None:
    rng = random.Random(35)
    records = make_records(3, seed=35)
    spans = [openinference_retriever(r, trace_id_for(n), rng) for n, r in enumerate(records)]
    for item in spans:  # traces of their own: Phoenix keeps a trace in its first project
        item["traceId"] = "a5" + item["traceId"][2:]
        item["spanId"] = "a5" + item["spanId"][2:]
    phoenix.send(to_protobuf(export_line([spans], project=PROJECT)))
    wait_until_stored(phoenix, len(spans), PROJECT)
    span_ids = [s["spanId"] for s in spans]
    store = PhoenixStore(phoenix.base_url, PROJECT)

    def doc(span: str, at: int, kind: str, **result: object) -> dict[str, object]:
        return {
            "span_id": span,
            "document_position": at,
            "name": "relevance",
            "annotator_kind": kind,
            "result": result,
        }

    notes = [
        doc(span_ids[0], 0, "HUMAN", score=2.0),
        doc(span_ids[0], 0, "LLM", score=0.0),
        doc(span_ids[0], 1, "LLM", label="relevant"),
        doc(span_ids[1], 0, "HUMAN", label="irrelevant"),
        doc(span_ids[1], 0, "LLM", score=1.0),
        doc(span_ids[2], 0, "CODE", score=1.0),
    ]
    phoenix.annotate_documents(notes)

    read = read_document_annotations(store, span_ids)
    # Phoenix 20 keeps ONE document annotation per span, position and name, whatever its kind
    # (and refuses a non-empty identifier on one): the LLM label written after the HUMAN one
    # replaced it. 6 written, 4 kept.
    assert len(read) == 4
    chosen = choose_labels(read)
    assert sorted(chosen.labels, key=lambda x: (span_ids.index(x.span_id), x.position)) == [
        DocumentLabel(span_ids[0], 0, 0.0, "phoenix:llm"),
        DocumentLabel(span_ids[0], 1, 1.0, "phoenix:llm"),
        DocumentLabel(span_ids[1], 0, 1.0, "phoenix:llm"),
    ]
    assert chosen.skipped == 1  # CODE does not count by default
    assert chosen.overlaps == []

    scores = [SpanScore(s, m, v) for s in span_ids for m, v in (("ndcg@10", 0.5), ("mrr", 1.0))]
    for run, shift in (("run 1", 0.0), ("run 2", 0.25)):
        moved = [SpanScore(s.span_id, s.metric, s.value - shift) for s in scores]
        done = write_span_scores(
            store,
            moved,
            identifier="retrieval_pipeline",
            explanation=f"{run} of 2026-12-01",
            batch=4,
        )
        assert (done.written, done.warnings) == (len(scores), [])
    back = read_span_annotations(store, span_ids, ["ndcg@10", "mrr"])
    assert len(back) == len(scores)  # the second run updated, it did not add
    got = {(a["span_id"], a["name"]): a for a in back}
    assert {k: a["result"]["score"] for k, a in got.items()} == {
        (s.span_id, s.metric): s.value - 0.25 for s in scores
    }
    assert {a["annotator_kind"] for a in back} == {"CODE"}
    assert {a["result"]["explanation"] for a in back} == {"run 2 of 2026-12-01"}


def test_a_failed_write_is_a_warning() -> None:
    store = PhoenixStore("http://127.0.0.1:9", "nowhere", timeout_s=5)
    done = write_span_scores(
        store, [SpanScore("ab" * 8, "mrr", 1.0)], identifier="retrieval_pipeline", explanation="run"
    )
    assert done.written == 0
    assert len(done.warnings) == 1 and "1 span annotations not written" in done.warnings[0]


def test_writes_stop_after_failures_in_a_row_and_the_rest_are_counted() -> None:
    store = PhoenixStore("http://127.0.0.1:9", "nowhere", timeout_s=5)
    scores = [SpanScore(f"{n:016x}", "mrr", 1.0) for n in range(10)]
    done = write_span_scores(
        store, scores, identifier="retrieval_pipeline", explanation="run", batch=2
    )
    # 3 requests of 2 fail, then the other 4 are counted, not sent: 3 * 2 + 4 == 10
    assert done.written == 0 and len(done.warnings) == 4
    assert "4 more span annotations not written: 3 requests in a row failed" in done.warnings[-1]


def test_an_empty_identifier_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        write_span_scores(
            PhoenixStore("http://127.0.0.1:9", "p"), [], identifier="", explanation="run"
        )


def test_the_client_sends_the_headers_phoenix_s_client_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PHOENIX_CLIENT_HEADERS as Phoenix reads it (W3C baggage: names lower-cased, values
    URL-decoded, a malformed pair left out) and PHOENIX_API_KEY as a bearer token, unless the
    headers name an authorization; the store's own key wins over both."""
    environ = {
        "PHOENIX_CLIENT_HEADERS": "X-Team=search%20eval , bad pair,Tenant=a%3Db",
        "PHOENIX_API_KEY": "k1",
    }
    assert env_client_headers(environ) == {
        "x-team": "search eval",
        "tenant": "a=b",
        "authorization": "Bearer k1",
    }
    given = {**environ, "PHOENIX_CLIENT_HEADERS": "Authorization=Basic%20abc"}
    assert env_client_headers(given) == {"authorization": "Basic abc"}
    assert env_client_headers({}) == {}

    monkeypatch.setenv("PHOENIX_CLIENT_HEADERS", "X-Team=search")
    monkeypatch.setenv("PHOENIX_API_KEY", "k1")
    with _client(PhoenixStore("http://127.0.0.1:9", "p")) as client:
        sent = client.headers
        assert (sent["x-team"], sent["authorization"]) == ("search", "Bearer k1")
    with _client(PhoenixStore("http://127.0.0.1:9", "p", api_key="k2")) as client:
        assert client.headers["authorization"] == "Bearer k2"
