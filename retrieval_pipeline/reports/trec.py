"""trec_eval's output: `measure<TAB>qid<TAB>value` lines per query and for `all`.

`retrieval-pipeline evaluate --output-format trec` prints these, so that a team that diffs
trec_eval's output can diff this project's. What trec_eval (usnistgov/trec_eval, commit f4253652)
prints, and this module with it:

- Each line is `printf("%-22s\\t%s\\t%6.4f\\n", measure, qid, value)` (`meas_print_single.c`,
  `meas_print_final.c`); counts (`num_q`, `num_ret`, `num_rel`, `num_rel_ret`) are printed with
  `%ld`, and `runid` as `%-22s\\t%s\\t%s`.
- With `-q`, every evaluated query's lines come first, queries in `strcmp` order of their ids (the
  order `get_qrels.c` sorts them in), then the `all` lines: `runid`, `num_q`, then each measure.
  Within a query, measures appear in trec_eval's own order (`measures.c`: `num_ret`, `num_rel`,
  `num_rel_ret`, `map`, `recip_rank`, `P`, `recall`, `ndcg`, `ndcg_cut`, `map_cut`, `success`,
  `set_P`, `set_recall`, ...), cut-offs ascending.
- `all` is the arithmetic mean over the evaluated queries: by default those in both the run and
  the qrels (`trec_eval.c` skips a qrels query with no results; with `-c` it would count it, with
  zeros, over every qrels query). The counts in `all` are sums. Means are summed in query order, as
  trec_eval accumulates them.

The project's metric names map to trec_eval's (`trec_name`): ndcg@K is `ndcg_cut_K` (and ndcg
without a cut-off `ndcg`), precision@K `P_K`, recall@K `recall_K`, map `map` (map@K `map_cut_K`),
mrr `recip_rank`, hit_rate@K `success_K`; precision and recall without a cut-off are `set_P` and
`set_recall`. trec_eval's nDCG takes the grades as gains (linear gain), so nDCG with exponential
gain, mrr@K and hit_rate without a cut-off have no trec_eval name and are refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from retrieval_pipeline.metrics import Gain, Metric, MetricConfigError

# trec_eval's measure order (measures.c), for the measures this project computes
TREC_ORDER = (
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "recip_rank",
    "P",
    "recall",
    "ndcg",
    "ndcg_cut",
    "map_cut",
    "success",
    "set_P",
    "set_recall",
)
# project family -> (trec_eval measure with a cut-off, without one); None: no such measure
TREC_MEASURES: dict[str, tuple[str | None, str | None]] = {
    "ndcg": ("ndcg_cut", "ndcg"),
    "precision": ("P", "set_P"),
    "recall": ("recall", "set_recall"),
    "map": ("map_cut", "map"),
    "mrr": (None, "recip_rank"),
    "hit_rate": ("success", None),
}
ALL_QUERIES = "all"


@dataclass(frozen=True)
class QueryCounts:
    """trec_eval's count measures of one query."""

    retrieved: int  # num_ret
    relevant: int  # num_rel: judged relevant, retrieved or not
    relevant_retrieved: int  # num_rel_ret


def query_counts(
    retrieved_ids: Sequence[str], labels: Mapping[str, float], relevance_level: float = 1.0
) -> QueryCounts:
    """num_ret, num_rel and num_rel_ret of one query (`retrieved_ids` without repeats)."""
    relevant = {doc for doc, grade in labels.items() if grade >= relevance_level}
    hits = sum(1 for doc in retrieved_ids if doc in relevant)
    return QueryCounts(len(retrieved_ids), len(relevant), hits)


def trec_name(metric: Metric, gain: Gain = "linear") -> str:
    """trec_eval's spelling of `metric` (`ndcg_cut_10`, `P_5`, `recip_rank`, ...)."""
    with_cut, without = TREC_MEASURES.get(metric.family, (None, None))
    if metric.family == "ndcg" and gain != "linear":
        raise MetricConfigError(
            f"metric {metric.name!r} with {gain} gain has no trec_eval name: trec_eval's nDCG "
            "uses the grades as gains; use --gain linear"
        )
    name = without if metric.k is None else (f"{with_cut}_{metric.k}" if with_cut else None)
    if name is None:
        raise MetricConfigError(
            f"metric {metric.name!r} has no trec_eval measure; trec_eval has ndcg@K, ndcg, "
            "precision@K, recall@K, map, map@K, mrr, hit_rate@K, precision and recall"
        )
    return name


def _sort_key(metric: Metric) -> tuple[int, int]:
    base = trec_name(metric).rsplit("_", 1)[0] if metric.k is not None else trec_name(metric)
    return TREC_ORDER.index(base), metric.k or 0


def _line(measure: str, qid: str, value: float | int | str) -> str:
    if isinstance(value, str):
        shown = value
    elif isinstance(value, int):
        shown = str(value)
    else:
        shown = f"{value:6.4f}"
    return f"{measure:<22}\t{qid}\t{shown}"


def trec_eval_lines(
    per_query: Mapping[str, Mapping[str, float]],
    metrics: Iterable[Metric],
    gain: Gain = "linear",
    run_id: str | None = None,
    counts: Mapping[str, QueryCounts] | None = None,
    queries: bool = True,
) -> list[str]:
    """trec_eval's lines (`-q` when `queries`, else only `all`) for the evaluated queries:
    `per_query` maps each query id to `{metric.name: value}`; `counts`, when given, adds
    `num_ret`, `num_rel` and `num_rel_ret` (it must hold every query)."""
    ordered = sorted(dict.fromkeys(metrics), key=_sort_key)
    names = {metric: trec_name(metric, gain) for metric in ordered}
    query_ids = sorted(per_query)
    for qid in query_ids:
        for metric in ordered:
            value = per_query[qid].get(metric.name)
            if value is None or not math.isfinite(value):
                raise ValueError(f"query {qid}: no finite value of {metric.name} ({value!r})")
        if counts is not None and qid not in counts:
            raise ValueError(f"query {qid}: no counts")
    lines: list[str] = []
    if queries:
        for qid in query_ids:
            if counts is not None:
                lines += _count_lines(qid, [counts[qid]])
            lines += [_line(names[m], qid, per_query[qid][m.name]) for m in ordered]
    if run_id is not None:
        lines.append(_line("runid", ALL_QUERIES, run_id))
    lines.append(_line("num_q", ALL_QUERIES, len(query_ids)))
    if counts is not None:
        lines += _count_lines(ALL_QUERIES, [counts[qid] for qid in query_ids])
    for metric in ordered:
        total = 0.0
        for qid in query_ids:  # in trec_eval's order of accumulation
            total += per_query[qid][metric.name]
        mean = total / len(query_ids) if query_ids else 0.0
        lines.append(_line(names[metric], ALL_QUERIES, mean))
    return lines


def _count_lines(qid: str, counts: Sequence[QueryCounts]) -> list[str]:
    return [
        _line("num_ret", qid, sum(c.retrieved for c in counts)),
        _line("num_rel", qid, sum(c.relevant for c in counts)),
        _line("num_rel_ret", qid, sum(c.relevant_retrieved for c in counts)),
    ]
