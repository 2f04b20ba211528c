"""Labels derived from logs: click logs read as impressions (`impressions`), debiased for position
into graded judgments (`clicks`), written as a judgments file (`command`). Pure: numpy and
pyarrow, never DuckDB or Dagster. The method and its assumptions: docs/click-labels.md."""
