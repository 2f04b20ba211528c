"""The regression report's "Why" section in HTML (`reports.why`): per finding its three lines,
the causes with their shares and the contributors' table. Every string is escaped."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from retrieval_pipeline.ab.why import PairedWhy
from retrieval_pipeline.reports.html import esc, render_table
from retrieval_pipeline.reports.why import CAUSES, SHOWN, Explanation
from retrieval_pipeline.text import number


def _causes_table(explanation: Explanation) -> str:
    frame = pd.DataFrame(
        {
            "cause": [CAUSES[name] for name, _ in explanation.causes],
            "change": [value for _, value in explanation.causes],
            "share": [
                number(explanation.share(value), percent=True) for _, value in explanation.causes
            ],
        }
    )
    return render_table(frame, caption="The change, split into causes (they add up to it)")


def _contributors_table(explanation: Explanation) -> str:
    rows = []
    for c in explanation.contributors:
        parts = c.parts() or {}
        rows.append(
            {
                "#": c.place,
                "query": c.query_id,
                "traces (day)": c.day_traces,
                "traces (baseline)": c.base_traces,
                "baseline mean": c.base_mean,
                "day mean": c.day_mean,
                "contribution": c.contribution,
                "rankings": parts.get("rankings"),
                "labels": parts.get("labels"),
                "coverage": parts.get("coverage"),
                "mix": c.mix,
                "what changed": c.what_changed(),
            }
        )
    caption = f"The queries that moved it most (at most {SHOWN})"
    return render_table(pd.DataFrame(rows), caption=caption)


def why_html(explanations: Sequence[Explanation]) -> str | None:
    """The section, or None on a day without misses or significant drops."""
    if not explanations:
        return None
    parts = [
        "<section><h2>Why</h2><p>Per finding: the change split into causes, the queries that "
        "moved it most and what changed in them (docs/why.md).</p>"
    ]
    for e in explanations:
        lines = "".join(f"<li>{esc(line)}</li>" for line in e.lines())
        parts.append(f"<h3>{esc(e.kind.capitalize() + ': ' + e.title())}</h3><ul>{lines}</ul>")
        parts.append(_causes_table(e))
        if e.contributors:
            parts.append(_contributors_table(e))
    return "".join(parts) + "</section>"


def paired_why_html(found: Sequence[PairedWhy]) -> str | None:
    """The comparison report's section on the paired queries behind each worse cell (`ab.why`),
    or None without one."""
    if not found:
        return None
    parts = ["<section><h2>Why: the paired queries</h2>"]
    for w in found:
        columns = ["query_id", "control_mean", "candidate_mean", "difference", "contribution"]
        if w.causes:  # the nightly's: each query's causes and what changed in it
            columns.append("what_changed")
        frame = pd.DataFrame([c.to_dict() for c in w.contributors], columns=columns)
        parts.append(f"<p>{esc(w.line())}.</p>")
        if w.causes:
            parts.append(f"<p>Causes: {esc(w.causes_words())}.</p>")
        headers = {"query_id": "query", "control_mean": "control", "candidate_mean": "candidate"}
        headers["what_changed"] = "what changed"
        parts.append(render_table(frame, headers=headers))
    return "".join(parts) + "</section>"
