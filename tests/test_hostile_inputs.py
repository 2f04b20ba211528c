"""Hostile trace files: every record read is scored or quarantined with its file, line (or Parquet
row), field and a reason, and the rest of the file is still scored.

The committed corpus is `tests/hostile/` (text files, one problem per line; see its README);
binary or bulky cases (invalid UTF-8, BOMs, gzip cut at every stage, Parquet with mistyped
columns, 100k ids) are generated below. `tests/test_ingestion.py` holds the one-line-per-rule
cases; this file covers whole files, formats, the decisions on timestamps and ids, and the
accounting on random mixtures. Each case is checked against both validators: DuckDB's
(`sql/stg_trace_fields.sql` or its plain lane, batch) and Python's (`records.py`, per example).
"""

from __future__ import annotations

import gzip
import json
import math
import time
import zlib
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from isal import isal_zlib

from retrieval_pipeline import engine, readers
from retrieval_pipeline.cli import main
from retrieval_pipeline.evaluation import EvaluationRun, run_evaluation
from retrieval_pipeline.readers import TraceFileError
from retrieval_pipeline.records import RecordError, outside_day, parse_line

CORPUS = Path(__file__).parent / "hostile"
DAY = date(2026, 11, 30)
Verdicts = dict[int, tuple[str | None, str]]

ID_RULE = "ids must be non-empty strings or integers"
OUT_OF_RANGE = "is out of range (0001-01-01 to 9999-12-31 in UTC)"


def finite(field: str, key: str, got: str) -> tuple[str, str]:
    return field, f'{field}["{key}"] must be a finite number >= 0 (got {got})'


# file -> {line: (field, reason)} of every quarantined line, and the trace ids scored.
EXPECTED: dict[str, tuple[Verdicts, list[str]]] = {
    "malformed.jsonl": (
        {
            **{line: (None, "malformed JSON") for line in range(2, 10)},
            10: (None, "not a JSON object (got a list)"),
            11: (None, "not a JSON object (got a string)"),
            12: (None, "not a JSON object (got an integer)"),
            13: (None, "not a JSON object (got null)"),
        },
        ["m-ok-1", "m-ok-2"],
    ),
    "retrieved_ids.jsonl": (
        {
            1: ("retrieved_ids", "retrieved_ids must be a list of ids (got a string)"),
            2: ("retrieved_ids", "retrieved_ids must be a list of ids (got an integer)"),
            3: ("retrieved_ids", "retrieved_ids must be a list of ids (got an object)"),
            4: ("retrieved_ids", f"retrieved_ids[2] is null; {ID_RULE}"),
            5: ("retrieved_ids", f"retrieved_ids[1] is an object; {ID_RULE}"),
            6: ("retrieved_ids", f"retrieved_ids[0] is a list; {ID_RULE}"),
            7: ("retrieved_ids", f"retrieved_ids[1] is a boolean; {ID_RULE}"),
            8: ("retrieved_ids", f"retrieved_ids[0] is a number with a fraction; {ID_RULE}"),
            9: ("retrieved_ids", f"retrieved_ids[1] is an empty string; {ID_RULE}"),
            10: (
                "retrieved_ids",
                f"retrieved_ids[0] is an integer outside the 64-bit range; {ID_RULE}",
            ),
            11: ("relevant_ids", f"relevant_ids[0] is null; {ID_RULE}"),
        },
        ["r-empty-list", "r-int-ids"],
    ),
    "grades.jsonl": (
        {
            1: finite("relevance_scores", "b", "-1"),
            2: finite("relevance_scores", "a", "-0.5"),
            3: finite("relevance_scores", "a", "NaN"),
            4: finite("relevance_scores", "a", "Infinity"),
            5: finite("relevance_scores", "a", "-Infinity"),
            6: finite("relevance_scores", "a", "1e309"),
            7: finite("relevance_scores", "a", "true"),
            8: finite("relevance_scores", "a", '"3"'),
            9: finite("relevance_scores", "a", "null"),
            10: finite("relevance_scores", "a", '{"grade":2}'),
            11: finite("relevance_scores", "a", "[2]"),
            12: finite("relevance_scores", "a", "-2.5e-7"),
            13: ("relevance_scores", 'relevance_scores grades document "a" more than once'),
            # empty ids are looked for before grades, in both validators
            14: ("relevance_scores", "relevance_scores has an empty document id"),
            15: finite("relevance_scores", 'say \\"é\\"', "-1"),
            16: (
                "relevance_scores",
                "relevance_scores must be an object of doc_id -> grade (got a string)",
            ),
        },
        ["g-ok-float", "g-ok-collide"],
    ),
    "ids.jsonl": (
        {
            1: (
                "trace_id",
                "trace_id must be a non-empty string or an integer (got an empty string)",
            ),
            2: ("trace_id", "trace_id must be a non-empty string or an integer (got a boolean)"),
            3: ("trace_id", "trace_id must be a non-empty string or an integer (got a list)"),
            4: (
                "trace_id",
                "trace_id must be a non-empty string or an integer (got a number with a fraction)",
            ),
            5: (
                "trace_id",
                "trace_id must be a non-empty string or an integer "
                "(got an integer outside the 64-bit range)",
            ),
            6: ("query_id", "query_id must be a non-empty string or an integer (got an object)"),
            7: (
                "query_id",
                "query_id must be a non-empty string or an integer (got an empty string)",
            ),
            8: ("segment", "segment must be a string (got an integer)"),
            9: ("label_source", "label_source must be a string (got a list)"),
            10: (None, "malformed JSON"),  # a lone surrogate escape is not Unicode
            15: (
                "trace_id",
                f"duplicate trace_id 12 (first seen at {CORPUS / 'ids.jsonl'} line 14)",
            ),
        },
        ["i-unicode-é中😀", "i-escaped-\x00-nul", " ", "12", "i-first-key-counts"],
    ),
    "timestamps.jsonl": (
        {
            12: ("timestamp", f'timestamp "9999-12-31T23:59:59-05:00" {OUT_OF_RANGE}'),
            13: ("timestamp", f'timestamp "0001-01-01T00:00:00+01:00" {OUT_OF_RANGE}'),
            14: ("timestamp", f'timestamp "0000-06-01" {OUT_OF_RANGE}'),
            **{
                line: ("timestamp", f"unparsable timestamp {json.dumps(text)}")
                for line, text in [
                    (15, "10000-01-01T00:00:00Z"),
                    (16, "epoch"),
                    (17, "infinity"),
                    (18, "2026-11-30T10:00:00 America/New_York"),
                    (19, "2026-W48-1"),
                    (20, "20261130T100000Z"),
                    (21, "2026-11-30T24:00:00Z"),
                    (22, "2026-12-31T23:59:60Z"),
                    (23, "2026-02-30"),
                    (24, " 2026-11-30T10:00:00Z"),
                    (26, ""),
                ]
            },
            25: ("timestamp", "timestamp must be an ISO 8601 string (got an integer)"),
        },
        [
            "t-no-zone",
            "t-z",
            "t-offset",
            "t-offset-compact",
            "t-offset-hours",
            "t-space",
            "t-minutes",
            "t-date",
            "t-nanos",
            "t-far-future",
            "t-year-0001",
        ],
    ),
    "empty.jsonl": ({}, []),
    "blank_lines.jsonl": ({}, []),
}


def good(trace_id: str, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "trace_id": trace_id,
        "query_id": "q",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["a", "b"],
        "relevant_ids": ["b"],
    }
    return record | changes


def good_line(trace_id: str, **changes: object) -> bytes:
    return json.dumps(good(trace_id, **changes)).encode()


def verdicts(run: EvaluationRun) -> Verdicts:
    return {
        int(row.source_line): (None if pd.isna(row.field) else row.field, row.reason)
        for row in run.quarantine.itertuples()
    }


def assert_accounted(run: EvaluationRun, records: int) -> None:
    """read = scored + quarantined, every record is in exactly one table, with a reason."""
    assert run.ingest.read == records
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined
    assert len(run.per_query) == run.ingest.valid
    assert len(run.quarantine) == run.ingest.quarantined
    assert run.quarantine.reason.notna().all() and (run.quarantine.reason != "").all()
    assert run.quarantine.source_line.notna().all() and run.quarantine.source_file.notna().all()


def record_lines(path: Path) -> dict[int, bytes]:
    """The records of a JSON-lines file by line number, as the reader counts them."""
    lines = path.read_bytes().removeprefix(b"\xef\xbb\xbf").split(b"\n")
    return {n: line.removesuffix(b"\r") for n, line in enumerate(lines, 1) if line.strip()}


def python_verdicts(path: Path) -> tuple[Verdicts, list[str]]:
    """What records.parse_line says of each line, duplicates resolved as the batch path does
    (the first valid record of a trace_id wins, the rest are quarantined)."""
    bad: Verdicts = {}
    kept: dict[str, int] = {}
    for number, line in record_lines(path).items():
        try:
            record = parse_line(line)
        except RecordError as exc:
            bad[number] = (exc.field, exc.reason)
            continue
        if record.trace_id in kept:
            first = kept[record.trace_id]
            reason = f"duplicate trace_id {record.trace_id} (first seen at {path} line {first})"
            bad[number] = ("trace_id", reason)
        else:
            kept[record.trace_id] = number
    return bad, list(kept)


# --- the committed corpus ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_quarantines_each_bad_line_and_scores_the_rest(name: str) -> None:
    path = CORPUS / name
    run = run_evaluation(path, "mrr")
    expected_bad, expected_scored = EXPECTED[name]
    assert verdicts(run) == expected_bad
    assert list(run.per_query.trace_id) == expected_scored
    assert (run.quarantine.source_file == str(path)).all()
    assert_accounted(run, len(record_lines(path)))
    for field, reason in expected_bad.values():
        assert field is None or field in reason  # the words name the field


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_python_validator_agrees_on_the_corpus(name: str) -> None:
    assert python_verdicts(CORPUS / name) == EXPECTED[name]


def test_the_whole_corpus_at_once_accounts_for_every_record(tmp_path: Path) -> None:
    run = run_evaluation(CORPUS, "mrr,ndcg@10")
    records = sum(len(record_lines(path)) for path in CORPUS.glob("*.jsonl"))
    assert_accounted(run, records)
    scored = [trace for _, traces in EXPECTED.values() for trace in traces]
    assert sorted(run.per_query.trace_id) == sorted(scored)
    out = tmp_path / "rejected.jsonl"
    result = CliRunner().invoke(main, ["evaluate", str(CORPUS), "--quarantine", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{records} records" in result.output and f"{len(scored)} scored" in result.output
    first_file = CORPUS / "grades.jsonl"  # the first file in name order with a bad line
    assert f"{first_file}:1: " + EXPECTED["grades.jsonl"][0][1][1] in result.output
    rejected = pd.read_json(out, lines=True)
    assert len(rejected) == records - len(scored)
    assert set(rejected.columns) >= {"source_file", "source_line", "field", "reason", "raw_record"}


def test_scored_values_of_unicode_and_colliding_ids() -> None:
    per_query = run_evaluation(CORPUS, "mrr,precision@5").per_query.set_index("trace_id")
    # "e\u0301" (e + combining accent) is the 4th id and the one relevant: ids are compared as
    # given, without Unicode normalisation
    assert per_query.loc["i-unicode-é中😀", "mrr"] == 1 / 4
    assert per_query.loc["i-unicode-é中😀", "segment"] == "naïve ✓"
    assert per_query.loc["i-escaped-\x00-nul", "mrr"] == 1.0  # NUL is part of the id
    assert per_query.loc[" ", "mrr"] == 1.0  # a blank id is still a non-empty string
    # 7 and "7" are one document: the repeat is dropped and the ranks close up
    assert per_query.loc["r-int-ids", "n_retrieved"] == 4
    assert per_query.loc["r-int-ids", "mrr"] == 1 / 2  # "8" is now at rank 2
    # relevant_ids [7, 8] with relevance_scores {"7": 2}: two labels, 7 graded 2
    assert per_query.loc["g-ok-collide", "n_relevant"] == 2
    assert per_query.loc["g-ok-collide", "precision@5"] == 2 / 5
    assert per_query.loc["12", "segment"] == "" and per_query.loc["12", "variant"] == ""


def test_repeated_top_level_field_keeps_the_first_in_both_validators() -> None:
    line = (CORPUS / "ids.jsonl").read_bytes().split(b"\n")[15]
    assert parse_line(line).trace_id == "i-first-key-counts"
    assert "i-first-key-counts" in EXPECTED["ids.jsonl"][1]


# --- timestamps: the decisions ------------------------------------------------------------------


def _stored(
    path: Path, partition_date: date | None
) -> tuple[engine.IngestCounts, dict[str, tuple[date, datetime]]]:
    """Ingest `path`; the counts and each stored trace's (partition_date, served_at)."""
    conn = engine.connect(":memory:")
    counts = engine.ingest_traces(conn, [path], partition_date=partition_date)
    rows = conn.execute("select trace_id, partition_date, served_at from traces").fetchall()
    conn.close()
    return counts, {trace: (day, served) for trace, day, served in rows}


def test_timestamps_mean_the_same_instant_to_both_validators() -> None:
    path = CORPUS / "timestamps.jsonl"
    _, rows = _stored(path, None)
    for number, line in record_lines(path).items():
        if number in EXPECTED["timestamps.jsonl"][0]:
            continue
        record = parse_line(line)
        assert rows[record.trace_id][1] == record.served_at, record.trace_id
    assert rows["t-no-zone"][1] == datetime(2026, 11, 30, 10, tzinfo=UTC)  # no offset: UTC
    assert rows["t-offset"][1] == datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    assert rows["t-nanos"][1] == datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)  # to us
    assert rows["t-year-0001"][1] == datetime(1, 1, 1, tzinfo=UTC)
    # without a store day, each record goes under its own UTC date, far future included
    assert rows["t-offset"][0] == date(2026, 12, 1)
    assert rows["t-far-future"][0] == date(9999, 12, 31)


def test_the_store_day_is_authoritative_and_records_outside_it_are_counted() -> None:
    path = CORPUS / "timestamps.jsonl"
    counts, rows = _stored(path, DAY)
    valid = EXPECTED["timestamps.jsonl"][1]
    assert counts.valid == len(valid)
    assert {day for day, _ in rows.values()} == {DAY}  # kept, under the store's day
    bad = EXPECTED["timestamps.jsonl"][0]
    kept = [parse_line(line) for n, line in record_lines(path).items() if n not in bad]
    assert sorted(r.trace_id for r in kept) == sorted(valid)
    outside = sorted(r.trace_id for r in kept if outside_day(r, DAY))
    assert outside == ["t-far-future", "t-offset", "t-year-0001"]
    assert counts.outside_day == len(outside)


def test_far_future_timestamps_are_scored_in_evaluate() -> None:
    run = run_evaluation(CORPUS / "timestamps.jsonl", "mrr")
    assert "t-far-future" in set(run.per_query.trace_id)  # 9999-12-31 is a date like any other


# --- generated files: encodings and gzip --------------------------------------------------------


def test_byte_order_marks_at_the_start_and_inside_are_ignored(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    path = tmp_path / "bom.jsonl"
    # a BOM opens the file, and another the part a `cat a.jsonl b.jsonl` appended
    path.write_bytes(bom + good_line("b1") + b"\r\n" + bom + good_line("b2") + b"\n")
    run = run_evaluation(path, "mrr")
    assert list(run.per_query.trace_id) == ["b1", "b2"]
    assert parse_line(bom + good_line("b2")).trace_id == "b2"


INVALID_UTF8 = [
    (b"\xff", "a lone 0xff byte"),
    (b"\xc0\xaf", "an overlong encoding of /"),
    (b"\xed\xa0\x80", "a UTF-16 surrogate encoded as UTF-8"),
    (b"\xe4\xb8", "a character cut after two of its three bytes"),
    (b"\x80", "a continuation byte with no start"),
]


def test_invalid_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    lines = [good_line("ok-1")]
    for n, (junk, _) in enumerate(INVALID_UTF8):
        lines.append(b'{"trace_id": "u' + str(n).encode() + junk + b'", "query_id": "q"}')
    lines.append(good_line("ok-2"))
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = run_evaluation(path, "mrr")
    assert list(run.per_query.trace_id) == ["ok-1", "ok-2"]
    offset = len(b'{"trace_id": "u0')
    assert verdicts(run) == {
        n + 2: (None, f"invalid UTF-8 at byte {offset} of the line")
        for n in range(len(INVALID_UTF8))
    }
    for n in range(len(INVALID_UTF8)):  # the per-example path says the same
        with pytest.raises(RecordError, match=f"invalid UTF-8 at byte {offset} of the line"):
            parse_line(lines[n + 1])
    assert_accounted(run, len(lines))


def _gz_lines(n: int) -> list[bytes]:
    return [good_line(f"z{i}", retrieved_ids=[f"d{j}" for j in range(30)]) for i in range(n)]


@pytest.mark.parametrize("cut", [0, 1, 5, 10, 200, "half", "end-1"])
def test_gzip_cut_at_any_point_keeps_the_complete_lines(tmp_path: Path, cut: int | str) -> None:
    lines = _gz_lines(100)
    packed = gzip.compress(b"\n".join(lines) + b"\n")
    size = {"half": len(packed) // 2, "end-1": len(packed) - 1}.get(str(cut), cut)
    assert isinstance(size, int)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[:size])
    run = run_evaluation(path, "mrr")
    if size == 0:  # an empty file holds no records, compressed or not
        assert run.ingest.read == 0
        return
    assert run.ingest.quarantined == 1
    (reason,) = run.quarantine.reason
    assert reason == "the gzip stream is truncated; this record was cut off"
    # every line before the cut is scored, and the cut one is the last one read
    assert list(run.per_query.trace_id) == [f"z{i}" for i in range(run.ingest.valid)]
    assert run.quarantine.source_line.iloc[0] == run.ingest.valid + 1
    assert_accounted(run, run.ingest.valid + 1)


def test_corrupt_gzip_keeps_what_came_before(tmp_path: Path) -> None:
    first = gzip.compress(b"\n".join(_gz_lines(20)) + b"\n")
    broken = bytearray(gzip.compress(good_line("after") + b"\n"))
    broken[-6] ^= 0xFF  # the CRC no longer matches
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(first + bytes(broken))  # two gzip members, the second damaged
    run = run_evaluation(path, "mrr")
    assert run.ingest.valid == 20
    (reason,) = run.quarantine.reason
    assert reason.startswith("the gzip stream is corrupt (") and "cut off" in reason
    assert_accounted(run, 21)


TRUNCATED = "the gzip stream is truncated; this record was cut off"
CORRUPT = "the gzip stream is corrupt"


def _trailer_cut_short(member: bytes) -> bool:
    """Whether the deflate data of `member` (a gzip member with a 10-byte header, the file's
    last) ends with fewer than the 8 bytes of its trailer after it."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        inflater.decompress(member[10:])
    except zlib.error:
        return False
    return inflater.eof and len(inflater.unused_data) < 8


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=3),
    damage=st.sampled_from(["none", "cut", "flip", "cut and flip"]),
    where=st.floats(min_value=0, max_value=1),
    bit=st.integers(min_value=0, max_value=7),
)
# found by this test: the flip makes the deflate data end a byte later, 7 bytes before the end
@example(members=[6], damage="flip", where=0.9453125, bit=2)
def test_gzip_streams_read_as_zlib_reads_them(
    tmp_path_factory: pytest.TempPathFactory,
    members: list[int],
    damage: str,
    where: float,
    bit: int,
) -> None:
    # ISA-L inflates the trace files; zlib is the reference. Members of random lines, then cut
    # short, a bit flipped, or both: the same lines, pieces and kind of stream error, whether
    # the read blocks are small (many per stream) or not.
    packed = bytearray()
    starts = []
    for number, count in enumerate(members):
        lines = [
            good_line(f"m{number}-{i}", retrieved_ids=[f"d{i}"] * (i % 7)) for i in range(count)
        ]
        starts.append(len(packed))
        packed += gzip.compress(b"\n".join(lines) + b"\n")
    at = min(int(where * len(packed)), len(packed) - 1)
    # Two differences. A member header's reserved flag bits (byte 3, bits 5-7), which zlib
    # refuses and ISA-L ignores; the member's content is still checked against its CRC. And a
    # flipped bit that makes the deflate data end later, leaving less than the 8-byte trailer:
    # zlib checks the CRC with the 4 bytes it has (corrupt), ISA-L waits for the whole trailer
    # and finds the file ended (truncated). Both cut the record off.
    assume(not ("flip" in damage and bit >= 5 and at - 3 in starts))
    if "flip" in damage:
        packed[at] ^= 1 << bit
    if "cut" in damage:
        packed = packed[: max(at, 1)]
    path = tmp_path_factory.mktemp("gz") / "traces.jsonl.gz"
    path.write_bytes(bytes(packed))

    def read(inflate: Any, read_bytes: int) -> tuple[bytes, list[int], str | None]:
        """The text, each piece's first line, and the kind of stream error."""
        with (
            mock.patch.object(readers, "GZIP_INFLATE", inflate),
            mock.patch.object(readers, "_READ_BYTES", read_bytes),
        ):
            try:
                found = list(readers.jsonl_pieces(path, piece_bytes=256))
            except TraceFileError as exc:
                return b"", [], f"file error: {exc}"
        error = found[-1].stream_error
        kind = None if error is None else error.split(" (")[0]
        return b"".join(p.data for p in found), [p.first_line for p in found], kind

    for read_bytes in (64, 8 * 2**20):
        isal_text, isal_firsts, isal_kind = read(isal_zlib, read_bytes)
        zlib_text, zlib_firsts, zlib_kind = read(zlib, read_bytes)
        if "flip" in damage and (isal_kind, zlib_kind) == (TRUNCATED, CORRUPT):
            assert _trailer_cut_short(bytes(packed[starts[-1] :]))
        else:
            assert isal_kind == zlib_kind
        if "flip" not in damage:
            assert (isal_text, isal_firsts) == (zlib_text, zlib_firsts)
        else:
            # A decoder hands out what it inflated before it noticed the damage, so one may
            # stop a block earlier than the other: one text is the start of the other.
            shorter, longer = sorted((isal_text, zlib_text), key=len)
            assert longer.startswith(shorter)


def test_concatenated_gzip_members_are_one_file(tmp_path: Path) -> None:
    path = tmp_path / "members.jsonl.gz"
    path.write_bytes(gzip.compress(good_line("g1") + b"\n") + gzip.compress(good_line("g2")))
    assert list(run_evaluation(path, "mrr").per_query.trace_id) == ["g1", "g2"]


def test_an_unreadable_file_is_a_file_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "locked.jsonl"
    path.write_bytes(good_line("x"))
    real = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)  # tests run as root: chmod would not do
    with pytest.raises(
        TraceFileError, match=r"locked\.jsonl: cannot be read \(Permission denied\)"
    ):
        run_evaluation(path, "mrr")


# --- 100k ids ------------------------------------------------------------------------------------


def test_a_record_of_100k_ids_with_repeats_is_scored_quickly(tmp_path: Path) -> None:
    ids = [f"d{i}" for i in range(100_000)]
    record = good("huge", retrieved_ids=[*ids, "d5", 99_999, "d99999"], relevant_ids=["d99999"])
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(good("small")) + "\n")
    started = time.monotonic()
    run = run_evaluation(path, "mrr,recall@100000")
    elapsed = time.monotonic() - started
    rows = run.per_query.set_index("trace_id")
    assert rows.loc["huge", "n_retrieved"] == 100_001  # 99999 (an integer) is a new id
    assert run.ingest.duplicate_ids_dropped == 2  # "d5" and "d99999" again
    assert rows.loc["huge", "mrr"] == 1 / 100_000
    assert parse_line(path.read_text().splitlines()[0]).retrieved_ids[-1] == "99999"
    # a search per id (the quadratic way) took about 20 s here
    assert elapsed < 15, f"{elapsed:.1f}s for one record of 100k ids"


def test_100k_ids_through_parquet(tmp_path: Path) -> None:
    path = tmp_path / "huge.parquet"
    ids = [f"d{i}" for i in range(100_000)]
    pq.write_table(
        pa.table(
            {
                "trace_id": ["huge", "bad"],
                "query_id": ["q", "q"],
                "timestamp": ["2026-11-30T10:00:00Z"] * 2,
                "retrieved_ids": [[*ids, "d0"], [*ids[:10], None]],
            }
        ),
        path,
    )
    run = run_evaluation(path, "mrr")
    assert run.per_query.n_retrieved.tolist() == [100_000]
    assert verdicts(run) == {2: ("retrieved_ids", f"retrieved_ids[10] is null; {ID_RULE}")}


# --- Parquet: missing and mistyped columns -------------------------------------------------------

BASE_COLUMNS = {
    "trace_id": ["p1", "p2"],
    "query_id": ["q", "q"],
    "timestamp": ["2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"],
}


def _parquet(tmp_path: Path, columns: dict[str, object]) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({**BASE_COLUMNS, **columns}), path)  # type: ignore[arg-type]
    return path


MISTYPED = [
    (
        "retrieved_ids as int64",
        {"retrieved_ids": pa.array([1, 2], pa.int64())},
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got an integer)",
    ),
    (
        "retrieved_ids as a string",
        {"retrieved_ids": ["a,b", "c"]},
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got a string)",
    ),
    (
        "retrieved_ids as a list of floats",
        {"retrieved_ids": pa.array([[1.0], [2.5]], pa.list_(pa.float64()))},
        "retrieved_ids",
        f"retrieved_ids[0] is a number with a fraction; {ID_RULE}",
    ),
    (
        "retrieved_ids as a list of structs",
        {"retrieved_ids": pa.array([[{"id": "a"}], [{"id": "b"}]])},
        "retrieved_ids",
        f"retrieved_ids[0] is an object; {ID_RULE}",
    ),
    (
        "timestamp as epoch seconds",
        {"retrieved_ids": [["a"], ["b"]], "timestamp": pa.array([1, 2], pa.int64())},
        "timestamp",
        "timestamp must be an ISO 8601 string (got an integer)",
    ),
    (
        "trace_id as float64",
        {"retrieved_ids": [["a"], ["b"]], "trace_id": pa.array([1.5, 2.5])},
        "trace_id",
        "trace_id must be a non-empty string or an integer (got a number with a fraction)",
    ),
    (
        "relevance_scores as strings",
        {"retrieved_ids": [["a"], ["b"]], "relevance_scores": ["a:1", "b:2"]},
        "relevance_scores",
        "relevance_scores must be an object of doc_id -> grade (got a string)",
    ),
]


@pytest.mark.parametrize(
    ("columns", "field", "reason"),
    [case[1:] for case in MISTYPED],
    ids=[case[0] for case in MISTYPED],
)
def test_a_mistyped_parquet_column_quarantines_every_row(
    tmp_path: Path, columns: dict[str, object], field: str, reason: str
) -> None:
    run = run_evaluation(_parquet(tmp_path, columns), "mrr")
    assert run.ingest.read == 2 and run.ingest.valid == 0
    assert verdicts(run) == {1: (field, reason), 2: (field, reason)}


@pytest.mark.parametrize("missing", ["trace_id", "query_id", "timestamp", "retrieved_ids"])
def test_a_parquet_file_without_a_required_column_is_named(tmp_path: Path, missing: str) -> None:
    columns = {**BASE_COLUMNS, "retrieved_ids": [["a"], ["b"]]}
    del columns[missing]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(
        TraceFileError, match=rf"t\.parquet: .*lacks required column\(s\) {missing}"
    ):
        run_evaluation(path, "mrr")


def test_parquet_typed_timestamps_and_integer_ids_are_read(tmp_path: Path) -> None:
    moment = datetime(2026, 11, 30, 10, tzinfo=UTC)
    path = _parquet(
        tmp_path,
        {
            "trace_id": pa.array([2**64 - 1, 5], pa.uint64()),
            "timestamp": pa.array([moment, moment], pa.timestamp("ns", tz="America/New_York")),
            "retrieved_ids": pa.array([[7, 8], [9]], pa.list_(pa.int64())),
            "relevant_ids": pa.array([["8"], ["9"]], pa.large_list(pa.large_string())),
        },
    )
    run = run_evaluation(path, "mrr")
    assert run.per_query.trace_id.tolist() == [str(2**64 - 1), "5"]
    assert run.per_query.mrr.tolist() == [1 / 2, 1.0]


def test_parquet_struct_scores_from_pandas_dicts(tmp_path: Path) -> None:
    # pandas writes a dict column as a struct of every key seen: null where a row lacks a key
    frame = pd.DataFrame(
        {
            **BASE_COLUMNS,
            "retrieved_ids": [["a", "b"], ["c"]],
            "relevance_scores": [{"a": 1, "b": 3}, {"c": 2}],
        }
    )
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    assert pa.types.is_struct(pq.read_schema(path).field("relevance_scores").type)
    run = run_evaluation(path, "mrr,ndcg@5")
    assert run.ingest.quarantined == 0
    assert run.per_query.mrr.tolist() == [1.0, 1.0]
    assert (run.labels.labels, run.per_query.n_relevant.tolist()) == (3, [2, 1])


def test_parquet_maps_with_a_null_grade_or_a_repeated_key(tmp_path: Path) -> None:
    scores = pa.array(
        [[("a", None)], [("a", 2), ("a", 1)], [("b", 1)]], pa.map_(pa.string(), pa.int64())
    )
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "trace_id": ["null-grade", "twice", "fine"],
                "query_id": ["q"] * 3,
                "timestamp": ["2026-11-30"] * 3,
                "retrieved_ids": [["a"], ["a"], ["b"]],
                "relevance_scores": scores,
            }
        ),
        path,
    )
    run = run_evaluation(path, "mrr")  # DuckDB cannot read the repeated key as a map
    assert verdicts(run) == {
        1: finite("relevance_scores", "a", "null"),
        2: ("relevance_scores", 'relevance_scores grades document "a" more than once'),
    }
    assert run.per_query.trace_id.tolist() == ["fine"]


def test_duplicate_trace_ids_across_the_files_of_one_day(tmp_path: Path) -> None:
    day = tmp_path / "traces" / f"date={DAY}"
    day.mkdir(parents=True)
    (day / "a.jsonl").write_bytes(good_line("t1") + b"\n" + good_line("7") + b"\n")
    pq.write_table(
        pa.table(
            {
                "trace_id": pa.array([7, 8], pa.int64()),  # 7 is the "7" of a.jsonl
                "query_id": ["q", "q"],
                "timestamp": ["2026-11-30T10:00:00Z"] * 2,
                "retrieved_ids": [["z"], ["y"]],
            }
        ),
        day / "b.parquet",
    )
    (day / "c.jsonl.gz").write_bytes(gzip.compress(good_line("t1") + b"\n" + good_line("8")))
    conn = engine.connect(":memory:")
    counts = engine.ingest_traces(conn, sorted(day.iterdir()), partition_date=DAY)
    assert (counts.read, counts.valid, counts.quarantined) == (6, 3, 3)
    rows = conn.execute(
        "select source_file, source_line, reason from quarantine order by all"
    ).fetchall()
    assert rows == [
        (
            str(day / "b.parquet"),
            1,
            f"duplicate trace_id 7 (first seen at {day / 'a.jsonl'} line 2)",
        ),
        (
            str(day / "c.jsonl.gz"),
            1,
            f"duplicate trace_id t1 (first seen at {day / 'a.jsonl'} line 1)",
        ),
        (
            str(day / "c.jsonl.gz"),
            2,
            f"duplicate trace_id 8 (first seen at {day / 'b.parquet'} line 2)",
        ),
    ]
    kept = conn.execute("select trace_id, retrieved_ids from traces order by 1").fetchall()
    assert kept == [("7", ["a", "b"]), ("8", ["y"]), ("t1", ["a", "b"])]  # the first ones
    conn.close()


def test_lenient_json_is_a_known_difference_between_the_validators(tmp_path: Path) -> None:
    """DuckDB's JSON reader accepts a trailing comma and `nan`/`inf` in any case; Python's
    json module (the per-example path) does not. Pinned so that a change is seen; see README."""
    trailing = good_line("comma")[:-1] + b",}"
    lowercase = good_line("nan-field")[:-1] + b', "latency": nan}'
    path = tmp_path / "lenient.jsonl"
    path.write_bytes(trailing + b"\n" + lowercase + b"\n")
    assert list(run_evaluation(path, "mrr").per_query.trace_id) == ["comma", "nan-field"]
    for line in (trailing, lowercase):
        with pytest.raises(RecordError, match="malformed JSON"):
            parse_line(line)


# --- accounting on random mixtures (JSON lines and Parquet) --------------------------------------

GOOD_RECORD = st.builds(
    lambda n, ids, grades: good(
        f"t{n}",
        retrieved_ids=ids,
        relevance_scores={str(k): g for k, g in grades.items()},
    ),
    st.integers(0, 30),
    st.lists(st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "é", "7"])), max_size=6),
    st.dictionaries(st.sampled_from(["a", "b", "7", "x"]), st.floats(0, 3), max_size=3),
)
BAD_VALUE = st.sampled_from(
    [
        ("retrieved_ids", None),
        ("retrieved_ids", ["a", None]),
        ("retrieved_ids", ["a", ""]),
        ("trace_id", ""),
        ("query_id", None),
        ("timestamp", "2026-13-01"),
        ("timestamp", "9999-12-31T23:59:59-05:00"),
        ("timestamp", "epoch"),
    ]
)
BAD_RECORD = st.tuples(GOOD_RECORD, BAD_VALUE).map(lambda pair: pair[0] | dict([pair[1]]))
BAD_GRADES = st.tuples(GOOD_RECORD, st.sampled_from([-1.0, math.nan, math.inf])).map(
    lambda pair: pair[0] | {"relevance_scores": {"a": pair[1]}}
)
MIXTURE = st.lists(st.one_of(GOOD_RECORD, BAD_RECORD, BAD_GRADES), max_size=25)


def _text_ids(ids: object) -> list[str | None] | None:
    if not isinstance(ids, list):
        return None
    return [None if i is None else str(i) for i in ids]


def _as_parquet(records: list[dict[str, object]], path: Path) -> None:
    """Typed columns (a list of ids, a map of grades); bad values are the ones Parquet can hold."""
    pq.write_table(
        pa.table(
            {
                "trace_id": pa.array([r["trace_id"] for r in records], pa.string()),
                "query_id": pa.array([r["query_id"] for r in records], pa.string()),
                "timestamp": pa.array([r["timestamp"] for r in records], pa.string()),
                "retrieved_ids": pa.array(
                    [_text_ids(r["retrieved_ids"]) for r in records], pa.list_(pa.string())
                ),
                "relevance_scores": pa.array(
                    [list(dict(r["relevance_scores"]).items()) for r in records],  # type: ignore[call-overload]
                    pa.map_(pa.string(), pa.float64()),
                ),
            }
        ),
        path,
    )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(jsonl=MIXTURE, parquet=MIXTURE)
def test_random_mixtures_account_for_every_record(
    tmp_path: Path, jsonl: list[dict[str, object]], parquet: list[dict[str, object]]
) -> None:
    folder = tmp_path / "mix"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    lines = [json.dumps(record, allow_nan=True) for record in jsonl]
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _as_parquet(parquet, folder / "b.parquet")
    run = run_evaluation(folder, "mrr,ndcg@5")
    assert_accounted(run, len(jsonl) + len(parquet))
    # the Python validator agrees on the JSON lines (the earlier valid trace_id wins)
    valid_ids: list[str] = []
    for line in lines:
        try:
            record = parse_line(line)
        except RecordError:
            continue
        if record.trace_id not in valid_ids:
            valid_ids.append(record.trace_id)
    scored_from_jsonl = run.per_query.trace_id.iloc[: len(valid_ids)].tolist()
    assert scored_from_jsonl == valid_ids
