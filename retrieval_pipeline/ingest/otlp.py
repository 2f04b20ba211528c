"""The OTLP/JSON trace export, as the OpenTelemetry Collector's file exporter writes it.

One `ExportTraceServiceRequest` per line (`resourceSpans` -> `scopeSpans` -> `spans`), in
`.json` or `.jsonl`, optionally gzipped. Attribute values are tagged (`stringValue`, `intValue`
written as a JSON string, `doubleValue`, `boolValue`, `arrayValue`, `kvlistValue`, `bytesValue`)
and are decoded here into plain values, so that the mapping onto trace records (`spans.py`) sees
one shape whatever the source. Ids are lowercase hex: OTLP/JSON writes them in hex, protobuf's
JSON mapping (`MessageToJson`) in base64, which is turned into hex here. Pure: json and the
standard library.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from retrieval_pipeline.ingest.gzip import GZIP_MAGIC, GzipStream
from retrieval_pipeline.ingest.lines import MAX_LINE_BYTES, too_long_reason

OTLP_FIELD = "resourceSpans"
OTLP_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")

# What `sniff_file` reads of a file: enough for the start of its first line.
SNIFF_BYTES = 64 * 2**10
_READ_BYTES = 8 * 2**20
_BOM = b"\xef\xbb\xbf"
_OTLP_START = re.compile(rb'\s*\{\s*"resourceSpans"\s*:')
_TRUNCATED = "the gzip stream is truncated; this line was cut off"
_HEX = re.compile(r"[0-9a-fA-F]+")
TRACE_ID_BYTES, SPAN_ID_BYTES = 16, 8


class SpanFileError(ValueError):
    """A span export file that cannot be read at all."""


@dataclass(frozen=True)
class SpanView:
    """One span, however it was stored: ids in lowercase hex (`""`: none), start in Unix
    nanoseconds (None: absent), attributes by their flat OpenTelemetry names
    (`retrieval.documents.0.document.id`), and the id of the span it was called from."""

    span_id: str
    trace_id: str
    start_ns: int | None
    attributes: Mapping[str, object]
    problem: str | None = None  # what could not be read, reported only for a span to convert
    where: str = ""  # its place in the file, for a span without a spanId
    parent_id: str = ""  # the parent span's id (OTLP `parentSpanId`); "" for a root span


@dataclass(frozen=True)
class BadSpan:
    """A span whose structure cannot be read: `where` is its place in the line, for a span
    without a usable spanId."""

    span_id: str | None
    where: str
    reason: str


def is_otlp_line(line: bytes | str) -> bool:
    """Whether a line (or its first bytes) is an OTLP export: a JSON object whose first key is
    `resourceSpans`, or a whole line that is an object holding it."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    data = data.removeprefix(_BOM)
    if _OTLP_START.match(data):
        return True
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python reads
        return False
    return isinstance(parsed, dict) and OTLP_FIELD in parsed


def sniff_file(path: Path) -> bool:
    """Whether a file's first non-blank line is an OTLP export line, reading at most
    `SNIFF_BYTES` of it (decompressed), so that a folder may mix formats."""
    head = b""
    for _, line, error in read_lines(path, limit=SNIFF_BYTES):
        if error is None:
            return is_otlp_line(line)
        head = line
        break
    return bool(head) and is_otlp_line(head)


def read_lines(
    path: Path, limit: int | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes, str | None]]:
    """The non-blank lines of a file as (line number, bytes, error), a `.gz` file inflated as it
    is read; a line cut off by a truncated or corrupt gzip stream comes with the error. A line
    longer than `max_line_bytes` is not kept (memory stays bounded whatever the file): it comes
    empty, with the reason it is too long. With `limit`, reading stops after that many bytes and
    an unfinished line comes with error "limit" (for `sniff_file`)."""
    gzipped = path.name.lower().endswith(".gz")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise SpanFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with handle:
        if gzipped and not GZIP_MAGIC.startswith(handle.read(2)):
            raise SpanFileError(f"{path}: not a gzip file (the name ends in .gz)")
        handle.seek(0)
        stream = GzipStream() if gzipped else None
        parts: list[bytes] = []  # the line being read, joined once it ends (lines can be long)
        number, size = 0, 0
        held, dropped = 0, 0  # bytes of the line being read that are kept, and that were not
        while True:
            try:
                block = handle.read(_READ_BYTES if limit is None else min(_READ_BYTES, limit))
            except OSError as exc:
                raise SpanFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
            if not block:
                break
            for chunk in stream.inflate(block) if stream is not None else (block,):
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    number = number + 1
                    if dropped or held + end - start > max_line_bytes:
                        length = held + dropped + end - start
                        yield number, b"", too_long_reason(length, max_line_bytes)
                    else:
                        parts.append(chunk[start:end])
                        line = _clean(b"".join(parts), number)
                        if line.strip():
                            yield number, line, None
                    parts, held, dropped, start = [], 0, 0, end + 1
                tail = chunk[start:]
                if dropped or held + len(tail) > max_line_bytes:
                    parts, held, dropped = [], 0, held + dropped + len(tail)
                else:
                    parts.append(tail)
                    held += len(tail)
                size += len(chunk)
                if limit is not None and size >= limit:
                    rest = _clean(b"".join(parts), number + 1)
                    if rest.strip():
                        yield number + 1, rest, "limit"
                    return
            if stream is not None and stream.error is not None:
                break
        error = None
        if stream is not None and stream.error is not None:
            error = f"{stream.error}; this line was cut off"
        elif stream is not None and size and not stream.ended:
            error = _TRUNCATED
        if dropped:
            yield number + 1, b"", too_long_reason(held + dropped, max_line_bytes)
            return
        rest = _clean(b"".join(parts), number + 1)
        if rest.strip() or error is not None:
            yield number + 1, rest, error


def _clean(line: bytes, number: int) -> bytes:
    """A line without its CR, and the first without a byte-order mark."""
    if number == 1:
        line = line.removeprefix(_BOM)
    return line.removesuffix(b"\r")


def decode_value(value: object) -> object:
    """An OTLP/JSON `AnyValue` as a plain value: str, int, float, bool, list, dict or None."""
    if not isinstance(value, dict):
        raise ValueError(f"an attribute value must be an object (got {type(value).__name__})")
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:  # a JSON string in OTLP/JSON (int64), a number from some writers
        raw = value["intValue"]
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise ValueError(f"intValue must be an integer or its text (got {raw!r})")
        return int(raw)
    if "doubleValue" in value:  # "NaN", "Infinity" are strings in protobuf JSON
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values") or []
        return [decode_value(item) for item in items]
    if "kvlistValue" in value:
        return decode_attributes((value["kvlistValue"] or {}).get("values") or [])
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def decode_attributes(attributes: object) -> dict[str, object]:
    """A list of `{"key", "value"}` as a dict; the first of a repeated key counts."""
    if not isinstance(attributes, list):
        raise ValueError("attributes must be a list of {key, value} objects")
    decoded: dict[str, object] = {}
    for position, item in enumerate(attributes):
        key = item.get("key") if type(item) is dict else None
        if type(key) is not str:
            raise ValueError(f"attributes[{position}] is not a {{key, value}} object")
        if key in decoded:
            continue
        value = item.get("value", {})
        if type(value) is dict and "stringValue" in value:  # most attributes: no call
            decoded[key] = value["stringValue"]
            continue
        try:
            decoded[key] = decode_value(value)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"attribute {key}: {exc}") from None
    return decoded


def hex_id(value: str, size: int) -> str | None:
    """An OTLP id of `size` bytes as lowercase hex: written in hex (2 * size digits), or in
    base64 as protobuf's JSON mapping writes bytes (standard or URL-safe alphabet, padded or
    not); None when it is neither."""
    if len(value) == 2 * size and _HEX.fullmatch(value):
        return value.lower()
    if len(value) > 4 * -(-size // 3) or not value.isascii():
        return None
    padded = value + "=" * (-len(value) % 4)
    for alphabet in (None, b"-_"):
        try:
            raw = base64.b64decode(padded, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(raw) == size:
            return raw.hex()
    return None


def _shortened(value: str, limit: int = 40) -> str:
    return json.dumps(value if len(value) <= limit else value[:limit] + "...")


def otlp_spans(resource_spans: list[object]) -> Iterator[SpanView | BadSpan]:
    """The spans of one request's `resourceSpans`, decoded, in the order written."""
    for r, resource in enumerate(resource_spans):
        scopes = resource.get("scopeSpans") if isinstance(resource, dict) else None
        for s, scope in enumerate(scopes if isinstance(scopes, list) else ()):
            spans = scope.get("spans") if isinstance(scope, dict) else None
            for n, span in enumerate(spans if isinstance(spans, list) else ()):
                yield _span(span, f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]")


def _span(span: object, where: str) -> SpanView | BadSpan:
    if not isinstance(span, dict):
        return BadSpan(None, where, "the span is not a JSON object")
    span_id = span.get("spanId")
    span_id = span_id if isinstance(span_id, str) and span_id else None
    try:
        attributes = decode_attributes(span.get("attributes", []))
    except ValueError as exc:
        return BadSpan(span_id, where, str(exc))
    trace_id = span.get("traceId")
    raw = span.get("startTimeUnixNano")
    text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
    start, problem = None, None
    if isinstance(text, str) and text.isascii() and text.isdigit():
        start = int(text)
    elif raw is not None:
        problem = (
            f"startTimeUnixNano must be an integer of nanoseconds (got {json.dumps(raw)[:40]})"
        )
    shown_id = span_id or ""
    if span_id is not None:
        span_id = hex_id(span_id, SPAN_ID_BYTES)
        if span_id is None:
            problem = problem or (
                f"spanId {_shortened(shown_id)} is neither 16 hex digits nor the base64 of 8 bytes"
            )
    trace = trace_id if isinstance(trace_id, str) else ""
    trace = hex_id(trace, TRACE_ID_BYTES) or trace  # another trace id still ties its spans
    parent = span.get("parentSpanId")
    parent = parent if isinstance(parent, str) else ""
    parent = hex_id(parent, SPAN_ID_BYTES) or parent
    return SpanView(span_id or shown_id, trace, start, attributes, problem, where, parent)
