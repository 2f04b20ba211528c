"""`evaluate --trec-run RUN` and `--output-format trec`: a TREC run in, trec_eval's lines out.

The run is read by `ingest.trec` (one trace per query, trec_eval's order), scored like any traces
(with `--judgments` for its qrels), and printed by `reports.trec` in trec_eval's format: each
scored query's lines, then `all`. The id on each line is the trace's id, which for a TREC run is
the qid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrieval_pipeline.ingest.trec import TrecRun, stream_trec_run
from retrieval_pipeline.metrics import Gain, check_gain
from retrieval_pipeline.reports.trec import trec_eval_lines

if TYPE_CHECKING:
    import pyarrow as pa

    from retrieval_pipeline.store import DayBatches
    from retrieval_pipeline.warehouse.evaluation import EvaluationRun


# Dropped queries named in the summary; the rest are counted.
SHOWN_QUERIES = 20


@dataclass(frozen=True)
class TrecInput:
    """A TREC run read for `evaluate`."""

    run: TrecRun

    @property
    def records(self) -> pa.Table | DayBatches:
        return self.run.records

    def counts(self) -> dict[str, object]:
        return {
            "trec_run": self.run.source_file,
            "run_id": self.run.run_id,
            "run_lines_read": self.run.read,
            "run_lines_quarantined": self.run.quarantined,
            "run_queries": self.run.queries,
            "run_queries_without_valid_line": list(self.run.dropped),
        }

    def words(self) -> str:
        return (
            f"TREC run {self.run.source_file} ({self.run.run_id or 'no tag'}): {self.run.read} "
            f"lines read, {self.run.kept} ranked documents of {self.run.queries} "
            f"queries, {self.run.quarantined} lines quarantined."
        )

    def dropped_words(self) -> str | None:
        """The queries of the run that are not scored because none of their lines could be read,
        in one sentence (None when there are none)."""
        dropped = self.run.dropped
        if not dropped:
            return None
        shown = ", ".join(dropped[:SHOWN_QUERIES]) + (
            ", ..." if len(dropped) > SHOWN_QUERIES else ""
        )
        if len(dropped) == 1:
            return f"1 query had no valid run line and is not scored: {shown}"
        return f"{len(dropped)} queries had no valid run line and are not scored: {shown}"


def read_run(path: str) -> TrecInput:
    return TrecInput(stream_trec_run(path))


def trec_output(run: EvaluationRun, trec: TrecInput | None, gain: str) -> list[str]:
    """trec_eval's lines (`-q`) for the scored traces of `run`, the run's tag as `runid`."""
    checked: Gain = check_gain(gain)
    names = [metric.name for metric in run.metrics]
    scored = run.per_query.dropna(subset=names)
    per_query = {
        str(trace_id): {name: float(value) for name, value in zip(names, values, strict=True)}
        for trace_id, *values in scored[["trace_id", *names]].itertuples(index=False)
    }
    run_id = trec.run.run_id if trec is not None else None
    return trec_eval_lines(per_query, run.metrics, checked, run_id=run_id)
