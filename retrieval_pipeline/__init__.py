"""Score recorded retrieval traces: NDCG, MRR, precision, recall and MAP, trec_eval's way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["evaluate"]


def evaluate(traces: Any, metrics: Any = None, **options: Any) -> pd.DataFrame:
    """Per-query metrics as a DataFrame; see `retrieval_pipeline.warehouse.evaluation.evaluate`.

    Imported on first call so that `import retrieval_pipeline` (and the CLI) stays light.
    """
    from retrieval_pipeline.metrics import DEFAULT_METRICS
    from retrieval_pipeline.warehouse.evaluation import evaluate as _evaluate

    return _evaluate(traces, DEFAULT_METRICS if metrics is None else metrics, **options)
