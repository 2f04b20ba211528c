"""Hostile trace files at the reading stage: byte-order marks, invalid UTF-8, gzip streams cut or
damaged anywhere (read as zlib reads them), files that cannot be opened, and records of 100k ids.
Every record read is still scored or quarantined with its file, line and reason
(`tests/warehouse/test_hostile_inputs.py` covers the records' contents).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from isal import isal_zlib

from retrieval_pipeline.ingest import gzip as gzip_stream
from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.records import RecordError, parse_line
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.hostile_records import ID_RULE, assert_accounted, good, good_line, verdicts


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
            mock.patch.object(gzip_stream, "GZIP_INFLATE", inflate),
            mock.patch.object(jsonl, "_READ_BYTES", read_bytes),
        ):
            try:
                found = list(jsonl.jsonl_pieces(path, piece_bytes=256))
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


def test_a_record_of_100k_ids_with_repeats_is_scored(tmp_path: Path) -> None:
    # (how long it takes is measured in bench/, not asserted here)
    ids = [f"d{i}" for i in range(100_000)]
    record = good("huge", retrieved_ids=[*ids, "d5", 99_999, "d99999"], relevant_ids=["d99999"])
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(good("small")) + "\n")
    run = run_evaluation(path, "mrr,recall@100000")
    rows = run.per_query.set_index("trace_id")
    assert rows.loc["huge", "n_retrieved"] == 100_001  # 99999 (an integer) is a new id
    assert run.ingest.duplicate_ids_dropped == 2  # "d5" and "d99999" again
    assert rows.loc["huge", "mrr"] == 1 / 100_000
    assert parse_line(path.read_text().splitlines()[0]).retrieved_ids[-1] == "99999"


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
