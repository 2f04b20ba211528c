"""Segment names and threshold assignments, one definition for every room.

The overall row of a day (every segment together) is stored under `OVERALL_SEGMENT`; a rule or
threshold that applies to every segment is keyed `ALL_SEGMENTS`. Both are reserved: a trace's own
segment never takes either name's meaning. A trace whose segment is `OVERALL_SEGMENT` is
quarantined (records.OVERALL_SEGMENT_REASON), since its rows would be pooled with the overall
ones; `ALL_SEGMENTS` is a name only thresholds and rules give.
"""

from __future__ import annotations

import math

# The segment of the row that covers every segment of a variant.
OVERALL_SEGMENT = "__all__"
# A threshold or rule for every segment (and for the overall row).
ALL_SEGMENTS = "*"

_THRESHOLD_SYNTAX = (
    "expected [SEGMENT:]METRIC=VALUE with VALUE in [0, 1],"
    " e.g. ndcg@10=0.7 or multi_hop:ndcg@10=0.72"
)


def segment_label(segment: str) -> str:
    """How a segment is named in words: the overall row reads `all segments`."""
    return "all segments" if segment == OVERALL_SEGMENT else segment


def parse_threshold(text: str) -> tuple[str | None, str, float]:
    """`[SEGMENT:]METRIC=VALUE` -> (segment, or None for every segment; the metric as written;
    the value). ValueError naming the text when it is malformed or VALUE is not in [0, 1].

    The segment is everything before the last `:` of the part before `=`, so a segment name may
    itself hold a colon; metric names hold neither. The metric is returned as written: callers
    canonicalise it (`metrics.parse_metric`) and may accept names of their own (`coverage`)."""
    key, sep, value_text = text.rpartition("=")
    segment, colon, metric = key.rpartition(":")
    try:
        value = float(value_text)
    except ValueError:
        value = math.nan
    if not sep or not metric.strip() or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{_THRESHOLD_SYNTAX}, got {text!r}")
    if colon and not segment.strip():
        raise ValueError(f"empty segment name in {text!r}")
    return (segment.strip() or None), metric.strip(), value
