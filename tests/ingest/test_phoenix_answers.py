"""Answers a Phoenix reader must not take for a page of spans (`ingest.phoenix`), from a stand-in
server (`fake_phoenix`): an HTML page with status 200 on page 1 or page 2 once ended the day
silently (the client logs a warning and returns an empty frame), and a server that answers a
full page at one instant whatever is asked once made the reader double its page limit until the
request timed out. The real server's paging through spans sharing a start time is tested in
test_phoenix.py."""

from __future__ import annotations

import json
from datetime import date

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.ingest.phoenix import MAX_HALVINGS, PhoenixError, PhoenixStore, read_day
from retrieval_pipeline.ingest.spans import SpanConverter, SpanCounts, SpanRow
from tests.ingest.fake_phoenix import (
    BOUNDARY,
    HTML_PAGE,
    Answer,
    fake_phoenix,
    retriever_row,
    spans_page,
)

DAY = date(2026, 12, 1)
PROJECT = "rag"


def read(base_url: str, page_spans: int = 1000) -> tuple[list[SpanRow], SpanCounts]:
    converter = SpanConverter()
    rows = list(read_day(PhoenixStore(base_url, PROJECT, page_spans=page_spans), DAY, converter))
    return rows, converter.counts


def not_a_page(base_url: str, answered: str) -> str:
    return (
        f"{base_url} project {PROJECT}: the span query {base_url}/v1/spans?project_name="
        f"{PROJECT} {answered}, not a page of spans; is {base_url} a Phoenix server?"
    )


def test_an_html_page_for_page_1_is_an_error_naming_the_endpoint() -> None:
    with fake_phoenix([HTML_PAGE]) as fake, pytest.raises(PhoenixError) as failure:
        read(fake.base_url)
    assert str(failure.value) == not_a_page(
        fake.base_url, "answered 200 OK as text/html; charset=utf-8"
    )


def test_an_html_page_for_page_2_is_an_error_not_the_end_of_the_day() -> None:
    """Page 1 is full (2 of 2, at two instants): it gives its newer span, and page 2 is asked
    for; the HTML answer to it stops the day with the error instead of ending it there."""
    first = spans_page(
        [
            retriever_row("00000000000000a2", "2026-12-01T10:00:02Z", ["d1"], "d1"),
            retriever_row("00000000000000a1", "2026-12-01T10:00:01Z", ["d1"], "d1"),
        ]
    )
    with fake_phoenix([first, HTML_PAGE]) as fake:
        converter = SpanConverter()
        rows = read_day(PhoenixStore(fake.base_url, PROJECT, page_spans=2), DAY, converter)
        assert json.loads(next(rows).record or "")["trace_id"] == "00000000000000a2"
        with pytest.raises(PhoenixError) as failure:
            next(rows)
    assert str(failure.value) == not_a_page(
        fake.base_url, "answered 200 OK as text/html; charset=utf-8"
    )
    assert len(fake.queries) == 2
    assert fake.queries[1]["end_time"] == "2026-12-01T10:00:01.000001+00:00"


@pytest.mark.parametrize(
    ("answer", "answered"),
    [
        (
            Answer(200, f"multipart/mixed; boundary={BOUNDARY}", f"--{BOUNDARY}--\r\n".encode()),
            "answered 200 OK with no JSON part",
        ),
        (Answer(200, "application/json", b"{}"), "answered 200 OK as application/json"),
        (
            Answer(503, "text/html", b"<html>busy</html>"),
            "answered 503 Service Unavailable as text/html",
        ),
    ],
)
def test_other_answers_that_are_not_a_page_are_errors(answer: Answer, answered: str) -> None:
    with fake_phoenix([answer]) as fake, pytest.raises(PhoenixError) as failure:
        read(fake.base_url)
    assert str(failure.value) == not_a_page(fake.base_url, answered)


def test_evaluate_tells_a_phoenix_answer_that_is_not_a_page_in_one_line() -> None:
    with fake_phoenix([HTML_PAGE]) as fake:
        source = f"phoenix+{fake.base_url}/{PROJECT}?day={DAY.isoformat()}"
        result = CliRunner().invoke(main, ["evaluate", source])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    expected = not_a_page(fake.base_url, "answered 200 OK as text/html; charset=utf-8")
    assert result.stderr == f"Error: {expected}\n"


def test_a_full_page_at_one_instant_whatever_is_asked_fails_fast_in_one_line() -> None:
    """Phoenix narrows a page to the span ids asked for; a server that does not keeps
    answering the same full page. The reader halves the range of span ids asked for at most
    MAX_HALVINGS times, never asking for more than a page, then stops."""
    same_instant = spans_page(
        [
            retriever_row(f"00000000000000b{n}", "2026-12-01T10:00:00Z", ["d1"], "d1")
            for n in range(2)
        ]
    )
    with fake_phoenix([same_instant]) as fake, pytest.raises(PhoenixError) as failure:
        read(fake.base_url, page_spans=2)
    assert str(failure.value) == (
        f"{fake.base_url} project {PROJECT}: more than 2 spans started at "
        "2026-12-01T10:00:00+00:00 and their span ids ('00000000000000b1' among them) cannot be "
        "told apart into pages"
    )
    assert {query["limit"] for query in fake.queries} == {2}
    # the day's page, the instant's first page, then one page per halving
    assert len(fake.queries) == 2 + MAX_HALVINGS


def test_a_span_id_repeated_in_a_page_is_quarantined_as_in_a_file() -> None:
    """Phoenix keeps a span id once; a page that repeats one gets the span converter's rule."""
    span_id = "00000000000000c1"
    page = spans_page(
        [
            retriever_row(span_id, "2026-12-01T10:00:02Z", ["d1"], "d1"),
            retriever_row(span_id, "2026-12-01T10:00:01Z", ["d2"], "d1"),
        ]
    )
    with fake_phoenix([page]) as fake:
        rows, counts = read(fake.base_url)
    assert [row.message() for row in rows if row.error] == [
        f"{fake.base_url} project {PROJECT} line 1: span {span_id}: duplicate span id {span_id} "
        f"in trace {'ab' * 16}: first seen at line 1"
    ]
    assert counts == SpanCounts(read=2, converted=1, quarantined=1, records=1)


def test_a_position_that_is_not_ascii_digits_is_quarantined_as_in_a_file() -> None:
    """A frame whose documents are an object keyed by position text (as Phoenix would nest a
    key it cannot take for a list index) gets the span converter's rule on positions."""
    bad = retriever_row("00000000000000d1", "2026-12-01T10:00:02Z", [], "d1")
    bad["attributes.retrieval.documents"] = {
        "0": {"document": {"id": "d1"}},
        "\u00b2": {"document": {"id": "d2"}},  # superscript two
    }
    good = retriever_row("00000000000000d2", "2026-12-01T10:00:01Z", ["d1"], "d1")
    with fake_phoenix([spans_page([bad, good])]) as fake:
        rows, counts = read(fake.base_url)
    assert [row.message() for row in rows if row.error] == [
        f"{fake.base_url} project {PROJECT} line 1: span 00000000000000d1: the attribute "
        '"retrieval.documents.\u00b2.document.id" is under retrieval.documents., yet "\u00b2" is '
        "not a document position: positions are ASCII digits without a leading zero "
        "(retrieval.documents.0.document.id, retrieval.documents.1.document.id, ...)"
    ]
    assert counts == SpanCounts(read=2, converted=1, quarantined=1, records=1)
