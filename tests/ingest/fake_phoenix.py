"""A stand-in for a Phoenix server, for the answers Phoenix itself never gives (an HTML page with
status 200, a page of spans sharing a span id): a stdlib HTTP server on 127.0.0.1, in a thread of
the test, answering each span query with the next of a script of answers, and stopped (shut down,
its thread joined) when the block ends, whatever happens to the test.

A page of spans is what Phoenix sends: `multipart/mixed`, one JSON part holding the frame in
pandas' table schema (Phoenix's own encoder, `phoenix.utilities.json`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pandas as pd

from tests.processes import HOST

BOUNDARY = "fake-phoenix-boundary"
STOP_WITHIN_S = 30


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def spans_page(spans: Sequence[dict[str, Any]]) -> Answer:
    """A page of spans as Phoenix answers one: each span a row of its frame (columns such as
    `context.span_id`, `start_time`, `attributes.retrieval.documents`), indexed by span id."""
    from phoenix.utilities.json import encode_df_as_json_string

    frame = pd.DataFrame(list(spans))
    if not frame.empty:
        frame["start_time"] = pd.to_datetime(frame["start_time"], utc=True)
        frame = frame.set_index("context.span_id", drop=False)
    part = (
        f"--{BOUNDARY}\r\nContent-Type: application/json\r\n\r\n"
        f"{encode_df_as_json_string(frame)}\r\n--{BOUNDARY}--\r\n"
    )
    return Answer(200, f"multipart/mixed; boundary={BOUNDARY}", part.encode("utf-8"))


HTML_PAGE = Answer(200, "text/html; charset=utf-8", b"<html><body>Sign in</body></html>")


def retriever_row(span_id: str, start: str, ids: Sequence[str], relevant: str) -> dict[str, Any]:
    """One RETRIEVER span as a row of Phoenix's span frame."""
    return {
        "context.span_id": span_id,
        "context.trace_id": "ab" * 16,
        "parent_id": None,
        "start_time": start,
        "attributes.openinference.span.kind": "RETRIEVER",
        "attributes.metadata": json.dumps({"query_id": "q1", "relevant_ids": [relevant]}),
        "attributes.retrieval.documents": [{"document": {"id": doc_id}} for doc_id in ids],
    }


@dataclass
class FakePhoenix:
    base_url: str
    answers: list[Answer]
    queries: list[dict[str, Any]] = field(default_factory=list)  # the span queries received


@contextmanager
def fake_phoenix(answers: Sequence[Answer]) -> Iterator[FakePhoenix]:
    """A server answering the span queries (POST .../v1/spans) with `answers` in turn (the last
    one again once they run out), and any other request with 404."""
    fake = FakePhoenix("", list(answers))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if not self.path.split("?")[0].endswith("/v1/spans"):
                self._send(Answer(404, "text/plain", b"not found"))
                return
            fake.queries.append(json.loads(body))
            at = min(len(fake.queries), len(fake.answers)) - 1
            self._send(fake.answers[at])

        def do_GET(self) -> None:
            self._send(Answer(404, "text/plain", b"not found"))

        def _send(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("content-type", answer.content_type)
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: pytest shows what the test asserts

    server = ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="fake-phoenix", daemon=True)
    thread.start()
    try:
        fake.base_url = f"http://{HOST}:{server.server_address[1]}"
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(STOP_WITHIN_S)
        assert not thread.is_alive(), "the fake Phoenix server did not stop"
