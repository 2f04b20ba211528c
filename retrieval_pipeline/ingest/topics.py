"""Topics: query texts to query ids, for spans that carry only the query text.

Instrumentation frameworks write the query text (`input.value`), not a query id, so a span's
query id falls back on that text and id-keyed judgments match nothing. A topics file names the
id of each text: TREC topics (`qid<TAB>text` per line), CSV with a `query_id,text` header, or
JSON lines `{"query_id": ..., "text": ...}`, chosen by suffix (`.csv`, `.jsonl`/`.json`, anything
else TREC), each optionally gzipped. Texts are matched whole, surrounding whitespace stripped;
a text written under two ids is kept with both, so that its spans are told rather than merged.
Pure: the standard library.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class TopicsError(ValueError):
    """A topics file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Topics:
    """Query text (stripped) -> the query ids written for it, in file order without repeats."""

    ids_by_text: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""

    def ids(self, text: str) -> tuple[str, ...]:
        """The ids of a query text (stripped); () when the topics do not hold it."""
        return self.ids_by_text.get(text.strip(), ())

    def __len__(self) -> int:
        return len(self.ids_by_text)


def load_topics(path: str | Path) -> Topics:
    """The topics of a file, its format chosen by suffix (`.csv`, `.jsonl` or `.json`, else
    TREC `qid<TAB>text`; `.gz` inflated). A bad line raises `TopicsError` naming `file:line`."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".csv"):
        pairs = _csv_pairs(path)
    elif name.endswith((".jsonl", ".json")):
        pairs = _json_pairs(path)
    else:
        pairs = _trec_pairs(path)
    found: dict[str, list[str]] = {}
    for query_id, text in pairs:
        ids = found.setdefault(text, [])
        if query_id not in ids:
            ids.append(query_id)
    return Topics({text: tuple(ids) for text, ids in found.items()}, str(path))


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, a `.gz` file inflated."""
    try:
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8-sig")
    except OSError as exc:
        raise TopicsError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except (EOFError, gzip.BadGzipFile) as exc:
        raise TopicsError(f"{path}: not a whole gzip file ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise TopicsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    yield from enumerate(io.StringIO(text, newline=None).read().splitlines(), start=1)


def _pair(path: Path, number: int, query_id: object, text: object) -> tuple[str, str]:
    if isinstance(query_id, int) and not isinstance(query_id, bool):
        query_id = str(query_id)
    if not isinstance(query_id, str) or not query_id.strip():
        raise TopicsError(f"{path}:{number}: the query id is missing or empty")
    if not isinstance(text, str) or not text.strip():
        raise TopicsError(f"{path}:{number}: the query text is missing or empty")
    return query_id.strip(), text.strip()


def _trec_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        if "\t" not in line:
            raise TopicsError(f"{path}:{number}: expected qid<TAB>text, found no tab")
        query_id, text = line.split("\t", 1)
        yield _pair(path, number, query_id, text)


def _csv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    lines = [line for _, line in _lines(path)]
    reader = csv.reader(lines)
    try:
        header = [column.strip() for column in next(reader)]
    except StopIteration:
        return
    if "query_id" not in header or "text" not in header:
        raise TopicsError(f"{path}:1: the header must name query_id and text (got {header})")
    id_at, text_at = header.index("query_id"), header.index("text")
    for row in reader:
        number = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise TopicsError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        yield _pair(path, number, row[id_at], row[text_at])


def _json_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise TopicsError(f"{path}:{number}: not valid JSON") from None
        if not isinstance(item, dict):
            raise TopicsError(f"{path}:{number}: not a JSON object with query_id and text")
        yield _pair(path, number, item.get("query_id"), item.get("text"))
