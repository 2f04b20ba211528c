"""Clicks debiased for position: examination propensities by rank, then graded labels.

Under the position-based model (PBM; Craswell et al. 2008, Chuklin, Markov and de Rijke 2015) a
document d shown for query q at rank k is clicked with probability p_k * g(q, d): p_k, the
chance that rank k is looked at, and g(q, d), the chance that d is clicked once looked at.
Clicks alone confound the two: a document always shown first looks good because it is first.

Propensities: intervention harvesting (Agarwal, Zaitsev, Wang, Li, Najork and Joachims, WSDM
2019). Variants and days that place the same (q, d) at different ranks are interventions made for
free: for ranks k and k', over the set S of pairs shown at both, the sums of their click-through
rates at each rank, c_k = sum_S clicks(q, d, k) / impressions(q, d, k), estimate p_k / p_k' by
c_k / c_k' (each pair weighs the same at both ranks, so g cancels). Every rank pair with clicks
at both ranks gives one such ratio; the propensities relative to rank 1 (p_1 = 1) are the
weighted least-squares fit of log p_k - log p_k' to the logs of the ratios, each weighted by the
inverse of its approximate variance (the delta method, clicks taken as Poisson counts). A rank
with no chain of such pairs to rank 1 has no estimate, and its impressions are not used.

A fitted propensity too large for a double (a chain of extreme ratios) has no estimate either.

Labels: for each (q, d), the inverse-propensity-weighted click rate (Joachims, Swaminathan and
Schnabel, WSDM 2017) estimate = sum of clicks / max(p_k, clip) over its impressions / the number
of its impressions: the rate at which d would be clicked were it shown at rank 1. Propensities
below `clip` are raised to it, which bounds every weight by 1 / clip at the cost of a downward
bias at those ranks; `clip` is at least MIN_CLIP (1e-6), so that no weight, sum or square of
them overflows and every output is finite. The effective number of impressions is Kish's
(sum w)^2 / sum w^2 over the impressions' weights. Pairs with fewer than `min_impressions`
impressions are left unjudged (no label at all, not grade 0); the others get grade = the number
of `cut_points` at or below the estimate (0..3).

Memory: one row of counts per (query, document) pair, `max_rank` impressions and clicks each;
not one per impression.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from retrieval_pipeline.labels.impressions import Impression
from retrieval_pipeline.text import finite

METHOD = "intervention_harvesting"
LABEL_SOURCE = "clicks"
DEFAULT_MAX_RANK = 10
DEFAULT_MIN_IMPRESSIONS = 20
DEFAULT_CLIP = 0.1
# The smallest clip: weights are at most 1 / clip, so one click counts as at most a million
# unclipped ones. Far below it a weight's square, in the effective impressions, overflows a double
# (1 / clip^2 past 1.8e308 from clip 7.5e-155 down) and the labels file would hold NaN.
MIN_CLIP = 1e-6
DEFAULT_CUT_POINTS = (0.1, 0.25, 0.5)
MAX_RANK_LIMIT = 100

JUDGMENTS_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("doc_id", pa.string()),
        ("grade", pa.float64()),
        ("judged_at", pa.timestamp("us", tz="UTC")),
        ("label_source", pa.string()),
        ("estimate", pa.float64()),
        ("impressions", pa.int64()),
        ("effective_impressions", pa.float64()),
        ("clicks", pa.int64()),
    ]
)


class ClickLabelError(ValueError):
    """An option that cannot be used; the message names it."""


@dataclass(frozen=True)
class ClickLabelOptions:
    """How clicks become labels (see the module's docstring for each one's role)."""

    max_rank: int = DEFAULT_MAX_RANK
    min_impressions: int = DEFAULT_MIN_IMPRESSIONS
    clip: float = DEFAULT_CLIP
    cut_points: tuple[float, ...] = DEFAULT_CUT_POINTS

    def __post_init__(self) -> None:
        problems = []
        if not _is_int(self.max_rank) or not 2 <= self.max_rank <= MAX_RANK_LIMIT:
            problems.append(f"max_rank must be an integer in 2..{MAX_RANK_LIMIT}")
        if not _is_int(self.min_impressions) or self.min_impressions < 1:
            problems.append("min_impressions must be an integer >= 1")
        if not _is_number(self.clip) or not MIN_CLIP <= self.clip <= 1:
            problems.append(f"clip must be a number in [{MIN_CLIP:g}, 1]")
        cuts = tuple(self.cut_points)
        if (
            len(cuts) != 3
            or not all(_is_number(c) and c >= 0 for c in cuts)
            or not cuts[0] < cuts[1] < cuts[2]
        ):
            problems.append(
                "cut_points must be three increasing numbers >= 0 (the estimates where grades "
                "1, 2 and 3 begin)"
            )
        if problems:
            raise ClickLabelError(
                "; ".join(problems) + f" (got max_rank={self.max_rank!r}, min_impressions="
                f"{self.min_impressions!r}, clip={self.clip!r}, cut_points={self.cut_points!r})"
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """An int of any size, or a finite float as `text.finite` judges one (`numbers_only`: a
    numeric string is no number here). Ints are taken before `finite`, which makes its value a
    float: an int too large for a float still compares exactly with the bounds here."""
    return _is_int(value) or finite(value, numbers_only=True) is not None


class ClickTable:
    """Impressions and clicks per (query, document) and rank 1..max_rank, and when each pair was
    last shown. Documents shown below max_rank are counted apart and not used."""

    def __init__(self, max_rank: int = DEFAULT_MAX_RANK) -> None:
        self.max_rank = max_rank
        self.keys: list[tuple[str, str]] = []
        self._row: dict[tuple[str, str], int] = {}
        self.impressions = np.zeros((1024, max_rank), dtype=np.int64)
        self.clicks = np.zeros((1024, max_rank), dtype=np.int64)
        self.last_shown = np.zeros(1024, dtype=np.int64)  # microseconds since the epoch, UTC
        self.shown_below_max_rank = 0
        self.clicks_below_max_rank = 0

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, impression: Impression) -> None:
        """Count one page: each document in the top max_rank shown once, clicked or not."""
        micros = _micros(impression.served_at)
        for rank, doc in enumerate(impression.shown_ids[: self.max_rank]):
            row = self._row_of((impression.query_id, doc))
            self.impressions[row, rank] += 1
            if doc in impression.clicked_ids:
                self.clicks[row, rank] += 1
            self.last_shown[row] = max(self.last_shown[row], micros)
        below = impression.shown_ids[self.max_rank :]
        self.shown_below_max_rank += len(below)
        self.clicks_below_max_rank += sum(1 for doc in below if doc in impression.clicked_ids)

    def add_all(self, impressions: Iterable[Impression]) -> ClickTable:
        for impression in impressions:
            self.add(impression)
        return self

    def _row_of(self, key: tuple[str, str]) -> int:
        row = self._row.get(key)
        if row is None:
            row = len(self.keys)
            if row == len(self.last_shown):
                self.impressions = _grown(self.impressions)
                self.clicks = _grown(self.clicks)
                self.last_shown = _grown(self.last_shown)
            self._row[key] = row
            self.keys.append(key)
            self.last_shown[row] = np.iinfo(np.int64).min
        return row

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Impressions and clicks, one row per pair (in `keys` order), one column per rank."""
        size = len(self.keys)
        return self.impressions[:size], self.clicks[:size]


def _grown(array: np.ndarray) -> np.ndarray:
    bigger = np.zeros((2 * array.shape[0], *array.shape[1:]), dtype=array.dtype)
    bigger[: array.shape[0]] = array
    return bigger


def _micros(instant: datetime) -> int:
    delta = instant.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class RankPair:
    """What one pair of ranks says: the (query, document) pairs shown at both, and the ratio of
    their summed click-through rates at the first rank to the second (None: no click at one)."""

    ranks: tuple[int, int]
    pairs: int
    ratio: float | None
    weight: float  # inverse of the approximate variance of log(ratio); 0 when unused


@dataclass(frozen=True)
class Propensities:
    """Examination propensity per rank relative to rank 1 (None: not estimable), and how many
    (query, document) pairs shown at that rank and at another one informed it."""

    method: str
    max_rank: int
    values: dict[int, float | None]
    pairs: dict[int, int]
    rank_pairs: tuple[RankPair, ...] = field(default=(), repr=False)

    def as_json(self) -> dict[str, object]:
        """The PROPENSITIES.json document: ranks as strings, as JSON keys are."""
        return {
            "method": self.method,
            "max_rank": self.max_rank,
            "propensities": {str(k): v for k, v in self.values.items()},
            "pairs": {str(k): n for k, n in self.pairs.items() if k > 1},
            "rank_pairs": [
                {"ranks": list(rp.ranks), "pairs": rp.pairs, "ratio": rp.ratio}
                for rp in self.rank_pairs
            ],
        }


def estimate_propensities(table: ClickTable) -> Propensities:
    """Propensities relative to rank 1 by intervention harvesting (the module's docstring)."""
    impressions, clicks = table.counts()
    shown = impressions > 0
    ctr = np.divide(clicks, impressions, out=np.zeros(clicks.shape), where=shown)
    # the variance of one pair's click-through rate, clicks taken as Poisson: clicks / n^2
    ctr_var = np.divide(clicks, impressions**2, out=np.zeros(clicks.shape), where=shown)
    ranks = table.max_rank
    informed = np.zeros(shown.shape, dtype=bool)
    rank_pairs: list[RankPair] = []
    for a in range(ranks):
        for b in range(a + 1, ranks):
            both = shown[:, a] & shown[:, b]
            count = int(both.sum())
            if count == 0:
                continue
            informed[both, a] = informed[both, b] = True
            sum_a, sum_b = float(ctr[both, a].sum()), float(ctr[both, b].sum())
            if sum_a <= 0 or sum_b <= 0:
                rank_pairs.append(RankPair((a + 1, b + 1), count, None, 0.0))
                continue
            variance = float(ctr_var[both, a].sum()) / sum_a**2
            variance += float(ctr_var[both, b].sum()) / sum_b**2
            rank_pairs.append(RankPair((a + 1, b + 1), count, sum_a / sum_b, 1.0 / variance))
    values = _fit_log_propensities(ranks, rank_pairs)
    pairs = {k + 1: int(informed[:, k].sum()) for k in range(ranks)}
    return Propensities(METHOD, ranks, values, pairs, tuple(rank_pairs))


def _fit_log_propensities(ranks: int, rank_pairs: Sequence[RankPair]) -> dict[int, float | None]:
    """Weighted least squares of log p_a - log p_b = log ratio(a, b), log p_1 = 0, over the ranks
    linked to rank 1 by usable rank pairs; the others get None."""
    usable = [rp for rp in rank_pairs if rp.ratio is not None and rp.weight > 0]
    linked = {1}
    grew = True
    while grew:
        grew = False
        for rp in usable:
            a, b = rp.ranks
            if (a in linked) != (b in linked):
                linked |= {a, b}
                grew = True
    unknowns = sorted(linked - {1})
    values: dict[int, float | None] = {k: None for k in range(1, ranks + 1)}
    values[1] = 1.0
    if not unknowns:
        return values
    column = {rank: i for i, rank in enumerate(unknowns)}
    rows = [rp for rp in usable if rp.ranks[0] in linked and rp.ranks[1] in linked]
    design = np.zeros((len(rows), len(unknowns)))
    target = np.zeros(len(rows))
    for i, rp in enumerate(rows):
        a, b = rp.ranks
        scale = math.sqrt(rp.weight)
        if a in column:
            design[i, column[a]] = scale
        if b in column:
            design[i, column[b]] = -scale
        target[i] = scale * math.log(rp.ratio)  # type: ignore[arg-type]
    solution = np.linalg.lstsq(design, target, rcond=None)[0]
    for rank, log_p in zip(unknowns, solution, strict=True):
        # a chain of extreme ratios can fit a propensity past a double (e^710): no estimate
        values[rank] = float(math.exp(log_p)) if log_p < _MAX_LOG else None
    return values


_MAX_LOG = math.log(np.finfo(np.float64).max)


@dataclass(frozen=True)
class ClickLabels:
    """The judgments (JUDGMENTS_SCHEMA, one row per labelled pair) and what was left out."""

    judgments: pa.Table
    pairs: int  # (query, document) pairs seen in the top max_rank
    unjudged: int  # pairs with fewer than min_impressions usable impressions
    unused_impressions: int  # document displays at ranks without a propensity


def click_labels(
    table: ClickTable, propensities: Propensities, options: ClickLabelOptions
) -> ClickLabels:
    """Inverse-propensity-weighted click rates and grades per pair (the module's docstring)."""
    impressions, clicks = table.counts()
    known = np.array(
        [propensities.values.get(k + 1) is not None for k in range(table.max_rank)], dtype=bool
    )
    p = np.array([propensities.values.get(k + 1) or 1.0 for k in range(table.max_rank)])
    weight = np.where(known, 1.0 / np.maximum(p, options.clip), 0.0)
    n = impressions * known
    shown = n.sum(axis=1)
    weighted = (clicks * weight).sum(axis=1)
    estimate = np.divide(weighted, shown, out=np.zeros(len(shown)), where=shown > 0)
    # Kish's ratio is the same for weights scaled by any factor: scaled by each pair's largest
    # weight (1 at that rank, so the denominator is >= 1), neither the squares of tiny weights
    # (a propensity of 1e300) underflow to 0 / 0 nor those of large ones overflow
    largest = np.where(n > 0, weight, 0.0).max(axis=1, initial=0.0)
    scaled = np.divide(
        weight, largest[:, None], out=np.zeros(n.shape), where=(n > 0) & (largest[:, None] > 0)
    )
    ess = np.divide(
        (n * scaled).sum(axis=1) ** 2,
        (n * scaled**2).sum(axis=1),
        out=np.zeros(len(shown)),
        where=shown > 0,
    )
    grade = np.searchsorted(np.asarray(options.cut_points, dtype=float), estimate, side="right")
    keep = shown >= options.min_impressions
    order = sorted(np.flatnonzero(keep), key=lambda row: table.keys[row])
    rows = np.asarray(order, dtype=np.int64)
    judgments = pa.table(
        {
            "query_id": [table.keys[row][0] for row in order],
            "doc_id": [table.keys[row][1] for row in order],
            "grade": grade[rows].astype(np.float64),
            "judged_at": pa.array(
                table.last_shown[: len(table)][rows], type=pa.timestamp("us", tz="UTC")
            ),
            "label_source": [LABEL_SOURCE] * len(order),
            "estimate": estimate[rows],
            "impressions": shown[rows],
            "effective_impressions": ess[rows],
            "clicks": (clicks * known).sum(axis=1)[rows],
        },
        schema=JUDGMENTS_SCHEMA,
    )
    return ClickLabels(
        judgments=judgments,
        pairs=len(table),
        unjudged=int(len(table) - keep.sum()),
        unused_impressions=int((impressions * ~known).sum()),
    )
