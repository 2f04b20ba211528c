"""Impression records: every record read is used, quarantined with its reason, or counted."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.labels.command import labels_from_clicks
from retrieval_pipeline.labels.impressions import (
    ImpressionCounts,
    ImpressionFileError,
    QuarantinedImpression,
    read_impressions,
)

GOOD = {
    "impression_id": "i1",
    "query_id": "q1",
    "timestamp": "2026-11-30T10:00:00+01:00",
    "variant": "control",
    "shown_ids": ["a", "b", 7],
    "clicked_ids": ["b"],
}


def line(**changes: object) -> str:
    record = {key: value for key, value in (GOOD | changes).items() if value is not ...}
    return json.dumps(record)


# (line text, field, words of the reason); None: used
CASES: list[tuple[str, str | None, str | None]] = [
    (line(), None, None),
    (line(variant=...), None, None),  # variant is optional
    (line(clicked_ids=["b", "b"]), None, None),  # one click, twice
    ("{not json", None, "malformed JSON"),
    ("[1, 2]", None, "not a JSON object (got a list)"),
    (line(impression_id=...), "impression_id", "missing required field impression_id"),
    (line(query_id=""), "query_id", "query_id must be a non-empty string or an integer"),
    (line(timestamp="yesterday"), "timestamp", 'unparsable timestamp "yesterday"'),
    (line(variant=3), "variant", "variant must be a string (got an integer)"),
    (line(shown_ids="a"), "shown_ids", "shown_ids must be a list of ids (got a string)"),
    (line(shown_ids=["a", None]), "shown_ids", "shown_ids[1] is null"),
    (line(shown_ids=["a", "b", "a"]), "shown_ids", 'shows "a" again (first at rank 1)'),
    (line(clicked_ids=...), "clicked_ids", "missing required field clicked_ids"),
    (line(clicked_ids=["z"]), "clicked_ids", 'clicked_ids[0] "z" was not shown on this page'),
]


def write_lines(path: Path, texts: list[str]) -> Path:
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


def read_all(paths: list[Path]) -> tuple[list, list[QuarantinedImpression], ImpressionCounts]:
    counts = ImpressionCounts()
    quarantined: list[QuarantinedImpression] = []
    used = list(read_impressions(paths, counts, quarantined.append))
    return used, quarantined, counts


def test_each_bad_record_is_quarantined_with_its_line_field_and_reason(tmp_path: Path) -> None:
    texts = [text for text, _, _ in CASES]
    texts.insert(3, "   ")  # a blank line: not a record
    texts.append(line(shown_ids=[], clicked_ids=[]))  # a page that showed nothing
    path = write_lines(tmp_path / "clicks.jsonl", texts)
    used, quarantined, counts = read_all([path])
    bad = [(text, field, words) for text, field, words in CASES if words is not None]
    assert len(used) == len(CASES) - len(bad)
    assert len(quarantined) == len(bad)
    by_line = {q.source_line: q for q in quarantined}
    for number, text in enumerate(texts, start=1):
        expected = next((c for c in bad if c[0] == text), None)
        if expected is None:
            assert number not in by_line
            continue
        record = by_line[number]
        assert (record.source_file, record.field) == (str(path), expected[1]), text
        assert expected[2] in record.reason, (text, record.reason)
        assert record.raw_record == text
    assert counts.read == counts.used + counts.quarantined + counts.skipped_empty
    assert (counts.read, counts.skipped_empty, counts.blank_lines) == (len(CASES) + 1, 1, 1)
    first = used[0]
    assert first.served_at.isoformat() == "2026-11-30T09:00:00+00:00"  # in UTC
    assert first.shown_ids == ("a", "b", "7") and first.clicked_ids == {"b"}
    assert used[1].variant == "default"


def test_damaged_lines_are_quarantined_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    bom, bad_utf8 = b"\xef\xbb\xbf", b'{"a": "\xff"}\n'
    path.write_bytes(bom + line().encode() + b"\n" + bad_utf8 + line().encode())
    used, quarantined, _ = read_all([path])
    assert len(used) == 2  # the BOM is dropped; the last line has no newline
    assert [(q.source_line, q.reason) for q in quarantined] == [
        (2, "invalid UTF-8 at byte 7 of the line")
    ]


def test_gzip_and_a_truncated_gzip(tmp_path: Path) -> None:
    body = (line() + "\n") * 3
    whole = tmp_path / "a.jsonl.gz"
    whole.write_bytes(gzip.compress(body.encode()))
    cut = tmp_path / "b.jsonl.gz"
    cut.write_bytes(gzip.compress(body.encode())[:-8])  # the trailer lost: the stream never ends
    used, quarantined, counts = read_all([whole, cut])
    assert len(used) == 3 + 3 and counts.files == 2 and len(quarantined) == 1
    assert quarantined[-1].source_file == str(cut)
    assert "gzip stream is truncated" in quarantined[-1].reason
    assert counts.read == counts.used + counts.quarantined


def test_parquet_rows_are_numbered_and_validated(tmp_path: Path) -> None:
    table = pa.table(
        {
            "impression_id": ["i1", "i2"],
            "query_id": ["q", "q"],
            "timestamp": pa.array([1_700_000_000_000_000] * 2, pa.timestamp("us", tz="UTC")),
            "variant": ["v", None],
            "shown_ids": [["a", "b"], ["a", "b"]],
            "clicked_ids": [["a"], ["c"]],
        }
    )
    path = tmp_path / "clicks.parquet"
    pq.write_table(table, path)
    used, quarantined, _ = read_all([path])
    assert [i.impression_id for i in used] == ["i1"]
    assert [(q.source_line, q.field, q.impression_id) for q in quarantined] == [
        (2, "clicked_ids", "i2")
    ]
    pq.write_table(table.drop_columns(["clicked_ids"]), tmp_path / "bad.parquet")
    with pytest.raises(ImpressionFileError, match="lacks required column"):
        read_all([tmp_path / "bad.parquet"])


def test_folders_unknown_names_and_missing_paths(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    write_lines(folder / "day1.jsonl", [line()])
    write_lines(folder / "day2.ndjson", [line(impression_id="i2")])
    write_lines(folder / "README.md", ["not a log"])
    write_lines(folder / ".hidden.jsonl", ["{broken"])
    used, _, counts = read_all([folder])
    assert [i.impression_id for i in used] == ["i1", "i2"] and counts.files == 2
    with pytest.raises(ImpressionFileError, match="not an impression file"):
        read_all([folder / "README.md"])
    with pytest.raises(ImpressionFileError, match="no such file or folder"):
        read_all([tmp_path / "missing.jsonl"])


def test_the_quarantine_file_holds_every_bad_record(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "clicks.jsonl", [line(), "{x", line(clicked_ids=["z"])])
    out = tmp_path / "quarantine.jsonl"
    run = labels_from_clicks([source], tmp_path / "j.jsonl", tmp_path / "p.json", None, out)
    rows = [json.loads(text) for text in out.read_text().splitlines()]
    assert [(r["source_line"], r["reason"]) for r in rows] == [
        (2, "malformed JSON"),
        (3, 'clicked_ids[0] "z" was not shown on this page'),
    ]
    assert [q.source_line for q in run.quarantine_examples] == [2, 3]
