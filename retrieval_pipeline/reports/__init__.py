"""Reports: HTML primitives, SVG charts, the regression and comparison reports, per-query output
files. Pure: neither DuckDB nor Dagster."""
