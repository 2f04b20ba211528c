"""The conformance matrix's one seeded dataset, written as every trace source, and its oracle.

A day of traces over twelve queries: four labelled inline (`relevance_scores` on every trace),
four by the judgments alone (TREC qrels), two mixed (some traces with labels of their own, the
others labelled by their query's judgments) and two with no label anywhere (unannotated). Every
group holds empty results (nothing retrieved). Some traces of the span sources carry a reranker.

Each source kind gets the same traces under trace ids of its own (the first hex digit names the
kind), so that one store's day can hold every local file kind at once and each value is still
checked against the kind it came from. The oracle is pytrec_eval (trec_eval's own code) on each
trace's effective labels (its own, else its query's judgments); an empty result is 0 on every
metric, by hand: nothing retrieved, nothing found.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytrec_eval

from tests.ingest.span_exports import base64_ids, export_line, openinference_retriever, reranker

DAY = "2026-12-01"
PROJECT = "conformance"
METRICS = ("ndcg@10", "mrr", "precision@5", "recall@20", "map")
TREC = {
    "ndcg@10": "ndcg_cut_10",
    "mrr": "recip_rank",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "map": "map",
}
# the queries of each label source
INLINE = ("q00", "q01", "q02", "q03")
JUDGED = ("q04", "q05", "q06", "q07")
MIXED = ("q08", "q09")
UNLABELLED = ("q10", "q11")
QUERIES = INLINE + JUDGED + MIXED + UNLABELLED
TRACES_PER_QUERY = 4
DOCS = [f"d{n:02d}" for n in range(25)]
# the local file kinds (one store day can hold them all), then the other sources
FILE_KINDS = ("jsonl", "jsonl.gz", "parquet", "otlp-hex", "otlp-base64")
SPAN_KINDS = ("otlp-hex", "otlp-base64", "phoenix")
KIND_DIGIT = {kind: n + 1 for n, kind in enumerate((*FILE_KINDS, "s3", "delta", "phoenix"))}
SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("query_id", pa.string()),
        ("timestamp", pa.string()),
        ("segment", pa.string()),
        ("variant", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.float64())),
    ]
)


@dataclass(frozen=True)
class Trace:
    """One retrieval: `key` is its place in the day (the trace id without the kind's digit),
    `own` its labels of its own (None: none), `reranked` a reranker's output when it has one."""

    key: str
    query_id: str
    timestamp: str
    segment: str
    variant: str
    retrieved: tuple[str, ...]
    own: dict[str, int] | None
    reranked: tuple[str, ...] | None = None

    def trace_id(self, kind: str) -> str:
        return f"{KIND_DIGIT[kind]:x}{self.key}"

    def record(self, kind: str) -> dict[str, Any]:
        record: dict[str, Any] = {
            "trace_id": self.trace_id(kind),
            "query_id": self.query_id,
            "timestamp": self.timestamp,
            "segment": self.segment,
            "variant": self.variant,
            "retrieved_ids": list(self.retrieved),
        }
        if self.own is not None:
            record["relevance_scores"] = dict(self.own)
        return record


@dataclass(frozen=True)
class Dataset:
    traces: tuple[Trace, ...]
    qrels: dict[str, dict[str, int]]  # by query
    groups: dict[str, str] = field(default_factory=dict)  # trace key -> label source

    def labels(self, trace: Trace) -> dict[str, int] | None:
        """The labels a trace is scored on: its own, else its query's judgments, else none."""
        return trace.own if trace.own is not None else self.qrels.get(trace.query_id)

    def qrels_text(self) -> str:
        return "".join(
            f"{query} 0 {doc} {grade}\n"
            for query, docs in sorted(self.qrels.items())
            for doc, grade in sorted(docs.items())
        )


def dataset(seed: int = 31) -> Dataset:
    rng = random.Random(seed)
    qrels = {
        query: {doc: rng.randrange(4) for doc in rng.sample(DOCS, 8)} | {rng.choice(DOCS): 3}
        for query in JUDGED + MIXED
    }
    traces: list[Trace] = []
    groups: dict[str, str] = {}
    for n in range(len(QUERIES) * TRACES_PER_QUERY):
        query = QUERIES[n % len(QUERIES)]
        key = f"{rng.getrandbits(60):015x}"
        empty = n % 7 == 3  # an empty result in every group
        retrieved = () if empty else tuple(rng.sample(DOCS, rng.randrange(1, 13)))
        own: dict[str, int] | None = None
        if query in INLINE or (query in MIXED and n % 2 == 0):
            pool = [*retrieved[:4], *rng.sample(DOCS, 3)]
            own = {doc: rng.randrange(4) for doc in pool} | {rng.choice(DOCS): 2}
        reranked = None
        if len(retrieved) >= 2 and n % 3 == 0:
            reranked = tuple(rng.sample(retrieved, len(retrieved)))
        traces.append(
            Trace(
                key,
                query,
                f"{DAY}T{n % 24:02d}:{n % 60:02d}:07.{n:06d}Z",
                ("web", "faq")[n % 2],
                ("control", "candidate")[n // 2 % 2],
                retrieved,
                own,
                reranked,
            )
        )
        groups[key] = (
            "unlabelled"
            if query in UNLABELLED
            else "inline"
            if own is not None
            else "judgments"
            if query in JUDGED
            else "mixed: judgments"
        )
        if query in MIXED and own is not None:
            groups[key] = "mixed: inline"
    return Dataset(tuple(traces), qrels, groups)


# --- the oracle --------------------------------------------------------------------------------


def oracle(
    rankings: Mapping[str, Sequence[str]], labels: Mapping[str, Mapping[str, int] | None]
) -> dict[str, dict[str, float] | None]:
    """Per ranking id: trec_eval's values (pytrec_eval) on its labels; None when it has none
    (unannotated); 0 on every metric for an empty ranking (by hand: nothing retrieved)."""
    judged = {key: dict(value) for key, value in labels.items() if value is not None}
    run = {
        key: {doc: float(-rank) for rank, doc in enumerate(docs, start=1)}
        for key, docs in rankings.items()
        if key in judged and docs
    }
    evaluator = pytrec_eval.RelevanceEvaluator(
        {key: judged[key] for key in run}, set(TREC.values()), relevance_level=1
    )
    values = evaluator.evaluate(run)
    out: dict[str, dict[str, float] | None] = {}
    for key, docs in rankings.items():
        if key not in judged:
            out[key] = None
        elif not docs:
            out[key] = dict.fromkeys(METRICS, 0.0)
        else:
            out[key] = {metric: values[key][TREC[metric]] for metric in METRICS}
    return out


def expected(data: Dataset, kind: str, stage: str = "retriever") -> dict[str, dict | None]:
    """Per trace id of `kind` (a reranker's: its span id), the oracle's values for `stage`."""
    rankings: dict[str, Sequence[str]] = {}
    labels: dict[str, Mapping[str, int] | None] = {}
    for trace in data.traces:
        if stage == "retriever":
            key, ranking = trace.trace_id(kind), trace.retrieved
        elif trace.reranked is None:
            continue
        elif stage == "reranker":
            key, ranking = reranker_span(trace, kind), trace.reranked
        else:  # the reranker's input: the retriever's ranking, under the input's id
            key, ranking = reranker_span(trace, kind) + ":input", trace.retrieved
        rankings[key] = ranking
        labels[key] = data.labels(trace)
    return oracle(rankings, labels)


# --- the sources -------------------------------------------------------------------------------


def reranker_span(trace: Trace, kind: str) -> str:
    """The reranker's span id: the retriever's with its last twelve bits flipped."""
    return f"{KIND_DIGIT[kind]:x}{int(trace.key, 16) ^ 0xFFF:015x}"


def otel_trace(trace: Trace) -> str:
    return f"{int(trace.key, 16):032x}"


def span_lines(data: Dataset, kind: str) -> list[str]:
    """The traces as OpenInference RETRIEVER spans (labels in their metadata; an empty result has
    no document attribute) and RERANKER spans, ten requests to a line; ids in base64 for
    `otlp-base64`, as protobuf's JSON mapping writes them."""
    rng = random.Random(5)
    spans = []
    for trace in data.traces:
        record = trace.record(kind)
        spans.append(openinference_retriever(record, otel_trace(trace), rng))
        if trace.reranked is not None:
            spans.append(
                reranker(
                    reranker_span(trace, kind),
                    otel_trace(trace),
                    trace.timestamp,
                    trace.retrieved,
                    trace.reranked,
                )
            )
    lines = [export_line([spans[at : at + 10]], project=PROJECT) for at in range(0, len(spans), 10)]
    return [base64_ids(line) for line in lines] if kind == "otlp-base64" else lines


def table(data: Dataset, kind: str) -> pa.Table:
    return pa.Table.from_pylist([trace.record(kind) for trace in data.traces], schema=SCHEMA)


FILE_NAMES = {
    "jsonl": "a.jsonl",
    "jsonl.gz": "b.jsonl.gz",
    "parquet": "c.parquet",
    "otlp-hex": "d-export.jsonl",
    "otlp-base64": "e-export.json",
}


def write_file(data: Dataset, kind: str, folder: Path, ids: str | None = None) -> Path:
    """The traces as one file of `kind` in `folder`, under the trace ids of kind `ids`
    (default: `kind`'s own)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAMES[kind]
    named = ids or kind
    if kind in ("jsonl", "jsonl.gz"):
        text = "".join(json.dumps(trace.record(named)) + "\n" for trace in data.traces)
        if kind == "jsonl":
            path.write_text(text, encoding="utf-8")
        else:
            path.write_bytes(gzip.compress(text.encode("utf-8")))
    elif kind == "parquet":
        pq.write_table(table(data, named), path)
    else:
        path.write_text("\n".join(span_lines(data, kind)) + "\n", encoding="utf-8")
    return path


def write_store(data: Dataset, root: Path, kinds: Sequence[str] = FILE_KINDS) -> Path:
    """A local store: the day's files of `kinds` and the judgments in `judgments/`."""
    for kind in kinds:
        write_file(data, kind, root / "traces" / f"date={DAY}")
    write_qrels(data, root / "judgments")
    return root


def write_qrels(data: Dataset, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "qrels.txt"
    path.write_text(data.qrels_text(), encoding="utf-8")
    return path


def write_delta(data: Dataset, folder: Path) -> Path:
    """A Delta table partitioned by date whose current version holds the day; its first
    version held other rows, whose files stay in the folder (a reader of every Parquet file
    would count them)."""
    import deltalake

    rows = table(data, "delta").append_column("date", pa.array([DAY] * len(data.traces)))
    stale = rows.slice(0, 5).set_column(0, "trace_id", pa.array([f"old{n}" for n in range(5)]))
    deltalake.write_deltalake(str(folder), stale, partition_by=["date"])
    deltalake.write_deltalake(str(folder), rows, partition_by=["date"], mode="overwrite")
    return folder


def trec_run(data: Dataset, path: Path) -> dict[str, tuple[str, ...]]:
    """A TREC run of each query's first non-empty ranking; returns the rankings by qid (a run
    cannot hold an empty ranking: a query without lines is not in it)."""
    rankings: dict[str, tuple[str, ...]] = {}
    for trace in data.traces:
        if trace.retrieved and trace.query_id not in rankings:
            rankings[trace.query_id] = trace.retrieved
    lines = [
        f"{query} Q0 {doc} {rank} {100 - rank} conformance\n"
        for query, docs in rankings.items()
        for rank, doc in enumerate(docs, start=1)
    ]
    path.write_text("".join(lines), encoding="utf-8")
    return rankings
