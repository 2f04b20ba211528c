"""trec_eval (through pytrec_eval) as the oracle for the measures of incomplete judgments.

pytrec_eval takes integer grades and one dict per query, so it cannot see repeated ids: a ranked
list is handed over with its repeats dropped, the first occurrence kept, as ingestion drops them,
and scored by -rank so that trec_eval keeps its order (it sorts by score, ties by docno).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytrec_eval

# trec_eval's measure (as requested, as reported) for our canonical names
TREC_MEASURES = {"rprec": ("Rprec", "Rprec"), "bpref": ("bpref", "bpref")}


def trec_key(name: str) -> tuple[str, str]:
    """pytrec_eval's measure to request and the key it reports, for one of our metric names."""
    if name in TREC_MEASURES:
        return TREC_MEASURES[name]
    family, _, k = name.partition("@")
    trec = {"precision": "P", "ndcg": "ndcg_cut", "recall": "recall", "map": "map_cut"}
    if family in ("map", "mrr") and not k:
        return ("map", "map") if family == "map" else ("recip_rank", "recip_rank")
    return f"{trec[family]}.{k}", f"{trec[family]}_{k}"


def trec_eval_scores(
    cases: Mapping[str, tuple[Sequence[str], Mapping[str, int]]],
    names: Sequence[str],
    relevance_level: int,
    judged_only: bool,
) -> dict[str, dict[str, float]]:
    """Per query id: our metric name -> trec_eval's value. A query trec_eval drops (no relevant
    label, or nothing retrieved) scores 0 on every measure, as the trec_eval binary reports it."""
    qrels = {
        qid: {doc: int(grade) for doc, grade in labels.items()}
        for qid, (_, labels) in cases.items()
    }
    # an empty ranked list is left out: pytrec_eval crashes on one (trec_eval scores it 0)
    run = {
        qid: {doc: float(-rank) for rank, doc in enumerate(dict.fromkeys(ranked), start=1)}
        for qid, (ranked, _) in cases.items()
        if ranked
    }
    keys = {name: trec_key(name) for name in names}
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels,
        {request for request, _ in keys.values()},
        relevance_level=relevance_level,
        judged_docs_only_flag=judged_only,
    )
    found = evaluator.evaluate(run)
    return {
        qid: {name: float(found.get(qid, {}).get(key, 0.0)) for name, (_, key) in keys.items()}
        for qid in cases
    }
