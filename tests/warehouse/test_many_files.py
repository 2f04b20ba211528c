"""Many small files are validated together (`ingest.pieces.coalesced`), with the same verdicts as
one file at a time: every record keeps its own file and line, repeats across files are found,
and the scores are the same.

Timing is measured in bench/many_files.py, never asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.ingest.pieces import RawPiece
from retrieval_pipeline.warehouse import parallel_validation
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation
from tests.trace_records import good, unjudged, write_lines


def _day(folder: Path) -> Path:
    """40 one-minute files: good records, a bad line in some, a trace id repeated in a later
    file, one file without a final newline, and two Parquet files among them."""
    folder.mkdir()
    for minute in range(40):
        lines = [
            json.dumps(good(f"t{minute}-{n}", retrieved_ids=["a", "b", f"c{n}"]))
            for n in range(minute % 3 + 1)
        ]
        if minute % 7 == 3:
            lines.insert(1, '{"trace_id": "broken"')
        if minute == 20:
            lines.append(json.dumps(good("t5-0")))  # repeats minute 5's first trace
        if minute == 30:
            lines.append(json.dumps(unjudged("t30-unjudged")))
        name = folder / f"minute-{minute:02d}.jsonl"
        if minute == 11:
            name.write_text("\n".join(lines), encoding="utf-8")  # no final newline
        elif minute in (15, 33):
            records = [json.loads(line) for line in lines if line.endswith("}")]
            pq.write_table(pa.Table.from_pylist(records), name.with_suffix(".parquet"))
        else:
            write_lines(name, lines)
    return folder


def _run(folder: Path, monkeypatch: pytest.MonkeyPatch, joined: bool) -> tuple[EvaluationRun, int]:
    pieces: list[RawPiece] = []
    stage = parallel_validation.stage_records

    def counted(conn: object, piece: RawPiece, *args: object) -> pa.Table:
        pieces.append(piece)
        return stage(conn, piece, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(parallel_validation, "stage_records", counted)
        if not joined:
            patch.setattr(jsonl, "PIECE_BYTES", 1)  # a piece is at least a line: none joined
        run = run_evaluation([folder], "mrr,precision@2")
    return run, len(pieces)


def test_small_files_are_validated_together_with_the_same_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _day(tmp_path / "day")
    together, joined_pieces = _run(folder, monkeypatch, joined=True)
    apart, file_pieces = _run(folder, monkeypatch, joined=False)

    # 38 JSON-lines files in one piece and 2 Parquet files around it: 5 pieces (text, rows,
    # text, rows, text), where one file at a time makes one or more each
    assert joined_pieces == 5
    assert file_pieces >= 40
    assert together.ingest == apart.ingest
    assert together.ingest.files == 40
    assert together.ingest.read == together.ingest.valid + together.ingest.quarantined
    pd.testing.assert_frame_equal(together.per_query, apart.per_query)
    pd.testing.assert_frame_equal(together.quarantine, apart.quarantine)
    # the bad lines and the repeat, each with its own file and line
    where = {
        (Path(row.source_file).name, row.source_line, row.reason.split(" (")[0])
        for row in together.quarantine.itertuples()
    }
    assert ("minute-03.jsonl", 2, "malformed JSON") in where
    assert ("minute-31.jsonl", 2, "malformed JSON") in where
    repeat = [w for w in where if w[0] == "minute-20.jsonl"]
    assert len(repeat) == 1 and repeat[0][1] == 4  # minute 20: three records, then the repeat
    assert together.traces.unannotated == 1  # t30-unjudged
