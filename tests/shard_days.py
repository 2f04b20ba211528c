"""A day of traces for the sharding tests: five files of different sizes and kinds (JSON lines,
gzipped, Parquet), with every case a merge must get right: a trace_id valid in two files that fall
in different shards, a repeat inside a file whose first occurrence is in another file, invalid
records, queries served in several files by both variants, and a corpus that makes labels stale."""

from __future__ import annotations

import gzip
import json
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DAY = date(2026, 11, 30)
DOCS = 300
SEGMENTS = ("factual", "multi_hop")
VARIANTS = ("control", "candidate")


def _record(rng: np.random.Generator, trace_id: str) -> dict[str, object]:
    retrieved = [f"d{int(i)}" for i in rng.choice(DOCS, size=20, replace=False)]
    labelled = [*list(rng.choice(retrieved[:10], size=3, replace=False)), f"d{rng.integers(DOCS)}"]
    return {
        "trace_id": trace_id,
        "query_id": f"q{int(rng.integers(12))}",
        "timestamp": f"2026-11-30T{int(rng.integers(24)):02d}:15:00Z",
        "retrieved_ids": retrieved,
        "relevance_scores": {str(doc): float(rng.integers(0, 4)) for doc in labelled},
        "segment": SEGMENTS[int(rng.integers(2))],
        "variant": VARIANTS[int(rng.integers(2))],
    }


def _grades(record: dict[str, object]) -> dict[str, float]:
    grades = record["relevance_scores"]
    assert isinstance(grades, dict)
    return grades


def _lines(records: list[dict[str, object] | str]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def write_day(store: Path, seed: int = 5) -> list[Path]:
    """The day's files under `store/traces/date=2026-11-30/`, judgments and a corpus; returns the
    day's files."""
    rng = np.random.default_rng(seed)
    folder = store / "traces" / f"date={DAY.isoformat()}"
    folder.mkdir(parents=True)
    made = {f"t{n:03d}": _record(rng, f"t{n:03d}") for n in range(140)}
    a = [made[f"t{n:03d}"] for n in range(0, 40)]
    b: list[dict[str, object] | str] = [made[f"t{n:03d}"] for n in range(40, 80)]
    b[10:10] = [dict(made["t005"], query_id="q3"), '{"trace_id": "broken', made["t045"]]
    c = [made[f"t{n:03d}"] for n in range(80, 110)] + [dict(made["t045"], variant="candidate")]
    d: list[dict[str, object] | str] = [made[f"t{n:03d}"] for n in range(110, 140)]
    d[5:5] = [made["t100"]]
    d.append(dict(made["t100"], segment="factual"))
    d.append({"trace_id": "t999", "query_id": "q1", "timestamp": "yesterday", "retrieved_ids": []})
    # traces without labels of their own: the store's judgments label them, in every shard
    e = [
        {k: v for k, v in _record(rng, f"u{n}").items() if k != "relevance_scores"}
        for n in range(5)
    ]
    (folder / "a.jsonl").write_text(_lines(list(a)))
    with gzip.open(folder / "b.jsonl.gz", "wt") as out:
        out.write(_lines(b))
    scores = pa.map_(pa.string(), pa.float64())
    rows = [dict(r, relevance_scores=list(_grades(r).items())) for r in c]
    schema = pa.schema(
        [
            ("trace_id", pa.string()),
            ("query_id", pa.string()),
            ("timestamp", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevance_scores", scores),
            ("segment", pa.string()),
            ("variant", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "c.parquet")
    (folder / "d.jsonl").write_text(_lines(d))
    (folder / "e.jsonl").write_text(_lines(list(e)))
    judgments = store / "judgments"
    judgments.mkdir()
    (judgments / "qrels.txt").write_text(
        "".join(f"q{q} 0 d{doc} {(q + doc) % 4}\n" for q in range(12) for doc in range(0, DOCS, 3))
    )
    corpus = store / "corpus"
    corpus.mkdir()
    deleted = [None if n % 10 else "2026-06-01T00:00:00Z" for n in range(DOCS)]
    pq.write_table(
        pa.table({"doc_id": [f"d{n}" for n in range(DOCS)], "deleted_at": deleted}),
        corpus / "corpus.parquet",
    )
    return sorted(p for p in folder.iterdir())
