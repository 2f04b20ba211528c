"""A realistic sample trace store, deterministic for a seed, with one injected regression.

Knows nothing of Dagster. What it writes, under `out_dir`:

- `traces/date=YYYY-MM-DD/control.jsonl` and `candidate.jsonl.gz`: a few hundred traces per
  variant and day over five segments (factual, multi_hop, navigational, long_tail, code); the two
  variants serve overlapping query sets; part of the traffic carries labels (graded 0..3 in
  `relevance_scores`, or click-style `relevant_ids`), with a coverage that differs by segment; the
  `code` segment logs integer document ids; `control.jsonl` also holds four malformed records
  (broken JSON, no `trace_id`, `retrieved_ids` as a string, a negative grade).
- `corpus/corpus.parquet`: every document, with `added_at` and, for a few labelled ones,
  `deleted_at`. A deleted document is no longer retrieved, but labels pointing at it stay in the
  traces: they are stale from the deletion on and the pipeline must drop them.
- `sample_manifest.json`: the days, counts and the injected regression.

The injected regression: on one day (the last by default), the `candidate` variant's `multi_hop`
traces return the same 20 documents, but their relevant documents come lowest grade first and
the best ones (grade 3) below rank 10. nDCG@10 drops well below its default threshold; recall@20
is unchanged by construction and MRR and MAP move a little, staying above theirs. Clean data sits
above every default threshold with a wide margin on every segment, variant and day.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.text import json_text

MANIFEST_NAME = "sample_manifest.json"
VARIANTS = ("control", "candidate")
REGRESSION_SEGMENT = "multi_hop"
REGRESSION_VARIANT = "candidate"
REGRESSION_METRIC = "ndcg@10"
LIST_LENGTH = 20
MALFORMED_PER_DAY = 4


@dataclass(frozen=True)
class SegmentProfile:
    """How one segment's traffic looks: volume, labelling and how well retrieval ranks it."""

    name: str
    traces_per_variant: int  # per day, before a small daily jitter
    coverage: float  # share of traces that carry labels
    n_queries: int
    relevant: tuple[int, int]  # min and max relevant documents per query
    graded_share: float  # labelled traces with graded relevance_scores (rest: relevant_ids)
    strength: float  # how far relevant documents score above distractors
    grade_weights: tuple[int, int, int] = (4, 3, 3)  # how often grades 1, 2, 3 occur
    integer_ids: bool = False


SEGMENTS: tuple[SegmentProfile, ...] = (
    SegmentProfile("factual", 90, 0.7, 160, (1, 3), 0.7, 3.9),
    SegmentProfile("multi_hop", 70, 0.6, 120, (3, 5), 1.0, 3.5),
    SegmentProfile("navigational", 90, 0.8, 140, (1, 1), 0.5, 4.5),
    SegmentProfile("long_tail", 60, 0.5, 200, (1, 2), 0.6, 3.7),
    SegmentProfile("code", 80, 0.55, 120, (1, 3), 0.8, 3.9, integer_ids=True),
)

# the candidate ranks slightly better than control on clean days
VARIANT_BONUS = {"control": 0.0, "candidate": 0.2}
DOCS_PER_SEGMENT = 1500
DISTRACTORS = 30
QUERY_OVERLAP = 0.6  # share of a segment's queries served by both variants
DELETED_SHARE = 0.03  # labelled documents deleted during the window
DELETED_BEFORE_SHARE = 0.01  # labelled documents deleted before the window


@dataclass
class _Query:
    query_id: str
    grades: dict[str | int, int]  # labelled documents (grade 0 = judged non-relevant)


@dataclass
class _Doc:
    doc_id: str | int
    added_at: datetime
    deleted_at: datetime | None = None


def _doc_id(segment: SegmentProfile, number: int) -> str | int:
    if segment.integer_ids:
        return 100_000 + SEGMENTS.index(segment) * 10_000 + number
    return f"{segment.name[:3]}-{number:05d}"


def _grade(rng: random.Random, segment: SegmentProfile) -> int:
    return rng.choices((1, 2, 3), weights=segment.grade_weights)[0]


def _build_world(
    rng: random.Random, start: datetime, end: datetime
) -> tuple[dict[str, list[_Query]], dict[str, list[_Doc]]]:
    queries: dict[str, list[_Query]] = {}
    docs: dict[str, list[_Doc]] = {}
    added = start - timedelta(days=90)
    for segment in SEGMENTS:
        pool = [_Doc(_doc_id(segment, n), added) for n in range(DOCS_PER_SEGMENT)]
        docs[segment.name] = pool
        by_id = {doc.doc_id: doc for doc in pool}
        seg_queries: list[_Query] = []
        for number in range(segment.n_queries):
            chosen = rng.sample(pool, segment.relevant[1] + 2)
            n_relevant = rng.randint(*segment.relevant)
            grades: dict[str | int, int] = {
                d.doc_id: _grade(rng, segment) for d in chosen[:n_relevant]
            }
            if segment.name == "navigational":
                grades = {doc_id: 3 for doc_id in grades}
            # one or two documents judged non-relevant (grade 0)
            grades.update(
                {d.doc_id: 0 for d in chosen[n_relevant : n_relevant + rng.randint(0, 2)]}
            )
            seg_queries.append(_Query(f"{segment.name}-q{number:04d}", grades))
        queries[segment.name] = seg_queries
        labelled = sorted({doc_id for q in seg_queries for doc_id, g in q.grades.items() if g})
        window = (end - start).total_seconds()
        for doc_id in rng.sample(labelled, round(len(labelled) * DELETED_SHARE)):
            by_id[doc_id].deleted_at = start + timedelta(seconds=rng.uniform(0, window))
        for doc_id in rng.sample(labelled, round(len(labelled) * DELETED_BEFORE_SHARE)):
            by_id[doc_id].deleted_at = start - timedelta(days=rng.uniform(1, 30))
    return queries, docs


def _rank(
    rng: random.Random,
    segment: SegmentProfile,
    variant: str,
    query: _Query,
    pool: list[_Doc],
    by_id: dict[str | int, _Doc],
    served_at: datetime,
) -> list[str | int]:
    def live(doc: _Doc) -> bool:  # a deleted document is no longer in the index
        return doc.deleted_at is None or served_at < doc.deleted_at

    strength = segment.strength + VARIANT_BONUS[variant]
    scored: list[tuple[float, str | int]] = []
    for doc_id, grade in query.grades.items():
        if not live(by_id[doc_id]):
            continue
        mean = strength * (0.55 + 0.15 * grade) if grade else 1.0
        scored.append((rng.gauss(mean, 1.0), doc_id))
    for doc in rng.sample(pool, DISTRACTORS):
        if doc.doc_id not in query.grades and live(doc):
            scored.append((rng.gauss(0.0, 1.0), doc.doc_id))
    scored.sort(key=lambda item: -item[0])
    return [doc_id for _, doc_id in scored[:LIST_LENGTH]]


def _regress(ranked: list[str | int], grades: dict[str | int, int]) -> list[str | int]:
    """The same documents, relevant ones lowest grade first and the best (grade 3) pushed below
    rank 10: nDCG@10 collapses, the top-20 set (recall@20, hit rate) is unchanged and MRR, MAP
    move a little."""
    slots = [i for i, doc_id in enumerate(ranked) if grades.get(doc_id, 0) > 0]
    reordered = sorted((ranked[i] for i in slots), key=lambda doc_id: (grades[doc_id], str(doc_id)))
    out = list(ranked)
    for slot, doc_id in zip(slots, reordered, strict=True):
        out[slot] = doc_id
    best = [doc_id for doc_id in out if grades.get(doc_id, 0) == 3]
    rest = [doc_id for doc_id in out if grades.get(doc_id, 0) != 3]
    return rest[:10] + best + rest[10:]


def _timestamp(rng: random.Random, day: date) -> tuple[datetime, str]:
    moment = datetime.combine(day, time(0, tzinfo=UTC)) + timedelta(
        milliseconds=rng.randrange(86_400_000)
    )
    text = moment.isoformat(timespec="milliseconds")
    # most producers write Z, some an explicit +00:00 offset
    return moment, text.replace("+00:00", "Z") if rng.random() < 0.8 else text


def _labels(
    rng: random.Random, segment: SegmentProfile, query: _Query
) -> tuple[dict[str, object], str]:
    if rng.random() < segment.graded_share:
        scores = {str(doc_id): grade for doc_id, grade in query.grades.items()}
        return {"relevance_scores": scores}, "human"
    relevant = [doc_id for doc_id, grade in query.grades.items() if grade > 0]
    return {"relevant_ids": relevant}, "click"


def _malformed(day: date) -> list[str]:
    stamp = f"{day.isoformat()}T12:00:00Z"
    base = {"query_id": "factual-q0000", "timestamp": stamp, "segment": "factual"}
    return [
        '{"trace_id": "' + f"{day.isoformat()}-broken" + '", "query_id": "factual-q0001", "retr',
        json.dumps({**base, "retrieved_ids": ["fac-00001", "fac-00002"], "variant": "control"}),
        json.dumps(
            {
                **base,
                "trace_id": f"{day.isoformat()}-bad-list",
                "retrieved_ids": "fac-00001,fac-00002",
                "variant": "control",
            }
        ),
        json.dumps(
            {
                **base,
                "trace_id": f"{day.isoformat()}-bad-grade",
                "retrieved_ids": ["fac-00001", "fac-00002"],
                "relevance_scores": {"fac-00001": -1},
                "variant": "control",
            }
        ),
    ]


def _write_jsonl(path: Path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if path.name.endswith(".gz"):
        # mtime=0 keeps the bytes identical for a seed
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(data)
    else:
        path.write_bytes(data)


def _write_corpus(path: Path, docs: dict[str, list[_Doc]]) -> int:
    every = [doc for segment in SEGMENTS for doc in docs[segment.name]]
    table = pa.table(
        {
            "doc_id": pa.array([str(doc.doc_id) for doc in every], pa.string()),
            "added_at": pa.array([doc.added_at for doc in every], pa.timestamp("us", tz="UTC")),
            "deleted_at": pa.array([doc.deleted_at for doc in every], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(table, path)
    return len(every)


def _prepare(out_dir: Path) -> None:
    if out_dir.exists() and any(out_dir.iterdir()):
        if not (out_dir / MANIFEST_NAME).is_file():
            raise ValueError(
                f"{out_dir} is not empty and holds no {MANIFEST_NAME}: write the sample into an "
                "empty or new directory (an earlier sample there is replaced)"
            )
        for sub in ("traces", "corpus"):
            shutil.rmtree(out_dir / sub, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)


def write_sample_store(
    out_dir: str | Path,
    days: int = 14,
    seed: int = 7,
    end_date: date | None = None,
    *,
    regression_day: date | None = None,
) -> str:
    """Write the sample store (see the module docstring); return a human summary with counts.

    `end_date` is the last day written (default: yesterday, UTC); `regression_day` the day of the
    injected regression (default: the last day; it must be one of the days written)."""
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    last = end_date or (datetime.now(UTC).date() - timedelta(days=1))
    all_days = [last - timedelta(days=offset) for offset in range(days - 1, -1, -1)]
    bad_day = regression_day or last
    if bad_day not in all_days:
        raise ValueError(f"regression_day {bad_day} is not among the days written")
    out = Path(out_dir)
    _prepare(out)

    rng = random.Random(seed)
    start = datetime.combine(all_days[0], time(0, tzinfo=UTC))
    end = datetime.combine(last + timedelta(days=1), time(0, tzinfo=UTC))
    queries, docs = _build_world(rng, start, end)
    by_id = {doc.doc_id: doc for pool in docs.values() for doc in pool}

    per_day: dict[str, dict[str, int]] = {}
    totals = {"traces": 0, "labelled": 0, "malformed": 0}
    for day in all_days:
        day_dir = out / "traces" / f"date={day.isoformat()}"
        day_dir.mkdir(parents=True)
        counts = {"traces": 0, "labelled": 0, "malformed": MALFORMED_PER_DAY}
        for variant in VARIANTS:
            records: list[tuple[datetime, str]] = []
            for segment in SEGMENTS:
                seg_queries = queries[segment.name]
                shared = round(len(seg_queries) * QUERY_OVERLAP)
                only = (len(seg_queries) - shared) // 2
                served = (
                    seg_queries[: shared + only]
                    if variant == "control"
                    else seg_queries[len(seg_queries) - shared - only :]
                )
                n = segment.traces_per_variant + rng.randint(-5, 5)
                n_labelled = round(n * segment.coverage)
                for index in range(n):
                    query = rng.choice(served)
                    moment, stamp = _timestamp(rng, day)
                    pool = docs[segment.name]
                    ranked = _rank(rng, segment, variant, query, pool, by_id, moment)
                    injected = (day, segment.name, variant) == (
                        bad_day,
                        REGRESSION_SEGMENT,
                        REGRESSION_VARIANT,
                    )
                    if injected:
                        ranked = _regress(ranked, query.grades)
                    record: dict[str, object] = {
                        "trace_id": f"{day.isoformat()}-{variant}-{segment.name}-{index:04d}",
                        "query_id": query.query_id,
                        "timestamp": stamp,
                        "retrieved_ids": ranked,
                        "segment": segment.name,
                        "variant": variant,
                    }
                    if index < n_labelled:
                        labels, source = _labels(rng, segment, query)
                        record.update(labels)
                        record["label_source"] = source
                        counts["labelled"] += 1
                    records.append((moment, json_text(record, ensure_ascii=True)))
            records.sort(key=lambda item: item[0])
            lines = [line for _, line in records]
            counts["traces"] += len(lines)
            if variant == "control":
                lines[1:1] = _malformed(day)
                _write_jsonl(day_dir / "control.jsonl", lines)
            else:
                _write_jsonl(day_dir / "candidate.jsonl.gz", lines)
        per_day[day.isoformat()] = counts
        for key in totals:
            totals[key] += counts[key]

    (out / "corpus").mkdir(parents=True)
    n_docs = _write_corpus(out / "corpus" / "corpus.parquet", docs)
    n_deleted = sum(1 for doc in by_id.values() if doc.deleted_at is not None)
    regression = {
        "day": bad_day.isoformat(),
        "segment": REGRESSION_SEGMENT,
        "variant": REGRESSION_VARIANT,
        "metric": REGRESSION_METRIC,
        "how": (
            "the same 20 documents per trace, relevant ones lowest grade first and grade 3 "
            "below rank 10: nDCG@10 drops, recall@20 is unchanged, MRR and MAP move a little"
        ),
    }
    manifest = {
        "seed": seed,
        "days": [day.isoformat() for day in all_days],
        "segments": [segment.name for segment in SEGMENTS],
        "coverage": {segment.name: segment.coverage for segment in SEGMENTS},
        "variants": list(VARIANTS),
        "integer_id_segments": [s.name for s in SEGMENTS if s.integer_ids],
        "corpus": {"documents": n_docs, "deleted": n_deleted},
        "malformed_per_day": MALFORMED_PER_DAY,
        "per_day": per_day,
        "totals": totals,
        "injected_regression": regression,
    }
    (out / MANIFEST_NAME).write_text(
        json_text(manifest, indent=2, ensure_ascii=True) + "\n", encoding="utf-8"
    )
    return (
        f"wrote a sample trace store to {out}: {days} day(s) {all_days[0]}..{last}, "
        f"{totals['traces']} traces ({totals['labelled']} labelled) over {len(SEGMENTS)} segments "
        f"and {len(VARIANTS)} variants, {totals['malformed']} malformed records, "
        f"a corpus of {n_docs} documents ({n_deleted} deleted); injected regression: "
        f"{regression['segment']} / {regression['variant']} {regression['metric']} on "
        f"{regression['day']}"
    )
