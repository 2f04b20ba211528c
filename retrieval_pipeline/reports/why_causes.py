"""What changed in one query between its baseline window and the day, and its change split into
causes by re-scoring its rankings with the baseline's labels (docs/why.md).

Pure: the traces of one query (ranking as served, fresh labels, the metric's stored value) in,
numbers and document moves out. Scores come from `reference.score_trace`, the reference
implementation of the metric definitions that the warehouse's SQL is held equal to.

For a query with day traces D and baseline traces B, stored means m_D and m_B, and L_B the
baseline's labels (each document's grade from the latest baseline trace that labels it):

- S(X) = mean over traces X of the score of each trace's ranking against L_B;
  J(X) = the same with the documents L_B does not judge removed from the ranking (condensed);
- labels    = (m_D - m_B) - (S(D) - S(B)): what the labels alone change (new, changed, stale);
- coverage  = (S(D) - J(D)) - (S(B) - J(B)): what the unjudged documents in the ranking cost on
  the day beyond what they cost in the baseline;
- rankings  = J(D) - J(B): the same labels, the judged documents in another order.

labels + coverage + rankings = m_D - m_B exactly (each term telescopes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from retrieval_pipeline.metrics import DEFAULT_GMAX, Gain, Metric
from retrieval_pipeline.text import number

# the families whose value at cut-off k reads only the first k places of the (scored) list
CUT_FAMILIES = frozenset({"ndcg", "precision", "recall", "map", "mrr", "hit_rate", "judged", "err"})
# the cut-off "what changed" reads for a metric without one (mrr, map, bpref, ...)
DEFAULT_DEPTH = 10
# at most this many documents listed per query, each way
MOVES_SHOWN = 5
# the id of a place without a label in a ranking rebuilt from its labels' ranks
# (`ranking_from_labels`): never a label, so unjudged whatever the labels, and never listed
UNLABELLED = "\x00unlabelled@"


@dataclass(frozen=True)
class QueryTrace:
    """One scored trace of a query: its ranking as served, its fresh labels (stale removed) and
    the value query_metrics holds for it."""

    on_day: bool
    served_at: datetime
    retrieved: tuple[str, ...]
    labels: Mapping[str, float]
    value: float
    stale: tuple[str, ...] = ()  # documents whose labels the corpus made stale for this trace
    top: tuple[str, ...] = ()  # the ids served first (the top k), where they were read


@dataclass(frozen=True)
class Scoring:
    """How the pipeline scores: the metric and the configured gain, relevance level, gmax and
    condensed lists, so a re-scored trace is scored as query_metrics scores it."""

    metric: Metric
    gain: Gain = "exponential"
    relevance_level: float = 1.0
    gmax: float = DEFAULT_GMAX
    judged_only: bool = False

    @property
    def depth(self) -> int:
        return self.metric.k if self.metric.k is not None else DEFAULT_DEPTH

    def score(self, ranking: Sequence[str], labels: Mapping[str, float]) -> float:
        # imported here: the reference module pulls in the record parser, which only a split needs
        from retrieval_pipeline.reference import score_trace

        k = self.metric.k
        if k is not None and self.metric.family in CUT_FAMILIES:
            # only the first k places (of the condensed list, where one is scored) count: the
            # same score at a tenth of the cost for a list of 100
            if self.judged_only and self.metric.family != "judged":
                ranking = [doc for doc in ranking if doc in labels]
            ranking = ranking[:k]
        scores = score_trace(
            ranking,
            labels,
            [self.metric],
            self.gain,
            self.relevance_level,
            gmax=self.gmax,
            judged_only=self.judged_only,
            judged=True,
        )
        return 0.0 if scores is None else scores[self.metric.name]


@dataclass(frozen=True)
class DocumentMove:
    """A document's place then (baseline) and now (the day): its median rank over the side's
    traces (None: retrieved in fewer than half of them) and its grade (None: no fresh label)."""

    doc_id: str
    grade_then: float | None
    grade_now: float | None
    rank_then: int | None
    rank_now: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "doc_id": self.doc_id,
            "grade_then": self.grade_then,
            "grade_now": self.grade_now,
            "rank_then": self.rank_then,
            "rank_now": self.rank_now,
        }


@dataclass(frozen=True)
class QueryChange:
    """One recurring query's change (m_D - m_B) split into labels, coverage and rankings, with
    the relevant documents that left the top k and the unjudged ones that entered it."""

    labels: float
    coverage: float
    rankings: float
    depth: int
    fell: tuple[DocumentMove, ...] = ()
    entered: tuple[DocumentMove, ...] = ()
    stale_now: tuple[str, ...] = field(default_factory=tuple)  # baseline labels stale on the day


def ranking_from_labels(
    ranked_labels: Iterable[tuple[str, int | None]], length: int
) -> tuple[str, ...]:
    """A ranking of `length` places with each labelled document at its rank and an UNLABELLED
    place elsewhere: what the metric step reads of a trace (sql/fct_query_metrics.sql scores the
    labels' ranks, never the id lists). A document the baseline labels but this trace does not
    is, here, not retrieved: its place in this trace is not known without the id list."""
    places = [f"{UNLABELLED}{i}" for i in range(1, length + 1)]
    for doc_id, rank in ranked_labels:
        if rank is not None and 1 <= rank <= length:
            places[rank - 1] = doc_id
    return tuple(places)


def merged_labels(traces: Iterable[QueryTrace]) -> dict[str, float]:
    """Each document's grade from the latest trace (by time served) that labels it."""
    merged: dict[str, float] = {}
    for trace in sorted(traces, key=lambda t: t.served_at):
        merged.update(trace.labels)
    return merged


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def median_rank(doc_id: str, traces: Sequence[QueryTrace]) -> int | None:
    """The median of the document's 1-based rank over `traces` (of an even number, the higher
    of the two middle ranks), a trace that did not retrieve it counting as below every rank;
    None when that median is such a trace: the document was missing from half of them or more."""
    ranks = sorted(
        t.retrieved.index(doc_id) + 1 if doc_id in t.retrieved else math.inf for t in traces
    )
    if not ranks:
        return None
    middle = ranks[len(ranks) // 2]
    return None if math.isinf(middle) else int(middle)


def split_query(traces: Sequence[QueryTrace], scoring: Scoring) -> QueryChange | None:
    """The query's change split into labels, coverage and rankings (module docstring), and what
    moved in its top k; None without traces on both sides."""
    day = [t for t in traces if t.on_day]
    base = [t for t in traces if not t.on_day]
    if not day or not base:
        return None
    then = merged_labels(base)

    def scores(side: list[QueryTrace], condensed: bool) -> float:
        return _mean(
            [
                scoring.score(
                    [d for d in t.retrieved if d in then] if condensed else t.retrieved, then
                )
                for t in side
            ]
        )

    full_day, full_base = scores(day, False), scores(base, False)
    judged_day, judged_base = scores(day, True), scores(base, True)
    change = _mean([t.value for t in day]) - _mean([t.value for t in base])
    fell, entered, stale = moves(day, base, then, scoring)
    return QueryChange(
        labels=change - (full_day - full_base),
        coverage=(full_day - judged_day) - (full_base - judged_base),
        rankings=judged_day - judged_base,
        depth=scoring.depth,
        fell=fell,
        entered=entered,
        stale_now=stale,
    )


def entered_documents(
    day: Sequence[QueryTrace], then: Mapping[str, float], now: Mapping[str, float], k: int
) -> list[DocumentMove]:
    """The documents judged neither then nor now whose median rank over the day's served top k
    (`QueryTrace.top`, where read) is in it, best rank first; their place in the baseline is
    not read (None)."""
    served = [QueryTrace(True, t.served_at, t.top[:k], {}, t.value) for t in day if t.top]
    unjudged = {d for t in served for d in t.retrieved if d not in now and d not in then}
    entered = [
        DocumentMove(d, None, None, None, rank)
        for d in unjudged
        if (rank := median_rank(d, served)) is not None and rank <= k
    ]
    entered.sort(key=lambda m: (m.rank_now or 0, m.doc_id))
    return entered


def with_entered(change: QueryChange, traces: Sequence[QueryTrace]) -> QueryChange:
    """`change` with the unjudged documents now in its top k, from `traces` whose day traces
    carry their served top k."""
    day = [t for t in traces if t.on_day]
    then = merged_labels(t for t in traces if not t.on_day)
    entered = entered_documents(day, then, merged_labels(day), change.depth)
    return replace(change, entered=tuple(entered[:MOVES_SHOWN]))


def moves(
    day: Sequence[QueryTrace],
    base: Sequence[QueryTrace],
    then: Mapping[str, float],
    scoring: Scoring,
) -> tuple[tuple[DocumentMove, ...], tuple[DocumentMove, ...], tuple[str, ...]]:
    """The relevant documents (baseline grade >= the relevance level) whose median rank was in
    the top k and is not now, best grade first; the documents judged neither then nor now whose
    median rank over the day's served top k (`QueryTrace.top`, where read) is in it, best rank
    first (their place in the baseline is not read: unknown, None); and the baseline's labelled
    documents that have no fresh label on the day because the corpus made them stale."""
    k = scoring.depth
    now = merged_labels(day)

    def move(doc_id: str) -> DocumentMove:
        return DocumentMove(
            doc_id, then.get(doc_id), now.get(doc_id), median_rank(doc_id, base),
            median_rank(doc_id, day),
        )  # fmt: skip

    def in_top(rank: int | None) -> bool:
        return rank is not None and rank <= k

    relevant = [d for d, grade in then.items() if grade >= scoring.relevance_level]
    fell = [m for m in map(move, relevant) if in_top(m.rank_then) and not in_top(m.rank_now)]
    fell.sort(key=lambda m: (-(m.grade_then or 0.0), m.rank_then or 0, m.doc_id))
    entered = entered_documents(day, then, now, k)
    stale_ids = {d for t in day for d in t.stale}
    stale = tuple(sorted(d for d in then if d not in now and d in stale_ids))
    return tuple(fell[:MOVES_SHOWN]), tuple(entered[:MOVES_SHOWN]), stale


def change_words(change: QueryChange, escape: Callable[[str], str] = str) -> str:
    """The relevant documents that left the top k (grade, rank then -> now), the unjudged ones
    that entered it and the labels stale now, in words."""
    words = []
    if change.fell:
        words.append(
            f"left the top {change.depth}: "
            + ", ".join(
                f"{escape(m.doc_id)} (grade {number(m.grade_then, 0)}, rank "
                f"{_rank(m.rank_then)} -> {_rank(m.rank_now)})"
                for m in change.fell
            )
        )
    if change.entered:
        words.append(
            f"unjudged now in the top {change.depth}: "
            + ", ".join(f"{escape(m.doc_id)} (rank {_rank(m.rank_now)})" for m in change.entered)
        )
    if change.stale_now:
        words.append("labels stale now: " + ", ".join(escape(d) for d in change.stale_now[:5]))
    return "; ".join(words) or f"no document left the top {change.depth}"


def _rank(rank: int | None) -> str:
    return "out" if rank is None else str(rank)
