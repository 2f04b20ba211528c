"""Metric names, their parsing and their definitions.

Definitions follow trec_eval (https://github.com/usnistgov/trec_eval), the field's reference; the
one deliberate difference is nDCG's default gain, exponential (2^g - 1, Burges et al. 2005, as
ranx's `ndcg_burges`), with trec_eval's linear gain (g) available as `gain = "linear"`.

For a trace with ranked list D (duplicates removed, first occurrence kept) and labels L
(doc -> grade, stale labels removed), a label is *relevant* when grade >= relevance_level,
R = number of relevant labels, and hits@K = relevant documents among the first K of D:

- precision@K = hits@K / K (K is the denominator even when fewer than K were retrieved).
- recall@K    = hits@K / R.
- AP (map)    = sum over relevant retrieved documents at rank r (r <= K for map@K) of
                (relevant among the first r) / r, divided by R (unretrieved relevant labels count).
- RR (mrr)    = 1 / rank of the first relevant document (0 if none; none within K for mrr@K).
- hit_rate@K  = 1 if hits@K > 0 else 0.
- nDCG@K      = DCG@K / IDCG@K with DCG@K = sum_{r<=K} gain(grade(D_r)) / log2(r + 1) and
                IDCG@K the same over the K highest grades among *all* labels (retrieved or not).
                As in trec_eval, nDCG uses the grades themselves and ignores relevance_level.

Edge cases: a trace with no labels (or whose labels are all stale) is *unannotated*: no scores.
A labelled trace with R = 0 scores 0 on every metric (nDCG too when IDCG = 0), as trec_eval does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, cast

Gain = Literal["exponential", "linear"]
GAINS: tuple[Gain, ...] = ("exponential", "linear")

# family -> whether a cut-off K is required (True), optional (None) or refused (False)
FAMILIES: dict[str, bool | None] = {
    "ndcg": True,
    "mrr": None,
    "precision": True,
    "recall": True,
    "map": None,
    "hit_rate": True,
}

# ir_measures spellings (matched case-insensitively) -> canonical family
ALIASES: dict[str, str] = {
    "ndcg": "ndcg",
    "ndcg_cut": "ndcg",
    "mrr": "mrr",
    "rr": "mrr",
    "recip_rank": "mrr",
    "precision": "precision",
    "p": "precision",
    "recall": "recall",
    "r": "recall",
    "map": "map",
    "ap": "map",
    "map_cut": "map",
    "hit_rate": "hit_rate",
    "success": "hit_rate",
}

_NAME = re.compile(r"^\s*([A-Za-z_]+?)\s*(?:[@_]\s*([-+]?\d+))?\s*$")

DEFAULT_METRICS = ("ndcg@10", "mrr", "precision@5", "recall@20", "map")

# The largest cut-off K: the engine binds the cut-offs as DuckDB's 32-bit integers (and ranks are
# 32-bit list positions), so a larger K could be configured but never scored.
MAX_CUTOFF = 2**31 - 1


class MetricConfigError(ValueError):
    """A metric name, cut-off or option that cannot be used."""


@dataclass(frozen=True, order=True)
class Metric:
    """One metric at one cut-off; `k is None` means the whole ranked list."""

    family: str
    k: int | None = None

    @property
    def name(self) -> str:
        """Canonical lowercase spelling, also the output column name: `ndcg@10`, `mrr`."""
        return self.family if self.k is None else f"{self.family}@{self.k}"

    def __str__(self) -> str:
        return self.name


def valid_names_hint() -> str:
    return (
        "valid metrics: ndcg@K, mrr, mrr@K, precision@K, recall@K, map, map@K, hit_rate@K "
        "(K a positive integer; aliases nDCG@K, RR, RR@K, P@K, R@K, AP, AP@K, Success@K)"
    )


def parse_metric(text: str) -> Metric:
    """Parse one metric name (canonical or ir_measures alias) into a `Metric`."""
    match = _NAME.match(text)
    family = ALIASES.get(match.group(1).lower()) if match else None
    if match is None or family is None:
        raise MetricConfigError(f"unknown metric {text!r}; {valid_names_hint()}")
    k_text = match.group(2)
    k = int(k_text) if k_text is not None else None
    needs_k = FAMILIES[family]
    if k is not None and k <= 0:
        raise MetricConfigError(f"metric {text!r}: the cut-off K must be >= 1, got {k}")
    if k is not None and k > MAX_CUTOFF:
        raise MetricConfigError(
            f"metric {text!r}: the cut-off K must be at most {MAX_CUTOFF}, got {k}"
        )
    if needs_k is True and k is None:
        raise MetricConfigError(f"metric {text!r} needs a cut-off, e.g. {family}@10")
    return Metric(family, k)


def parse_metrics(names: str | list[str] | tuple[str, ...]) -> tuple[Metric, ...]:
    """Parse a comma-separated string or a list of names; order kept, repeats dropped."""
    items = names.split(",") if isinstance(names, str) else list(names)
    parsed = [parse_metric(item) for item in items if item.strip()]
    if not parsed:
        raise MetricConfigError(f"no metric given; {valid_names_hint()}")
    return tuple(dict.fromkeys(parsed))


def check_gain(gain: str) -> Gain:
    if gain in GAINS:
        return cast(Gain, gain)
    raise MetricConfigError(f"unknown gain {gain!r}; use one of: {', '.join(GAINS)}")


def check_relevance_level(level: float) -> float:
    if not isinstance(level, int | float) or isinstance(level, bool) or not level > 0:
        raise MetricConfigError(f"relevance level must be a number > 0, got {level!r}")
    if level == math.inf:
        raise MetricConfigError(f"relevance level must be finite, got {level!r}")
    return float(level)
