"""Reference scoring of one trace in pure Python, and the per-example threshold evaluator.

The metric definitions are trec_eval's (https://github.com/usnistgov/trec_eval) and are stated once,
in the docstring of `retrieval_pipeline.metrics`; this module implements exactly those and does not
restate them. `RetrievalMetricsEvaluator` builds on it to judge one example at a time against
per-metric thresholds.

A metric whose `k` is None has no cut-off: it is computed over the whole ranked list. Only `mrr`,
`map`, `err`, `rprec`, `bpref` and `rbp@P` can be named that way, but every family accepts it here,
reading as the trec_eval measure without a cut: precision is `set_P` (relevant retrieved /
retrieved, 0 for an empty list), recall is `set_recall`, nDCG is `ndcg` (ideal DCG over all
labels), hit_rate is 1 if any relevant document was retrieved, and judged is the judged share of
the list (0 for an empty list).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from retrieval_pipeline.metrics import (
    DEFAULT_GMAX,
    Gain,
    Metric,
    MetricConfigError,
    check_gain,
    check_gmax,
    check_relevance_level,
    parse_metric,
    valid_names_hint,
)
from retrieval_pipeline.records import MAX_GRADE, TraceRecord, check_grade, parse_record

UNANNOTATED_REASON = "unannotated: no labels, not scored"

_GAINS: dict[Gain, Callable[[float], float]] = {
    "exponential": lambda grade: 2.0**grade - 1.0,
    "linear": lambda grade: grade,
}


def score_trace(
    retrieved_ids: Sequence[str],
    labels: Mapping[str, float],
    metrics: Sequence[Metric],
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    judged: bool = False,
) -> dict[str, float] | None:
    """Score one ranked list against its labels: `{metric.name: value}`, or None when unannotated.

    `labels` must be free of stale entries; an empty `labels` means the trace is unannotated, which
    is not the same as scoring 0, unless `judged` says it was judged with nothing relevant (an
    empty `relevant_ids`), which scores as a trace whose every retrieved document is unjudged.
    Repeated ids in `retrieved_ids` are dropped, the first occurrence kept, as ingestion does.
    With `judged_only`, unjudged documents are removed before ranks are taken (a condensed list).
    `gmax` is the top of the grade scale for rbp and err. A grade above `records.MAX_GRADE`,
    infinite or NaN raises `RecordError`, in a record's words: its gain could be infinite and the
    score NaN (a negative grade adds nothing, as in trec_eval).
    """
    if not labels and not judged:
        return None
    for doc_id, grade in labels.items():
        if not grade <= MAX_GRADE:  # NaN too
            check_grade(doc_id, grade)
    gain_of = _GAINS[check_gain(gain)]
    level = check_relevance_level(relevance_level)
    top = check_gmax(gmax)
    served = list(dict.fromkeys(retrieved_ids))
    ranked = [doc for doc in served if doc in labels] if judged_only else served
    relevant = {doc for doc, grade in labels.items() if grade >= level}
    n_relevant = len(relevant)
    hit_ranks = [rank for rank, doc in enumerate(ranked, start=1) if doc in relevant]
    # As in trec_eval, a negative grade adds nothing, to DCG and ideal DCG alike, instead of
    # lowering the score.
    ranked_gains = [max(gain_of(labels.get(doc, 0.0)), 0.0) for doc in ranked]
    ideal_gains = sorted((max(gain_of(g), 0.0) for g in labels.values()), reverse=True)

    scores: dict[str, float] = {}
    for metric in metrics:
        k = metric.k
        depth = len(ranked) if k is None else k
        hits = [rank for rank in hit_ranks if rank <= depth]
        value: float
        if metric.family == "precision":
            value = len(hits) / depth if depth else 0.0
        elif metric.family == "recall":
            value = len(hits) / n_relevant if n_relevant else 0.0
        elif metric.family == "map":
            precisions = ((found / rank) for found, rank in enumerate(hits, start=1))
            value = sum(precisions) / n_relevant if n_relevant else 0.0
        elif metric.family == "mrr":
            value = 1.0 / hits[0] if hits else 0.0
        elif metric.family == "hit_rate":
            value = 1.0 if hits else 0.0
        elif metric.family == "ndcg":
            ideal = _dcg(ideal_gains if k is None else ideal_gains[:k])
            value = _dcg(ranked_gains[:depth]) / ideal if ideal > 0 else 0.0
        elif metric.family == "judged":  # the list as served, condensed or not
            depth = len(served) if k is None else k
            value = sum(1 for doc in served[:depth] if doc in labels) / depth if depth else 0.0
        else:
            value = _incomplete_measure(metric, ranked, labels, level, top)
        scores[metric.name] = value
    return scores


def _incomplete_measure(
    metric: Metric, ranked: list[str], labels: Mapping[str, float], level: float, gmax: float
) -> float:
    """One of the measures for incomplete judgments, defined in `retrieval_pipeline.metrics`."""
    depth = len(ranked) if metric.k is None else metric.k
    if metric.family == "rprec":
        relevant = {doc for doc, grade in labels.items() if grade >= level}
        found = sum(1 for doc in ranked[: len(relevant)] if doc in relevant)
        return found / len(relevant) if relevant else 0.0
    if metric.family == "bpref":
        return _bpref(ranked, labels, level)
    if metric.family == "err":
        return _err(ranked[:depth], labels, gmax)
    if metric.family in ("rbp", "rbp_residual") and metric.p is not None:
        p = metric.p
        if metric.family == "rbp":
            gains = (min(labels.get(doc, 0.0), gmax) / gmax for doc in ranked)
            return (1 - p) * sum(g * p**r for r, g in enumerate(gains))
        judged_weight = sum(p**r for r, doc in enumerate(ranked) if doc in labels)
        return 1 - (1 - p) * judged_weight
    raise MetricConfigError(f"unknown metric {metric.name!r}; {valid_names_hint()}")


def _bpref(ranked: list[str], labels: Mapping[str, float], level: float) -> float:
    """trec_eval's m_bpref.c, line for line: unjudged documents are skipped."""
    n_relevant = sum(1 for grade in labels.values() if grade >= level)
    n_nonrelevant = len(labels) - n_relevant
    nonrelevant_so_far = 0
    total = 0.0
    for doc in ranked:
        grade = labels.get(doc)
        if grade is None:
            continue
        if grade < level:
            nonrelevant_so_far += 1
        elif nonrelevant_so_far > 0:
            total += 1.0 - min(nonrelevant_so_far, n_relevant) / min(n_nonrelevant, n_relevant)
        else:
            total += 1.0
    return total / n_relevant if n_relevant else 0.0


def _err(ranked: list[str], labels: Mapping[str, float], gmax: float) -> float:
    """Expected reciprocal rank of the (already cut) list, the cascade walked top down."""
    value, still_looking = 0.0, 1.0
    for rank, doc in enumerate(ranked, start=1):
        stop = (2.0 ** min(labels.get(doc, 0.0), gmax) - 1.0) / 2.0**gmax
        value += still_looking * stop / rank
        still_looking *= 1.0 - stop
    return value


def _dcg(gains: Iterable[float]) -> float:
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))


@dataclass(frozen=True)
class ThresholdFailure:
    """One metric that scored below its threshold."""

    metric: str
    value: float
    threshold: float

    @property
    def margin(self) -> float:
        """How far the value is from the threshold; negative for a failure."""
        return self.value - self.threshold

    def __str__(self) -> str:
        return f"{self.metric}={self.value:.3f} < {self.threshold:.3f}"


@dataclass
class EvaluationResult:
    """The verdict on one example: its scores, whether every threshold was met, and why.

    An unannotated example (no labels) has nothing to fail on: `passed` is True, `annotated` False,
    and `score` and `scores` are None.
    """

    passed: bool
    score: float | None  # mean of `scores`
    scores: dict[str, float] | None
    reason: str
    failures: list[ThresholdFailure]
    annotated: bool


class RetrievalMetricsEvaluator:
    """Score single examples and check each metric against a minimum threshold.

    Thresholds are `(metric name, minimum)` pairs or a mapping; names may be canonical or aliases
    (`nDCG@10`, `P@5`, `RR`), and a value equal to its threshold passes. An example without labels
    is reported as unannotated and passes, since there is nothing to hold against a threshold.
    """

    def __init__(
        self,
        thresholds: Sequence[tuple[str, float]] | Mapping[str, float],
        gain: Gain = "exponential",
        relevance_level: float = 1.0,
        *,
        gmax: float = DEFAULT_GMAX,
        judged_only: bool = False,
    ) -> None:
        pairs = list(thresholds.items()) if isinstance(thresholds, Mapping) else list(thresholds)
        if not pairs:
            raise MetricConfigError(f"no threshold given; {valid_names_hint()}")
        self.gain: Gain = check_gain(gain)
        self.relevance_level = check_relevance_level(relevance_level)
        self.gmax = check_gmax(gmax)
        self.judged_only = judged_only
        self.thresholds: dict[Metric, float] = {}
        for name, threshold in pairs:
            metric = parse_metric(name)
            if metric in self.thresholds:
                raise MetricConfigError(f"metric {metric.name!r} has more than one threshold")
            # bool is an int subclass; `not 0 <= t <= 1` also refuses NaN
            if (
                not isinstance(threshold, int | float)
                or isinstance(threshold, bool)
                or not 0.0 <= threshold <= 1.0
            ):
                raise MetricConfigError(
                    f"threshold for {metric.name!r} must be a number in [0, 1], got {threshold!r}"
                )
            self.thresholds[metric] = float(threshold)
        self.metrics = tuple(self.thresholds)

    def evaluate(self, example: Mapping[str, object] | TraceRecord) -> EvaluationResult:
        """Score one example (a raw record is validated first; `RecordError` propagates)."""
        record = example if isinstance(example, TraceRecord) else parse_record(example)
        # Judged with nothing relevant (`relevant_ids: []`) is annotated and scores 0, as in
        # trec_eval and the batch SQL; only a trace never judged is unannotated.
        scores = score_trace(
            record.retrieved_ids,
            record.labels,
            self.metrics,
            self.gain,
            self.relevance_level,
            gmax=self.gmax,
            judged_only=self.judged_only,
            judged=record.is_judged,
        )
        if scores is None:
            return EvaluationResult(
                passed=True,
                score=None,
                scores=None,
                reason=UNANNOTATED_REASON,
                failures=[],
                annotated=False,
            )
        failures = [
            ThresholdFailure(metric.name, scores[metric.name], threshold)
            for metric, threshold in self.thresholds.items()
            if scores[metric.name] < threshold
        ]
        if failures:
            reason = "; ".join(str(failure) for failure in failures)
        else:
            met = ", ".join(
                f"{metric.name}={scores[metric.name]:.3f} >= {threshold:.3f}"
                for metric, threshold in self.thresholds.items()
            )
            reason = f"all thresholds met ({met})"
        return EvaluationResult(
            passed=not failures,
            score=sum(scores.values()) / len(scores),
            scores=scores,
            reason=reason,
            failures=failures,
            annotated=True,
        )

    def evaluate_many(
        self, examples: Iterable[Mapping[str, object] | TraceRecord]
    ) -> list[EvaluationResult]:
        """Evaluate each example in order; the first invalid record raises `RecordError`."""
        return [self.evaluate(example) for example in examples]
