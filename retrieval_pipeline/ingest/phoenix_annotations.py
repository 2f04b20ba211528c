"""Annotations to and from a Phoenix server (issue 35; docs/phoenix.md), over its HTTP API.

Read: document annotations through Phoenix's GraphQL API (`POST /graphql`, the Span type's
`documentEvaluations`, as Phoenix's UI reads them: there is no REST read route, and an unknown
`/v1/` path answers the UI's HTML), and span annotations through
`GET /v1/projects/{project}/span_annotations` (1,000 span ids a request, paged by cursor).
Write: span annotations through `POST /v1/span_annotations`, `batch` a request; annotations that
share span, name and a non-empty `identifier` are updated, not added, so a rerun replaces its own.
A failed write is returned as a warning, never raised: the day it belongs to is not lost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from itertools import islice
from typing import Any
from urllib.parse import unquote

from retrieval_pipeline.ingest.phoenix import PhoenixError, PhoenixStore

# Failed write requests in a row after which the rest are counted, not sent: a server that is down
# answers each request only after its timeout, and a day holds many batches.
FAILURES_IN_A_ROW = 3
SPANS_PER_READ = 1000  # Phoenix's limit of span ids a span-annotation request
SPANS_PER_QUERY = 50  # spans asked for in one GraphQL request: Phoenix allows 50 aliases
_DOCUMENT_FIELDS = "name annotatorKind label score documentPosition"
_PROJECT_START = "query ($name: String!) { getProjectByName(name: $name) { startTime } }"


@dataclass(frozen=True)
class SpanScore:
    span_id: str
    metric: str  # as the project prints it: ndcg@10
    value: float


@dataclass
class WriteResult:
    written: int = 0
    warnings: list[str] = field(default_factory=list)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


# The headers Phoenix's own client sends, from the environment: PHOENIX_CLIENT_HEADERS (W3C
# baggage form, `name=value` pairs split by commas, values URL-encoded) and PHOENIX_API_KEY.
CLIENT_HEADERS_ENV, API_KEY_ENV = "PHOENIX_CLIENT_HEADERS", "PHOENIX_API_KEY"
_HEADER = re.compile(
    r"[ \t]*[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*="
    r"[ \t]*[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*"
)


def env_client_headers(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The headers Phoenix's client takes from the process environment (names lower-cased, a
    malformed pair left out, as it does), with PHOENIX_API_KEY as a bearer token unless they
    name an authorization. Read here rather than through `phoenix.client`, whose import loads
    the Phoenix server package when it is installed: this client also asks, while the Dagster
    definitions load, for the project's first span. Phoenix's `.env` file is not read here."""
    headers: dict[str, str] = {}
    for pair in re.split(r"[ \t]*,[ \t]*", environ.get(CLIENT_HEADERS_ENV) or ""):
        if pair and _HEADER.fullmatch(pair.strip()):
            name, value = pair.split("=", 1)
            headers[unquote(name).strip().lower()] = unquote(value).strip()
    api_key = environ.get(API_KEY_ENV)
    if api_key and "authorization" not in headers:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _client(store: PhoenixStore) -> Any:
    """An HTTP client for the store's endpoint, with the headers Phoenix's client would send
    (`env_client_headers`; the store's own API key first)."""
    import httpx

    headers = env_client_headers()
    if store.api_key:
        headers["authorization"] = f"Bearer {store.api_key}"
    return httpx.Client(
        base_url=store.endpoint.rstrip("/"), headers=headers, timeout=store.timeout_s
    )


def _json(response: Any, what: str) -> Any:
    kind = response.headers.get("content-type", "")
    if response.status_code != 200 or "json" not in kind:
        raise PhoenixError(
            f"{response.request.url}: {what} answered {response.status_code} {kind!r}, not JSON: "
            "is this a Phoenix server of version 20 or later?"
        )
    return response.json()


def write_span_scores(
    store: PhoenixStore,
    scores: Iterable[SpanScore],
    *,
    identifier: str,
    explanation: str,
    batch: int = 1000,
    failures_in_a_row: int = FAILURES_IN_A_ROW,
) -> WriteResult:
    """Each score as a CODE span annotation named by its metric; a failed request a warning, and
    after `failures_in_a_row` failed requests in a row the rest are counted as not written."""
    if not identifier:
        raise ValueError("identifier must be non-empty: Phoenix treats '' as everyone's")
    result = WriteResult()
    failed = 0
    chunks = _chunks(scores, batch)
    with _client(store) as client:
        for chunk in chunks:
            data = [
                {
                    "span_id": s.span_id,
                    "name": s.metric,
                    "annotator_kind": "CODE",
                    "identifier": identifier,
                    "result": {"score": s.value, "explanation": explanation},
                }
                for s in chunk
            ]
            try:
                response = client.post(
                    "/v1/span_annotations", params={"sync": "true"}, json={"data": data}
                )
                _json(response, "writing span annotations")
            except Exception as error:  # any failure is the run's warning
                result.warnings.append(
                    f"{store.name}: {len(chunk)} span annotations not written: {error}"
                )
                failed += 1
                if failed >= failures_in_a_row:
                    break
                continue
            failed = 0
            result.written += len(chunk)
    rest = sum(len(chunk) for chunk in chunks)
    if rest:
        result.warnings.append(
            f"{store.name}: {rest} more span annotations not written: {failed} requests in a row "
            "failed, so the rest were not sent"
        )
    return result


def read_span_annotations(
    store: PhoenixStore, span_ids: Iterable[str], names: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The span annotations of these spans (named `names`, when given)."""
    out: list[dict[str, Any]] = []
    with _client(store) as client:
        for chunk in _chunks(span_ids, SPANS_PER_READ):
            cursor: str | None = None
            while True:
                params: dict[str, Any] = {"span_ids": chunk, "limit": 1000}
                if names:
                    params["include_annotation_names"] = list(names)
                if cursor:
                    params["cursor"] = cursor
                page = _json(
                    client.get(f"/v1/projects/{store.project}/span_annotations", params=params),
                    "reading span annotations",
                )
                out.extend(page["data"])
                cursor = page.get("next_cursor")
                if not cursor:
                    break
    return out


def read_document_annotations(store: PhoenixStore, span_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The document annotations of these spans, as `phoenix_labels.choose_labels` takes them."""
    out: list[dict[str, Any]] = []
    with _client(store) as client:
        for chunk in _chunks(span_ids, SPANS_PER_QUERY):
            aliases = " ".join(
                f's{n}: getSpanByOtelId(spanId: "{span_id}") '
                f"{{ documentEvaluations {{ {_DOCUMENT_FIELDS} }} }}"
                for n, span_id in enumerate(chunk)
                if span_id.isalnum()
            )
            if not aliases:
                continue
            answer = _json(
                client.post("/graphql", json={"query": f"{{ {aliases} }}"}),
                "reading document annotations",
            )
            if answer.get("errors"):
                raise PhoenixError(f"{store.name}: GraphQL answered {answer['errors'][:1]}")
            for n, span_id in enumerate(chunk):
                span = (answer.get("data") or {}).get(f"s{n}")
                for note in (span or {}).get("documentEvaluations", []):
                    out.append(
                        {
                            "span_id": span_id,
                            "name": note["name"],
                            "annotator_kind": note["annotatorKind"],
                            "label": note["label"],
                            "score": note["score"],
                            "document_position": note["documentPosition"],
                        }
                    )
    return out


def earliest_day(store: PhoenixStore) -> date | None:
    """The UTC day of the project's earliest span (GraphQL `getProjectByName { startTime }`,
    which Phoenix floors to the minute); None when the project does not exist or holds none."""
    with _client(store) as client:
        answer = _json(
            client.post(
                "/graphql", json={"query": _PROJECT_START, "variables": {"name": store.project}}
            ),
            "reading the project's first span",
        )
    if answer.get("errors"):
        raise PhoenixError(f"{store.name}: GraphQL answered {answer['errors'][:1]}")
    project = (answer.get("data") or {}).get("getProjectByName") or {}
    started = project.get("startTime")
    if not started:
        return None
    return datetime.fromisoformat(started).astimezone(UTC).date()
