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

Measures for incomplete judgments. Judgments are never complete: a document without a (fresh)
label is *unjudged*, which the measures above count as non-relevant. A label of grade 0 is a
judgment (judged non-relevant), not an absence of one.

- judged@K    = judged documents (any grade, 0 included) among the first K of D, / K (ir_measures'
                `Judged@K`, from OpenNIR). K is the denominator even when fewer than K were
                retrieved, as in precision@K; ir_measures divides by min(K, |D|) instead, so a
                short list that is fully judged scores |D| / K here. It describes the list as
                served, so a condensed list (below) does not change it, as ir_measures' Judged
                takes no `judged_only`.
- rprec       = relevant documents among the first R of D, / R (trec_eval `Rprec`; Buckley and
                Voorhees 2005); R counts the unretrieved relevant labels too, so a list shorter
                than R cannot reach 1. 0 when R = 0.
- bpref       = (1 / R) * sum over relevant retrieved documents d of
                1 - min(n_d, R) / min(N, R), where n_d = judged non-relevant documents (grade
                below relevance_level) ranked above d and N = judged non-relevant labels, retrieved
                or not (trec_eval `bpref`, m_bpref.c; Buckley and Voorhees, SIGIR 2004). Unjudged
                documents are skipped. A term with n_d = 0 is 1, so with N = 0 bpref equals
                recall over the whole list; 0 when R = 0. No cut-off.
- rbp@P       = (1 - P) * sum over ranks r of D of gain(D_r) * P^(r - 1), gain = min(grade,
                gmax) / gmax (0 for unjudged), persistence P in (0, 1) (Moffat and Zobel, TOIS
                2008). No cut-off: the whole list. Graded: the relevance level is not used.
- rbp@P_residual = the most the unjudged documents could add to rbp@P, were each of them, and
                every document beyond the end of D, of gain 1: (1 - P) * sum over unjudged ranks
                r of P^(r - 1) + P^|D| = 1 - (1 - P) * sum over judged ranks r of P^(r - 1)
                (Moffat and Zobel 2008, section 4). rbp@P + residual bounds the score from above.
                1 for an empty list. A companion metric with its own row, so that a per-metric
                table carries it beside rbp@P (`with_residuals`).
- err@K       = sum over r <= K of (1 / r) * R(D_r) * prod_{i < r} (1 - R(D_i)), with
                R(g) = (2^min(g, gmax) - 1) / 2^gmax (0 for unjudged) (Chapelle, Metzler, Zhang and
                Grinspan, CIKM 2009). Graded; grades above gmax count as gmax, so R < 1. err
                without a cut-off reads the whole list.

gmax (default 3) is the top of the grade scale, from the configuration.

Condensed lists (`judged_only`; Sakai 2007, trec_eval -J, ir_measures' `judged_only`): every
measure but judged@K is computed on D with its unjudged documents removed before ranks are taken;
the labels, and so R, N and the ideal DCG, are unchanged. On a condensed list of n documents
rbp@P_residual = P^n, and bpref is unchanged (it never sees unjudged documents).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
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
    "judged": True,
    "rprec": False,
    "bpref": False,
    "err": None,
}
# Families named by a persistence P in (0, 1) instead of a cut-off: `rbp@0.8`.
PERSISTENCE_FAMILIES = ("rbp", "rbp_residual")
RESIDUAL_SUFFIX = "_residual"
DEFAULT_PERSISTENCE = 0.8  # ir_measures' default for `RBP`
DEFAULT_GMAX = 3.0

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
    "judged": "judged",
    "rprec": "rprec",
    "bpref": "bpref",
    "err": "err",
}

_NAME = re.compile(r"^\s*([A-Za-z_]+?)\s*(?:[@_]\s*([-+]?\d+))?\s*$")
# rbp@0.8, rbp@0.8_residual, and ir_measures' RBP and RBP(p=0.8); the number is checked later
_RBP_NAME = re.compile(
    r"^\s*rbp\s*(?:@\s*([^_\s]+)|\(\s*p\s*=\s*([^)\s]+)\s*\))?\s*(_residual)?\s*$",
    re.IGNORECASE,
)

DEFAULT_METRICS = ("ndcg@10", "mrr", "precision@5", "recall@20", "map")

# The largest cut-off K: the engine binds the cut-offs as DuckDB's 32-bit integers (and ranks are
# 32-bit list positions), so a larger K could be configured but never scored.
MAX_CUTOFF = 2**31 - 1


class MetricConfigError(ValueError):
    """A metric name, cut-off or option that cannot be used."""


@dataclass(frozen=True, order=True)
class Metric:
    """One metric at one cut-off; `k is None` means the whole ranked list. `p` is the persistence
    of `rbp` and `rbp_residual` (and None for every other family)."""

    family: str
    k: int | None = None
    p: float | None = None

    @property
    def name(self) -> str:
        """Canonical lowercase spelling, also the output column name: `ndcg@10`, `mrr`,
        `rbp@0.8`, `rbp@0.8_residual` (the persistence as Python's shortest repr)."""
        if self.family in PERSISTENCE_FAMILIES:
            suffix = RESIDUAL_SUFFIX if self.family == "rbp_residual" else ""
            return f"rbp@{self.p!r}{suffix}"
        return self.family if self.k is None else f"{self.family}@{self.k}"

    def __str__(self) -> str:
        return self.name


def valid_names_hint() -> str:
    return (
        "valid metrics: ndcg@K, mrr, mrr@K, precision@K, recall@K, map, map@K, hit_rate@K, "
        "judged@K, rprec, bpref, rbp@P, rbp@P_residual, err, err@K "
        "(K a positive integer, P a persistence in (0, 1); aliases nDCG@K, RR, RR@K, P@K, R@K, "
        "AP, AP@K, Success@K, Judged@K, Rprec, Bpref, RBP(p=P), ERR@K)"
    )


def parse_metric(text: str) -> Metric:
    """Parse one metric name (canonical or ir_measures alias) into a `Metric`."""
    rbp = _RBP_NAME.match(text)
    if rbp is not None:
        return _rbp_metric(text, rbp.group(1) or rbp.group(2), rbp.group(3) is not None)
    match = _NAME.match(text)
    family = ALIASES.get(match.group(1).lower()) if match else None
    if match is None or family is None:
        guess = closest_metric(text)
        did_you_mean = f": did you mean {guess}?" if guess is not None else ";"
        raise MetricConfigError(f"unknown metric {text!r}{did_you_mean} {valid_names_hint()}")
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
    if needs_k is False and k is not None:
        raise MetricConfigError(
            f"metric {text!r}: {family} takes no cut-off; it reads the whole ranked list"
        )
    return Metric(family, k)


def closest_metric(text: str) -> str | None:
    """The known metric name closest to an unknown one (`ndgc@10` -> `ndcg@10`, `mmr` -> `mrr`),
    its cut-off kept where it is one, by `difflib.get_close_matches` over the families and their
    aliases; None when nothing is close. Built from its parts, never parsed: no recursion."""
    head, _, tail = text.strip().partition("@")
    found = difflib.get_close_matches(head.strip().lower(), [*ALIASES, *PERSISTENCE_FAMILIES], n=1)
    if not found:
        return None
    family = ALIASES.get(found[0], found[0])
    tail = tail.strip()
    if family in PERSISTENCE_FAMILIES:
        try:
            p = float(tail)
        except ValueError:
            p = DEFAULT_PERSISTENCE
        return Metric(family, p=p if 0.0 < p < 1.0 else DEFAULT_PERSISTENCE).name
    k = int(tail) if tail.isdigit() and 0 < int(tail) <= MAX_CUTOFF else None
    needs_k = FAMILIES[family]
    if needs_k is False or (needs_k is None and k is None):
        return family
    return Metric(family, k or 10).name


def _rbp_metric(text: str, persistence: str | None, residual: bool) -> Metric:
    """`rbp@P` (or its residual) from the persistence's text; ir_measures' bare `RBP` is P=0.8."""
    try:
        p = DEFAULT_PERSISTENCE if persistence is None else float(persistence)
    except ValueError:
        p = math.nan
    if not 0.0 < p < 1.0:  # also refuses NaN
        raise MetricConfigError(
            f"metric {text!r}: the persistence P of rbp@P must be a number in (0, 1), e.g. rbp@0.8"
        )
    return Metric("rbp_residual" if residual else "rbp", p=p)


def with_residuals(metrics: Iterable[Metric]) -> tuple[Metric, ...]:
    """The metrics, each `rbp@P` followed by its `rbp@P_residual` (added when missing), so that
    wherever RBP is reported the most the unjudged documents could add is reported beside it."""
    out: list[Metric] = []
    for metric in metrics:
        out.append(metric)
        if metric.family == "rbp":
            out.append(Metric("rbp_residual", p=metric.p))
    return tuple(dict.fromkeys(out))


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


# The list-level coverage every report shows beside the annotation coverage: judged@K at the
# largest configured judged@K, else at this K.
COVERAGE_K = 10


def coverage_metric(metrics: Iterable[Metric]) -> Metric:
    """The judged@K that measures list-level coverage: the largest configured, else judged@10."""
    ks = [m.k for m in metrics if m.family == "judged" and m.k is not None]
    return Metric("judged", max(ks) if ks else COVERAGE_K)


def with_coverage(metrics: Iterable[Metric]) -> tuple[Metric, ...]:
    """The metrics, then the coverage metric (`coverage_metric`) when it is not among them."""
    listed = tuple(metrics)
    return tuple(dict.fromkeys((*listed, coverage_metric(listed))))


def check_gmax(gmax: float) -> float:
    """The top of the grade scale for rbp and err: a finite number > 0."""
    if (
        not isinstance(gmax, int | float)
        or isinstance(gmax, bool)
        or not math.isfinite(gmax)
        or not gmax > 0
    ):
        raise MetricConfigError(f"gmax must be a finite number > 0, got {gmax!r}")
    return float(gmax)


def check_relevance_level(level: float) -> float:
    if not isinstance(level, int | float) or isinstance(level, bool) or not level > 0:
        raise MetricConfigError(f"relevance level must be a number > 0, got {level!r}")
    if level == math.inf:
        raise MetricConfigError(f"relevance level must be finite, got {level!r}")
    return float(level)
